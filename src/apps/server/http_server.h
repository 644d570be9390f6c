// File: http_server.h
// -----------------------------------------------------------------------------
// Server: the OpenAI-compatible HTTP application of one LLMEngine, with the probing additions of
// Undercurrent's wire format (see protocol.h), behind HttpFront (http_front.h: Boost.Beast,
// event-driven, every size and phase bounded).
//
//   POST /v1/completions, POST /v1/chat/completions   (stream: true -> server-sent events)
//   GET  /v1/models, /v1/models/{model}, /v1/steering, /health, /metrics
//   POST /tokenize, POST /detokenize, GET /tokenizer_info   (vLLM's; tokenize_protocol.h)
// Completions return logprobs (with echo and best_of) and chat completions logprobs /
// top_logprobs in OpenAI's shapes, both vLLM's prompt_logprobs (logprobs_json.h).
//
// Requests are answered on HttpFront's handler threads; their engine requests (n choices, or
// one per prompt of a batch) join the one engine thread's batch (EngineLoop). Responses,
// streamed or not, are written as they are produced with chunked transfer encoding, without a
// thread waiting on them; while a response waits, the connection is written to at least every
// `heartbeat_seconds` (an SSE comment, or JSON whitespace before a non-streamed body) so that a
// client that went away is noticed and its requests are aborted, which frees their KV blocks.
//
// /health and /metrics are answered on a thread of their own, never behind busy handlers. With
// an API key, a request without it is refused with 401 on its head, before its body is read.
//
// Errors are OpenAI-style bodies {"error": {message, type, param, code}}: 400 malformed HTTP or
// JSON (nested deeper than io::kMaxJsonDepth included), wrong types, unknown fields, impossible
// values and prompts longer than the context (code context_length_exceeded, as OpenAI and vLLM do);
// 401 a missing or wrong bearer key; 404 unknown routes and models; 408 a body that did not arrive
// in time; 413 bodies over max_body_bytes (after decompression); 415 an unknown Content-Encoding;
// 431 too many or too large headers; 503 while shutting down or over max_connections (or
// max_connections_per_client). None affects other requests; bytes that are not UTF-8 (in paths,
// bodies, the model name) are replaced in answers, and values quoted from the request are cut to
// kMaxEchoBytes.
//
// Shutdown (SIGTERM): connections waiting for a request are closed, new requests get 503,
// in-flight requests run to completion (after drain_timeout_seconds they are aborted), then
// every connection closes and Serve returns.
//
// Thread-safety: Bind then Serve on one thread; Shutdown from any thread (not from a signal
// handler); Handle and ReloadProbeSets from any thread. The engine, the probe sets and the
// metrics must outlive the Server.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "apps/server/chat_prompt.h"
#include "apps/server/engine_loop.h"
#include "apps/server/http_front.h"
#include "apps/server/http_message.h"
#include "apps/server/server_metrics.h"
#include "base/status.h"
#include "engine/llm_engine.h"
#include "probe/runtime/probe_sets.h"

