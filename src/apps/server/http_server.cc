#include "apps/server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>
#include <thread>

#include "base/logging.h"

namespace uc::server {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr char kJson[] = "application/json";

// JSON text that never throws: bytes that are not UTF-8 (a client's percent-decoded path, a
// model name from a file) become U+FFFD instead of an exception past the handler.
std::string JsonText(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}
// Not "application/json": httplib would gzip a chunked JSON body for clients that accept it,
// and a compressor that buffers would hide a heartbeat from the socket.
constexpr char kChunkedJson[] = "application/json; charset=utf-8";

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// A bounded label for the metrics: the known routes, else "other".
std::string RouteLabel(const std::string& path) {
  for (const char* route :
       {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics"}) {
    if (path == route) return route;
  }
  return path.rfind("/v1/models/", 0) == 0 ? "/v1/models/{model}" : "other";
}

ApiError ErrorForStatus(const httplib::Request& req, int status, int64_t max_body_bytes) {
  ApiError e;
  e.http_status = status;
  switch (status) {
    case 404:
      e.message = "Invalid URL (" + req.method + " " + req.path + ")";
      e.code = "not_found";
      break;
    case 413:
      e.message = "The request body is larger than this server's limit of " +
                  std::to_string(max_body_bytes) + " bytes.";
      e.code = "request_too_large";
      break;
    case 400:
      e.message = "Malformed HTTP request.";
      break;
    default:
      e.message = "HTTP error " + std::to_string(status) + ".";
      e.type = status >= 500 ? "server_error" : "invalid_request_error";
  }
  return e;
}

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

// Counts a request from acceptance to its last byte; Serve's drain waits for none to be left.
class Server::InFlight {
 public:
  // Null while shutting down.
  static std::unique_ptr<InFlight> Enter(Server* server) {
    std::lock_guard<std::mutex> lock(server->mu_);
    if (server->shutdown_requests_ > 0) return nullptr;
    ++server->in_flight_;
    return std::unique_ptr<InFlight>(new InFlight(server));
  }
  ~InFlight() {
    {
      std::lock_guard<std::mutex> lock(server_->mu_);
      --server_->in_flight_;
    }
    server_->cv_.notify_all();
  }

 private:
  explicit InFlight(Server* server) : server_(server) {}
  Server* server_;
};

struct Server::ResponseState {
  struct Choice {
    std::optional<engine::RequestOutput> output;
    std::optional<json> probing;
    Clock::time_point finished_at;
    bool finish_sent = false;
  };
  ~ResponseState() {
    // Normally every choice finished; otherwise the client went away mid-response.
    loop->Release(*channel, "client disconnected");
  }
  ChoiceResult Result(size_t i) const {
    return {static_cast<int>(i), *choices[i].output, choices[i].probing};
  }

  EngineLoop* loop = nullptr;
  std::shared_ptr<RequestChannel> channel;
  ResponseContext ctx;
  bool stream = false;
  bool include_usage = false;
  std::vector<Choice> choices;
  Usage usage;
  bool started = false;
  Clock::time_point last_write;
  std::unique_ptr<InFlight> in_flight;
};

Server::Server(engine::LLMEngine* engine, probe::ProbingSession* session, probe::Metrics* metrics,
               std::unique_ptr<ChatPrompt> chat, ServerOptions options)
    : engine_(engine),
      session_(session),
      options_(std::move(options)),
      http_(std::make_unique<httplib::Server>()),
      chat_(std::move(chat)),
      metrics_(metrics),
      loop_(engine, session) {
  started_ = static_cast<int64_t>(std::time(nullptr));
  next_id_ = std::random_device{}();
  loop_.set_step_hook([this](const engine::EngineStats& stats, double seconds) {
    metrics_.metrics().RecordEngineStep(stats, seconds);
  });
  loop_.set_finish_hook([this](const engine::RequestOutput& out) {
    metrics_.metrics().RecordFinished(FinishReasonOf(out));
  });
  metrics_.metrics().RecordEngineStep(engine_->stats(), 0.0);
  InstallRoutes();
}

Server::~Server() = default;

void Server::InstallRoutes() {
  const int threads = std::max(1, options_.http_threads);
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(static_cast<size_t>(options_.max_body_bytes));
  http_->set_keep_alive_max_count(1000);
  http_->set_read_timeout(30, 0);
  // Replaces httplib's defaults (SO_REUSEADDR, and SO_REUSEPORT, which would let a second
  // server share the port); keeps the listening socket so that Bind can deepen its backlog.
  http_->set_socket_options([this](socket_t sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (listen_fd_ < 0) listen_fd_ = static_cast<int>(sock);
  });
  http_->set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;  // one of ours
    res.set_content(JsonText(ErrorForStatus(req, res.status, options_.max_body_bytes).Body()),
                    kJson);
  });
  http_->set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics_.RecordHttpResponse(RouteLabel(req.path), res.status);
  });
  http_->Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleCompletion(req, res, Endpoint::kCompletions);
  });
  http_->Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleCompletion(req, res, Endpoint::kChatCompletions);
  });
  http_->Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    HandleModels(req, res);
  });
  http_->Get("/v1/models/(.+)", [this](const httplib::Request& req, httplib::Response& res) {
    HandleModels(req, res);
  });
  http_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool draining = draining_.load();
    res.status = draining ? 503 : 200;
    res.set_content(JsonText(json{{"status", draining ? "draining" : "ok"},
                                  {"model", options_.served_model_name}}),
                    kJson);
  });
  http_->Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    if (!options_.metrics_without_key && !Authorized(req)) return Respond(res, Unauthorized());
    res.set_content(metrics_.Serialize(), "text/plain; version=0.0.4; charset=utf-8");
  });
}

