// File: http_front.h
// -----------------------------------------------------------------------------
// HttpFront: the HTTP/1.1 front end of `undercurrent serve`, built on Boost.Beast and
// Boost.Asio, made for clients on the open internet.
//
//   - Event-driven: a few I/O threads serve every connection; an idle, slow or streaming
//     connection costs no thread. Handlers (parsing JSON, rendering chat templates, tokenizing)
//     run on a separate pool of `handler_threads`; a streamed response is written as its
//     ResponseStream says data is ready, never by a thread that waits.
//   - Bounded: at most `max_connections` connections, and at most `max_connections_per_client`
//     from one peer address (more get a 503 and are closed); the head of a request at most
//     `max_header_bytes` and `max_header_fields` (431 above); the body at most `max_body_bytes`
//     *after* chunked transfer coding and gzip/deflate content coding are undone, checked while
//     reading, before anything larger is buffered (413 above). After a request with a large
//     body (or one refused while reading it) the process gives its free heap back to the system
//     (Start sets malloc's mmap threshold to 1 MiB, process-wide, so that large blocks are
//     unmapped when freed).
//   - Checked on the head: the `head_check` (e.g. the API key) runs once the head is read; a
//     refusal is answered and the connection closed without reading the body (and without a
//     `100 Continue`). Framing per RFC 9112 §6.1/§6.3: a Transfer-Encoding other than exactly
//     `chunked` (any case), or one beside a Content-Length, is a 400 and the connection closes,
//     so no bytes of one request are ever served as another.
//   - Liveness: GET requests for `light_paths` (/health, /metrics) run on a thread of their own,
//     never queued behind busy handler threads.
//   - Timed per phase: waiting for a request on a kept-alive connection (`idle_timeout`), the
//     whole head from its first byte (`header_timeout`, so a client that dribbles bytes is cut
//     off), the whole body (`body_timeout`), and each write (`write_timeout`, a client that does
//     not read its response is dropped).
//   - HTTP/1.1 semantics: keep-alive, pipelined requests answered in order, a client's
//     half-close (request sent, then shutdown of its sending side) still gets its answer,
//     `Expect: 100-continue` answered.
//   - Shutdown: BeginShutdown closes every connection that waits for or is reading a request
//     and marks the others to close after their response (connections accepted later serve one
//     request each); Stop closes whatever is left and returns once every thread has ended.
//
// Errors found by the front end itself (malformed requests, limits) are answered with
// `error_responder`'s response and the connection is closed after a short lingering read, so a
// client still sending its body sees the answer rather than a reset.
//
// Thread-safety: Bind, Start, BeginShutdown and Stop from one controlling thread; the handler
// and the callbacks run on the front end's threads and must be thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "apps/server/http_message.h"
#include "base/status.h"

namespace uc::server {

struct HttpFrontOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port
  int io_threads = 2;
  int handler_threads = 8;
  int max_connections = 1024;
  // By peer address: -1 (default) half of max_connections (after it is fitted to the open-file
  // limit), 0 no limit.
  int max_connections_per_client = -1;
  int64_t max_header_bytes = 32 << 10;
  int max_header_fields = 100;
  int64_t max_body_bytes = int64_t{8} << 20;
  double idle_timeout_seconds = 60;
  double header_timeout_seconds = 10;
  double body_timeout_seconds = 60;
  double write_timeout_seconds = 60;
  double stream_tick_seconds = 1.0;  // how often a quiet ResponseStream is polled
  // GET paths answered on a thread of their own, not the handler pool (cheap routes that must
  // answer while every handler is busy: liveness probes, metrics scrapes).
  std::vector<std::string> light_paths;
};

// The Transfer-Encoding and Content-Length of a request head, judged per RFC 9112 §6.1/§6.3:
// 0 when acceptable (no Transfer-Encoding, or exactly one coding `chunked` in any case and no
// Content-Length), else 400 (the front end answers it and closes the connection).
int CheckFraming(const std::vector<std::pair<std::string, std::string>>& headers);

// Parses one whole request from `bytes` with the front end's limits and decoding (what a
// connection does as bytes arrive): 0 and `*out` filled, or the status the front end answers
// (400, 413, 415, 431). Bytes after the first request are ignored. For tests and fuzzing.
int ParseHttpRequest(std::string_view bytes, const HttpFrontOptions& options, HttpRequest* out);

class HttpFront {
 public:
  // Answers a request that was read whole. May throw: an exception becomes a 500.
  using Handler = std::function<HttpResponse(const HttpRequest&)>;
  // The response to an error the front end found (status 400, 404, 408, 413, 415, 431, 500,
  // 503, or what the head check returned); `method` and `path` are empty when the request line was
  // not read.
  using ErrorResponder =
      std::function<HttpResponse(int status, const std::string& method, const std::string& path)>;
  // Called after every response's head was written (`path` empty as above).
  using ResponseHook = std::function<void(const std::string& path, int status)>;
  // Judges a request on its head alone (`body` empty): 0 to read the body and handle it, or the
  // status to answer at once (through the ErrorResponder) before closing the connection.
  using HeadCheck = std::function<int(const HttpRequest& head)>;

  HttpFront(HttpFrontOptions options, Handler handler, ErrorResponder error_responder,
            ResponseHook on_response);
  ~HttpFront();  // Stop()s
  HttpFront(const HttpFront&) = delete;
  HttpFront& operator=(const HttpFront&) = delete;

  // Installs the head check (none by default). Before Start.
  void set_head_check(HeadCheck check);

  // Opens the listening socket and fits the connection limits to the open-file limit (raised
  // when it can be; fewer connections, with a warning, when it cannot). Unavailable when the
  // address cannot be bound; FailedPrecondition, naming `ulimit -n`, when the open-file limit
  // leaves room for too few connections to serve.
  Status Bind();
  int port() const;  // after Bind

  // Starts accepting and serving on the I/O threads. REQUIRES: Bind() succeeded.
  void Start();
  // Closes connections that wait for (or are reading) a request; the others close after their
  // response. Returns at once.
  void BeginShutdown();
  // Closes the listener and every connection, waits for the threads. Idempotent.
  void Stop();

  // The number of open connections (for tests and metrics).
  int connections() const;

 private:
  friend class HttpConnection;
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace uc::server