namespace uc::server {

// A steering vector set registered at start-up (serve --steering-module NAME=FILE): a control
// vector file's directions, added to the residual stream after their blocks, every token.
struct SteeringModule {
  std::filesystem::path file;
  std::shared_ptr<const worker::SteeringConfig> config;
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                   // 0: any free port (see port())
  std::string api_key;               // empty: no authentication
  bool metrics_without_key = false;  // /metrics open even with an api_key (private scrapers)
  std::string served_model_name;     // the `model` clients name; required
  std::filesystem::path model_path;
  int64_t max_body_bytes = int64_t{8} << 20;  // after Content-Encoding is undone
  int http_threads = 8;  // handler threads (parse, render, tokenize); connections need none
  int max_connections = 1024;
  // Open connections from one address: -1 half of max_connections, 0 no limit.
  int max_connections_per_client = -1;
  double idle_timeout_seconds = 60;    // a kept-alive connection waiting for its next request
  double header_timeout_seconds = 10;  // a request head, from its first byte
  double body_timeout_seconds = 60;    // a request body
  double write_timeout_seconds = 60;   // each write of a response
  double heartbeat_seconds = 1.0;
  // How long a finished response waits for its probe results (async points deliver them once
  // their queues drained, which the session bounds by its own drain timeout).
  double probe_result_timeout_seconds = 60.0;
  double drain_timeout_seconds = 60.0;
  // Named steering vector sets a request picks with `steering_name` (GET /v1/steering).
  std::map<std::string, SteeringModule> steering_modules;
};

class Server {
 public:
  // `probe_sets` may be null (no spec). `metrics` is the registry the probes record into (the
  // server adds the engine's and its own series); `chat` renders chat prompts.
  Server(engine::LLMEngine* engine, probe::ProbeSets* probe_sets, probe::Metrics* metrics,
         std::unique_ptr<ChatPrompt> chat, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listening socket. Unavailable when the address cannot be bound.
  Status Bind();
  // The bound port (after Bind).
  int port() const { return port_; }

  // Serves until Shutdown() and the drain complete. REQUIRES: Bind() succeeded.
  Status Serve();
  // Begins the drain; a second call aborts the requests still running. Returns at once.
  void Shutdown();

  // Answers one request (what HttpFront calls). Never throws for anything a client sends.
  HttpResponse Handle(const HttpRequest& req);
  // Judges a request on its head, before its body is read (HttpFront's head check): 401 when an
  // API key is set and the request lacks it, except on /health (and /metrics with
  // metrics_without_key); else 0. An unauthenticated client thus never gets its body buffered
  // nor a `100 Continue`.
  int CheckHead(const HttpRequest& head) const;
  // The OpenAI-style error response for a status the front end found (400, 401, 404, 413, ...).
  HttpResponse ErrorResponse(int status, const std::string& method, const std::string& path) const;
  // Re-reads the probe sets' spec files (POST /v1/probes/reload and SIGHUP): requests in flight
  // keep the version they started with; a spec that fails to load changes nothing. Returns the
  // new version. FailedPrecondition without probe sets.
  StatusOr<int64_t> ReloadProbeSets();

 private:
  struct ResponseState;
  class CompletionStream;
  class InFlight;
  HttpResponse HandleCompletion(const HttpRequest& req, Endpoint endpoint);
  HttpResponse HandleModels(const HttpRequest& req);
  HttpResponse HandleTokenize(const HttpRequest& req);       // POST /tokenize
  HttpResponse HandleDetokenize(const HttpRequest& req);     // POST /detokenize
  HttpResponse HandleTokenizerInfo(const HttpRequest& req);  // GET /tokenizer_info
  // A 404 naming `model` when it is set and not the served model.
  std::optional<ApiError> CheckModel(const std::string& model) const;
  HttpResponse HandleSteering(const HttpRequest& req);
  HttpResponse HandleProbes(const HttpRequest& req);        // GET /v1/probes
  HttpResponse HandleProbesReload(const HttpRequest& req);  // POST /v1/probes/reload
  // Pins the engine requests to the request's probe set and gives them its spec steering; on
  // success the ids must be submitted or unassigned.
  std::optional<ApiError> AssignProbeSet(const CompletionRequest& request,
                                         std::vector<EngineRequest>* requests) const;
  // The request's steering (its steering_name's vectors, then its own), checked against the
  // model; null when it has none.
  std::optional<ApiError> BuildSteering(const CompletionRequest& request,
                                        engine::RequestSteering* out) const;
  static HttpResponse Respond(const ApiError& error);
  // True when no API key is set or the request carries it ("Authorization: Bearer KEY").
  bool Authorized(const HttpRequest& req) const;
  static ApiError Unauthorized();  // 401 invalid_api_key
  // Builds the engine requests; an error when a prompt does not fit.
  std::optional<ApiError> BuildEngineRequests(const CompletionRequest& request,
                                              const std::string& id,
                                              std::vector<EngineRequest>* out, Usage* usage) const;
  // Appends what `state` has ready to `*out`; true when the response is complete.
  bool Produce(ResponseState& state, std::string* out) const;
  nlohmann::json ModelCard() const;

  engine::LLMEngine* const engine_;
  probe::ProbeSets* const sets_;
  const ServerOptions options_;
  std::unique_ptr<ChatPrompt> chat_;
  ServerMetrics metrics_;
  EngineLoop loop_;
  std::unique_ptr<HttpFront> front_;  // declared after loop_: its connections use the loop
  int port_ = 0;
  int64_t started_ = 0;  // unix seconds

  std::mutex mu_;
  std::condition_variable cv_;
  int shutdown_requests_ = 0;  // guarded by mu_
  int64_t in_flight_ = 0;      // guarded by mu_
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> next_id_{0};
};

}  // namespace uc::server