Status Server::Bind() {
  const int port = options_.port == 0
                       ? http_->bind_to_any_port(options_.host)
                       : (http_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
  if (port <= 0) {
    return UnavailableError("cannot listen on " + options_.host + ":" +
                            std::to_string(options_.port) +
                            " (address in use, or not an address of this machine)");
  }
  port_ = port;
  // httplib listens with a backlog of 5: a burst of clients connecting at once would overflow
  // it, and a connection whose handshake the kernel dropped can arrive after the read timeout.
  if (listen_fd_ >= 0) ::listen(listen_fd_, SOMAXCONN);
  return OkStatus();
}

Status Server::Serve() {
  loop_.Start();
  std::atomic<bool> listening_done{false};
  std::thread listener([this, &listening_done] {
    http_->listen_after_bind();
    listening_done = true;
  });
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return shutdown_requests_ > 0; });
    UC_LOG(INFO) << "shutting down: draining " << in_flight_ << " request(s)";
    const auto deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(options_.drain_timeout_seconds));
    bool aborted = false;
    while (in_flight_ > 0) {
      if (!aborted && (shutdown_requests_ > 1 || Clock::now() >= deadline)) {
        UC_LOG(WARNING) << "aborting " << in_flight_ << " request(s) still running";
        lock.unlock();
        loop_.AbortAll("server shutting down");
        lock.lock();
        aborted = true;
      }
      cv_.wait_for(lock, std::chrono::milliseconds(100));
    }
  }
  // stop() before the listener runs would be lost; it runs at once after Bind.
  while (!http_->is_running() && !listening_done) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  http_->stop();
  listener.join();
  loop_.Stop();
  return OkStatus();
}

void Server::Shutdown() {
  draining_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++shutdown_requests_;
  }
  cv_.notify_all();
}

void Server::Respond(httplib::Response& res, const ApiError& error) const {
  res.status = error.http_status;
  res.set_content(JsonText(error.Body()), kJson);
}

json Server::ModelCard() const {
  return {{"id", options_.served_model_name},
          {"object", "model"},
          {"created", started_},
          {"owned_by", "undercurrent"},
          {"root", options_.model_path.filename().string()},
          {"max_model_len", engine_->max_model_len()}};
}

bool Server::Authorized(const httplib::Request& req) const {
  return options_.api_key.empty() ||
         ConstantTimeEquals(req.get_header_value("Authorization"), "Bearer " + options_.api_key);
}

ApiError Server::Unauthorized() {
  ApiError e;
  e.http_status = 401;
  e.message = "Incorrect API key provided. Send it as 'Authorization: Bearer KEY'.";
  e.code = "invalid_api_key";
  return e;
}

void Server::HandleModels(const httplib::Request& req, httplib::Response& res) {
  if (!Authorized(req)) return Respond(res, Unauthorized());
  if (req.matches.size() > 1) {
    if (req.matches[1] != options_.served_model_name) {
      ApiError e;
      e.http_status = 404;
      e.message = "The model '" + req.matches[1].str() + "' does not exist.";
      e.param = "model";
      e.code = "model_not_found";
      return Respond(res, e);
    }
    res.set_content(JsonText(ModelCard()), kJson);
    return;
  }
  res.set_content(JsonText(json{{"object", "list"}, {"data", json::array({ModelCard()})}}), kJson);
}

