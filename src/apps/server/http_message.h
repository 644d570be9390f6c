// File: http_message.h
// -----------------------------------------------------------------------------
// The HTTP request and response that pass between the front end (HttpFront: sockets, parsing,
// limits, timeouts) and the application (Server: routes, OpenAI protocol). Plain values, no
// library types: the application's handlers can be called, tested and fuzzed without a socket.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace uc::server {

// A request whose head and body were read whole and within limits.
struct HttpRequest {
  std::string method;  // as sent, e.g. "GET"
  std::string target;  // as sent, e.g. "/v1/models?x=1"
  std::string path;    // the target's path, percent-decoded (bytes, not necessarily UTF-8)
  std::vector<std::pair<std::string, std::string>> headers;  // in order, names as sent
  std::string body;                                          // after Content-Encoding was undone

  // The value of the first header named `name` (case-insensitive); empty when absent.
  std::string Header(const std::string& name) const;
};

// A response produced piece by piece (server-sent events, or a JSON body preceded by
// heartbeats). The front end calls Poll on one thread at a time (the connection's): after the
// head is written, after each piece is written, whenever the notifier it installed fires, and
// at least every `tick` otherwise. Destroying the stream is how the application learns that
// the client went away (or the server stopped) before the end.
class ResponseStream {
 public:
  virtual ~ResponseStream() = default;
  // Appends what is ready to `*out` (possibly nothing); true when the response is complete,
  // `*out` then holding its last bytes.
  virtual bool Poll(std::string* out) = 0;
  // Installs `notify`, which may be called from any thread when Poll would have more to say.
  // Called once, before the first Poll.
  virtual void SetNotifier(std::function<void()> notify) = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type;
  std::vector<std::pair<std::string, std::string>> headers;  // beyond Content-Type
  std::string body;                                          // when `stream` is null
  std::shared_ptr<ResponseStream> stream;  // when set, sent with chunked transfer encoding
  bool close = false;                      // close the connection after this response
};

// Percent-decodes the path of a request target ("/a%20b?q" -> "/a b"); '+' is kept. Bytes that
// do not form an escape are kept as they are.
std::string DecodeTargetPath(const std::string& target);

}  // namespace uc::server