std::optional<ApiError> Server::BuildEngineRequests(const CompletionRequest& request,
                                                    const std::string& id,
                                                    std::vector<EngineRequest>* out,
                                                    Usage* usage) const {
  const tokenizer::Tokenizer& tok = engine_->tokenizer();
  std::vector<std::vector<int32_t>> prompts;
  const bool chat = request.endpoint == Endpoint::kChatCompletions;
  const std::string prompt_param = chat ? "messages" : "prompt";
  if (chat) {
    StatusOr<std::string> text = chat_->Render(request.messages);
    if (!text.ok()) {
      ApiError e = BadRequest(text.status().message(), "messages");
      if (text.status().code() == StatusCode::kFailedPrecondition) {
        e.code = "chat_template_unavailable";
      } else if (text.status().code() != StatusCode::kInvalidArgument) {
        e.http_status = 500;
        e.type = "server_error";
      }
      return e;
    }
    prompts.push_back(tok.Encode(*text, /*add_bos=*/false, /*parse_special=*/true));
  } else {
    for (const PromptInput& p : request.prompts) {
      prompts.push_back(p.text.has_value()
                            ? tok.Encode(*p.text, tok.add_bos_token(), /*parse_special=*/true)
                            : p.ids);
    }
  }
  const int max_len = engine_->max_model_len();
  int index = 0;
  for (const std::vector<int32_t>& ids : prompts) {
    const int len = static_cast<int>(ids.size());
    if (len == 0) return BadRequest("The prompt has no tokens.", prompt_param);
    // max_tokens may be as large as INT32_MAX: compare without adding (no overflow).
    if (len >= max_len || (request.max_tokens && *request.max_tokens > max_len - len)) {
      std::string message = "This model's maximum context length is " + std::to_string(max_len) +
                            " tokens. However, ";
      message += request.max_tokens
                     ? "you requested " +
                           std::to_string(int64_t{len} + int64_t{*request.max_tokens}) +
                           " tokens (" + std::to_string(len) + " in the " + prompt_param + ", " +
                           std::to_string(*request.max_tokens) +
                           " for the completion). Please reduce the length of the " + prompt_param +
                           " or completion."
                     : "your " + prompt_param + " has " + std::to_string(len) +
                           " tokens, which leaves no room for the completion.";
      return BadRequest(message, request.max_tokens && len < max_len ? "max_tokens" : prompt_param,
                        "context_length_exceeded");
    }
    usage->prompt_tokens += len;
    worker::SamplingParams params = request.sampling;
    const int room = max_len - len;
    params.max_tokens = request.max_tokens.value_or(chat ? room : std::min(16, room));
    for (int j = 0; j < request.n; ++j) {
      EngineRequest r{id + "-" + std::to_string(index++), engine::Prompt::Ids(ids), params};
      // Choice j of a seeded request: seed + j, so choice 0 equals the same request with n = 1.
      if (request.sampling.seed) r.params.seed = *request.sampling.seed + static_cast<uint64_t>(j);
      out->push_back(std::move(r));
    }
  }
  return std::nullopt;
}

void Server::HandleCompletion(const httplib::Request& req, httplib::Response& res,
                              Endpoint endpoint) {
  if (!Authorized(req)) return Respond(res, Unauthorized());
  std::unique_ptr<InFlight> in_flight = InFlight::Enter(this);
  if (in_flight == nullptr) {
    ApiError e;
    e.http_status = 503;
    e.type = "server_error";
    e.message = "The server is shutting down.";
    e.code = "server_shutting_down";
    res.set_header("Connection", "close");
    return Respond(res, e);
  }
  json body;
  try {
    body = json::parse(req.body);
  } catch (const json::parse_error& e) {
    return Respond(res, BadRequest(std::string("We could not parse the JSON body of your "
                                               "request: ") +
                                   e.what()));
  }
  CompletionRequest request;
  if (auto error = ParseCompletionRequest(body, endpoint, &request)) return Respond(res, *error);
  if (!request.model.empty() && request.model != options_.served_model_name) {
    ApiError e;
    e.http_status = 404;
    e.message = "The model '" + request.model + "' does not exist. This server serves '" +
                options_.served_model_name + "'.";
    e.param = "model";
    e.code = "model_not_found";
    return Respond(res, e);
  }
  const bool chat = endpoint == Endpoint::kChatCompletions;
  const std::string id = std::string(chat ? "chatcmpl-" : "cmpl-") + Hex(next_id_++);
  std::vector<EngineRequest> requests;
  Usage usage;
  if (auto error = BuildEngineRequests(request, id, &requests, &usage)) {
    return Respond(res, *error);
  }
  const size_t num_choices = requests.size();
  StatusOr<std::shared_ptr<RequestChannel>> channel = loop_.Submit(std::move(requests));
  if (!channel.ok()) {
    if (channel.status().code() == StatusCode::kInvalidArgument) {
      return Respond(res, BadRequest(channel.status().message()));
    }
    ApiError e;
    e.http_status = 500;
    e.type = "server_error";
    e.message = channel.status().message();
    return Respond(res, e);
  }
  auto state = std::make_shared<ResponseState>();
  state->loop = &loop_;
  state->channel = std::move(channel).value();
  state->ctx = {endpoint, id, static_cast<int64_t>(std::time(nullptr)), options_.served_model_name,
                session_ != nullptr};
  state->stream = request.stream;
  state->include_usage = request.include_usage;
  state->choices.resize(num_choices);
  state->usage = usage;
  state->last_write = Clock::now();
  state->in_flight = std::move(in_flight);
  if (request.stream) res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      request.stream ? "text/event-stream" : kChunkedJson,
      [this, state](size_t, httplib::DataSink& sink) { return Produce(*state, sink); });
}

bool Server::Produce(ResponseState& s, httplib::DataSink& sink) const {
  const auto now_write = [&](const std::string& data) {
    if (data.empty()) return true;
    if (!sink.write(data.data(), data.size())) return false;
    s.last_write = Clock::now();
    return true;
  };
  std::string out;
  if (!s.started) {
    s.started = true;
    if (s.stream && s.ctx.endpoint == Endpoint::kChatCompletions) {
      for (size_t i = 0; i < s.choices.size(); ++i) {
        out += SseEvent(RoleChunk(s.ctx, static_cast<int>(i), s.include_usage));
      }
    }
  }
  const auto poll = std::chrono::milliseconds(
      std::clamp<int64_t>(static_cast<int64_t>(options_.heartbeat_seconds * 1000), 1, 50));
  for (ChannelEvent& e : s.channel->Wait(poll)) {
    ResponseState::Choice& c = s.choices[static_cast<size_t>(e.index)];
    switch (e.kind) {
      case ChannelEvent::Kind::kText:
        if (s.stream) out += SseEvent(TextChunk(s.ctx, e.index, e.text, s.include_usage));
        break;
      case ChannelEvent::Kind::kFinished:
        c.output = std::move(e.output);
        c.finished_at = Clock::now();
        break;
      case ChannelEvent::Kind::kProbing:
        c.probing = ProbingSummary(*e.probing, session_->spec());
        break;
    }
  }
  bool complete = true;
  const auto probe_timeout = std::chrono::duration<double>(options_.probe_result_timeout_seconds);
  for (size_t i = 0; i < s.choices.size(); ++i) {
    ResponseState::Choice& c = s.choices[i];
    if (!c.output.has_value()) {
      complete = false;
      continue;
    }
    if (s.stream && !c.finish_sent) {
      out += SseEvent(FinishChunk(s.ctx, s.Result(i), s.include_usage));
      c.finish_sent = true;
    }
    if (session_ != nullptr && !c.probing.has_value() &&
        Clock::now() - c.finished_at < probe_timeout) {
      complete = false;
    }
  }
  if (!complete) {
    if (!out.empty()) return now_write(out);
    const auto heartbeat = std::chrono::duration<double>(options_.heartbeat_seconds);
    if (Clock::now() - s.last_write >= heartbeat) {
      // An SSE comment, or whitespace before the JSON body: both are ignored by clients.
      return now_write(s.stream ? ": keep-alive\n\n" : "\n");
    }
    return true;
  }
  s.usage.completion_tokens = 0;
  std::vector<ChoiceResult> results;
  for (size_t i = 0; i < s.choices.size(); ++i) {
    results.push_back(s.Result(i));
    s.usage.completion_tokens += static_cast<int64_t>(results.back().output.output_ids.size());
  }
  if (s.stream) {
    if (s.include_usage) out += SseEvent(UsageChunk(s.ctx, s.usage));
    if (session_ != nullptr) {
      for (const ChoiceResult& r : results) {
        out += SseEvent(ProbingResultEvent(s.ctx, r), "probing_result");
      }
    }
    out += "data: [DONE]\n\n";
  } else {
    out +=
        ResponseBody(s.ctx, results, s.usage).dump(-1, ' ', false, json::error_handler_t::replace);
  }
  if (!now_write(out)) return false;
  sink.done();
  return true;
}

}  // namespace uc::server
