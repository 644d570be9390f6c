#include "apps/server/http_server.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>
#include <thread>

#include "apps/server/tokenize_protocol.h"
#include "apps/server/tool_calls.h"
#include "base/did_you_mean.h"
#include "base/logging.h"
#include "io/json_file.h"

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
constexpr char kChunkedJson[] = "application/json; charset=utf-8";

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// A bounded label for the metrics: the known routes, else "other".
std::string RouteLabel(const std::string& path) {
  for (const char* route : {"/v1/completions", "/v1/chat/completions", "/v1/models", "/v1/steering",
                            "/v1/probes", "/v1/probes/reload", "/health", "/metrics", "/tokenize",
                            "/detokenize", "/tokenizer_info"}) {
    if (path == route) return route;
  }
  return path.rfind("/v1/models/", 0) == 0 ? "/v1/models/{model}" : "other";
}

ApiError ErrorForStatus(int status, const std::string& method, const std::string& path,
                        int64_t max_body_bytes) {
  ApiError e;
  e.http_status = status;
  switch (status) {
    case 401:
      e.message = "Incorrect API key provided. Send it as 'Authorization: Bearer KEY'.";
      e.code = "invalid_api_key";
      break;
    case 404:
      e.message = "Invalid URL (" + EchoValue(method) + " " + EchoValue(path) + ")";
      e.code = "not_found";
      break;
    case 408:
      e.message = "The request body did not arrive in time.";
      e.code = "request_timeout";
      break;
    case 413:
      e.message = "The request body is larger than this server's limit of " +
                  std::to_string(max_body_bytes) + " bytes (after decompression).";
      e.code = "request_too_large";
      break;
    case 415:
      e.message = "Unsupported Content-Encoding: send the body as is, gzip or deflate.";
      e.code = "unsupported_content_encoding";
      break;
    case 431:
      e.message = "The request's headers are too many or too large.";
      e.code = "request_header_fields_too_large";
      break;
    case 400:
      e.message = "Malformed HTTP request.";
      break;
    case 503:
      e.message = "The server is at its connection limit or shutting down; retry later.";
      e.type = "server_error";
      e.code = "server_busy";
      break;
    default:
      e.message = "HTTP error " + std::to_string(status) + ".";
      e.type = status >= 500 ? "server_error" : "invalid_request_error";
  }
  return e;
}

// Of each prompt's `best_of` candidates (consecutive), the `n` with the largest summed
// logprob, most likely first (ties: the earlier candidate), renumbered.
std::vector<ChoiceResult> BestOf(std::vector<ChoiceResult> candidates, int n, int best_of) {
  std::vector<ChoiceResult> kept;
  for (size_t group = 0; group < candidates.size(); group += static_cast<size_t>(best_of)) {
    const auto first = candidates.begin() + static_cast<std::ptrdiff_t>(group);
    const auto last = first + best_of;
    std::stable_sort(first, last, [](const ChoiceResult& a, const ChoiceResult& b) {
      return a.output.cumulative_logprob > b.output.cumulative_logprob;
    });
    for (auto it = first; it != first + n; ++it) {
      kept.push_back(std::move(*it));
      kept.back().index = static_cast<int>(kept.size()) - 1;
    }
  }
  return kept;
}

// The JSON of a request body: a 400 when it does not parse. Nesting is bounded before
// parsing: a parser builds every level (8 MB of '[' would cost hundreds of MB) before it can
// see that the document is wrong.
std::optional<ApiError> ParseJsonBody(const std::string& text, json* out) {
  if (const size_t at = io::JsonDepthExceededAt(text); at != std::string::npos) {
    return BadRequest("The JSON body of your request nests arrays and objects more than " +
                          std::to_string(io::kMaxJsonDepth) + " levels deep (at byte " +
                          std::to_string(at) + ").",
                      "", "json_too_deep");
  }
  try {
    *out = json::parse(text);
  } catch (const json::exception& e) {
    return BadRequest(std::string("We could not parse the JSON body of your request: ") +
                      EchoValue(e.what(), 256));
  }
  return std::nullopt;
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
    std::optional<json> probe_set;
    Clock::time_point finished_at;
    bool finish_sent = false;
    std::string echo_text;                // with echo
    std::vector<int32_t> prompt_ids;      // with echo
    bool echoed = false;                  // streamed: the echo chunk went out
    size_t text_offset = 0;               // streamed: bytes of text sent (echo included)
    std::optional<ToolCallStream> tools;  // streamed chat with tools: text -> delta.tool_calls
  };
  ~ResponseState() {
    // Normally every choice finished; otherwise the client went away mid-response.
    channel->SetNotifier(nullptr);
    loop->Release(*channel, "client disconnected");
  }
  ChoiceResult Result(size_t i) const {
    return {static_cast<int>(i), *choices[i].output, choices[i].probing, choices[i].probe_set,
            choices[i].echo_text};
  }

  EngineLoop* loop = nullptr;
  std::shared_ptr<RequestChannel> channel;
  ResponseContext ctx;
  bool stream = false;
  bool include_usage = false;
  std::vector<Choice> choices;  // engine requests: best_of per prompt, in prompt order
  int n = 1;                    // choices returned per prompt: the best of best_of
  int best_of = 1;
  Usage usage;
  bool started = false;
  bool done = false;
  Clock::time_point last_write;
  std::unique_ptr<InFlight> in_flight;
};

// A completion's response as HttpFront pulls it.
class Server::CompletionStream : public ResponseStream {
 public:
  CompletionStream(const Server* server, std::unique_ptr<ResponseState> state)
      : server_(server), state_(std::move(state)) {}
  bool Poll(std::string* out) override {
    if (state_->done) return true;
    const bool done = server_->Produce(*state_, out);
    if (done) {
      state_->done = true;
      state_->in_flight.reset();  // the drain need not wait for the last bytes' write
    }
    return done;
  }
  void SetNotifier(std::function<void()> notify) override {
    state_->channel->SetNotifier(std::move(notify));
  }

 private:
  const Server* const server_;
  std::unique_ptr<ResponseState> state_;
};

Server::Server(engine::LLMEngine* engine, probe::ProbeSets* probe_sets, probe::Metrics* metrics,
               std::unique_ptr<ChatPrompt> chat, ServerOptions options)
    : engine_(engine),
      sets_(probe_sets),
      options_(std::move(options)),
      chat_(std::move(chat)),
      metrics_(metrics),
      loop_(engine, probe_sets) {
  started_ = static_cast<int64_t>(std::time(nullptr));
  next_id_ = std::random_device{}();
  loop_.set_step_hook([this](const engine::EngineStats& stats, double seconds) {
    metrics_.metrics().RecordEngineStep(stats, seconds);
  });
  loop_.set_finish_hook([this](const engine::RequestOutput& out) {
    metrics_.metrics().RecordFinished(FinishReasonOf(out));
  });
  metrics_.metrics().RecordEngineStep(engine_->stats(), 0.0);
  HttpFrontOptions front;
  front.host = options_.host;
  front.port = options_.port;
  front.handler_threads = std::max(1, options_.http_threads);
  front.max_connections = std::max(1, options_.max_connections);
  front.max_connections_per_client = std::max(-1, options_.max_connections_per_client);
  front.light_paths = {"/health", "/metrics"};
  front.max_body_bytes = options_.max_body_bytes;
  front.idle_timeout_seconds = options_.idle_timeout_seconds;
  front.header_timeout_seconds = options_.header_timeout_seconds;
  front.body_timeout_seconds = options_.body_timeout_seconds;
  front.write_timeout_seconds = options_.write_timeout_seconds;
  // Text arrives by notification; the tick only paces heartbeats and the probe-result wait.
  front.stream_tick_seconds = std::clamp(options_.heartbeat_seconds / 2, 0.01, 0.5);
  front_ = std::make_unique<HttpFront>(
      front, [this](const HttpRequest& req) { return Handle(req); },
      [this](int status, const std::string& method, const std::string& path) {
        return ErrorResponse(status, method, path);
      },
      [this](const std::string& path, int status) {
        metrics_.RecordHttpResponse(RouteLabel(path), status);
      });
  front_->set_head_check([this](const HttpRequest& head) { return CheckHead(head); });
}

int Server::CheckHead(const HttpRequest& head) const {
  if (options_.api_key.empty() || head.path == "/health") return 0;
  if (head.path == "/metrics" && options_.metrics_without_key) return 0;
  return Authorized(head) ? 0 : 401;
}

Server::~Server() {
  front_->Stop();  // before the loop: open streams release their requests
}

HttpResponse Server::ErrorResponse(int status, const std::string& method,
                                   const std::string& path) const {
  return Respond(ErrorForStatus(status, method, path, options_.max_body_bytes));
}

HttpResponse Server::Handle(const HttpRequest& req) {
  const std::string& path = req.path;
  const bool get = req.method == "GET";
  const bool post = req.method == "POST";
  if (post && path == "/v1/completions") return HandleCompletion(req, Endpoint::kCompletions);
  if (post && path == "/v1/chat/completions") {
    return HandleCompletion(req, Endpoint::kChatCompletions);
  }
  if (get && (path == "/v1/models" || (path.rfind("/v1/models/", 0) == 0 && path.size() > 11))) {
    return HandleModels(req);
  }
  if (post && path == "/tokenize") return HandleTokenize(req);
  if (post && path == "/detokenize") return HandleDetokenize(req);
  if (get && path == "/tokenizer_info") return HandleTokenizerInfo(req);
  if (get && path == "/v1/steering") return HandleSteering(req);
  if (get && path == "/v1/probes") return HandleProbes(req);
  if (post && path == "/v1/probes/reload") return HandleProbesReload(req);
  if (get && path == "/health") {
    const bool draining = draining_.load();
    HttpResponse res;
    res.status = draining ? 503 : 200;
    res.content_type = kJson;
    res.body = JsonText(
        json{{"status", draining ? "draining" : "ok"}, {"model", options_.served_model_name}});
    return res;
  }
  if (get && path == "/metrics") {
    if (!options_.metrics_without_key && !Authorized(req)) return Respond(Unauthorized());
    HttpResponse res;
    res.content_type = "text/plain; version=0.0.4; charset=utf-8";
    metrics_.SetOpenConnections(front_->connections());
    res.body = metrics_.Serialize();
    return res;
  }
  return ErrorResponse(404, req.method, path);
}

Status Server::Bind() {
  UC_RETURN_IF_ERROR(front_->Bind());
  port_ = front_->port();
  return OkStatus();
}

Status Server::Serve() {
  loop_.Start();
  front_->Start();
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return shutdown_requests_ > 0; });
    UC_LOG(INFO) << "shutting down: draining " << in_flight_ << " request(s)";
    lock.unlock();
    front_->BeginShutdown();
    lock.lock();
    const auto deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(options_.drain_timeout_seconds));
    std::optional<Clock::time_point> aborted_at;
    while (in_flight_ > 0) {
      if (!aborted_at && (shutdown_requests_ > 1 || Clock::now() >= deadline)) {
        UC_LOG(WARNING) << "aborting " << in_flight_ << " request(s) still running";
        lock.unlock();
        loop_.AbortAll("server shutting down");
        lock.lock();
        aborted_at = Clock::now();
      }
      // Aborted requests finish at the next engine step; a client that does not read its
      // answer is not waited for long.
      if (aborted_at && Clock::now() - *aborted_at > std::chrono::seconds(5)) break;
      cv_.wait_for(lock, std::chrono::milliseconds(100));
    }
  }
  front_->Stop();
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

HttpResponse Server::Respond(const ApiError& error) {
  HttpResponse res;
  res.status = error.http_status;
  res.content_type = kJson;
  res.body = JsonText(error.Body());
  return res;
}

json Server::ModelCard() const {
  return {{"id", options_.served_model_name},
          {"object", "model"},
          {"created", started_},
          {"owned_by", "undercurrent"},
          {"root", options_.model_path.filename().string()},
          {"max_model_len", engine_->max_model_len()}};
}

bool Server::Authorized(const HttpRequest& req) const {
  return options_.api_key.empty() ||
         ConstantTimeEquals(req.Header("Authorization"), "Bearer " + options_.api_key);
}

ApiError Server::Unauthorized() {
  ApiError e;
  e.http_status = 401;
  e.message = "Incorrect API key provided. Send it as 'Authorization: Bearer KEY'.";
  e.code = "invalid_api_key";
  return e;
}

std::optional<ApiError> Server::CheckModel(const std::string& model) const {
  if (model.empty() || model == options_.served_model_name) return std::nullopt;
  ApiError e;
  e.http_status = 404;
  e.message = "The model '" + EchoValue(model) + "' does not exist. This server serves '" +
              options_.served_model_name + "'.";
  e.param = "model";
  e.code = "model_not_found";
  return e;
}

HttpResponse Server::HandleTokenize(const HttpRequest& req) {
  if (!Authorized(req)) return Respond(Unauthorized());
  json body;
  if (auto error = ParseJsonBody(req.body, &body)) return Respond(*error);
  TokenizeRequest request;
  if (auto error = ParseTokenizeRequest(body, &request)) return Respond(*error);
  if (auto error = CheckModel(request.model)) return Respond(*error);
  const tokenizer::Tokenizer& tok = engine_->tokenizer();
  std::vector<int32_t> ids;
  if (request.prompt.has_value()) {
    ids = tok.Encode(*request.prompt, request.add_special_tokens && tok.add_bos_token(),
                     /*parse_special=*/true);
  } else {
    StatusOr<std::string> text = chat_->Render(request.messages);
    if (!text.ok()) {
      ApiError e = BadRequest(text.status().message(), "messages");
      if (text.status().code() == StatusCode::kFailedPrecondition) {
        e.code = "chat_template_unavailable";
      }
      return Respond(e);
    }
    ids = tok.Encode(*text, request.add_special_tokens && tok.add_bos_token(),
                     /*parse_special=*/true);
  }
  json strs = nullptr;
  if (request.return_token_strs) {
    strs = json::array();
    for (int32_t id : ids) strs.push_back(std::string(tok.TokenText(id)));
  }
  HttpResponse res;
  res.content_type = kJson;
  res.body = JsonText(json{{"count", ids.size()},
                           {"max_model_len", engine_->max_model_len()},
                           {"tokens", ids},
                           {"token_strs", std::move(strs)}});
  return res;
}

HttpResponse Server::HandleDetokenize(const HttpRequest& req) {
  if (!Authorized(req)) return Respond(Unauthorized());
  json body;
  if (auto error = ParseJsonBody(req.body, &body)) return Respond(*error);
  DetokenizeRequest request;
  if (auto error = ParseDetokenizeRequest(body, &request)) return Respond(*error);
  if (auto error = CheckModel(request.model)) return Respond(*error);
  const tokenizer::Tokenizer& tok = engine_->tokenizer();
  for (int32_t id : request.tokens) {
    if (id >= tok.vocab_size()) {
      return Respond(BadRequest("'tokens' holds " + std::to_string(id) +
                                    ", outside the vocabulary [0, " +
                                    std::to_string(tok.vocab_size()) + ").",
                                "tokens", "invalid_value"));
    }
  }
  HttpResponse res;
  res.content_type = kJson;
  res.body = JsonText(json{{"prompt", tok.Decode(request.tokens)}});
  return res;
}

HttpResponse Server::HandleTokenizerInfo(const HttpRequest& req) {
  if (!Authorized(req)) return Respond(Unauthorized());
  const tokenizer::Tokenizer& tok = engine_->tokenizer();
  auto token = [&](int32_t id) {
    return id >= 0 && id < tok.vocab_size() ? json(std::string(tok.TokenText(id))) : json(nullptr);
  };
  const bool spm = tok.algorithm() == tokenizer::Algorithm::kSentencePieceBpe;
  HttpResponse res;
  res.content_type = kJson;
  res.body = JsonText(json{
      {"tokenizer_class", spm ? "LlamaTokenizerFast" : "PreTrainedTokenizerFast"},
      {"algorithm", spm ? "sentencepiece_bpe" : (tok.byte_level() ? "byte_level_bpe" : "bpe")},
      {"vocab_size", tok.vocab_size()},
      {"model_max_length", engine_->max_model_len()},
      {"bos_token", token(tok.bos_id())},
      {"eos_token", token(tok.eos_id())},
      {"pad_token", token(tok.pad_id())},
      {"unk_token", token(tok.unk_id())},
      {"add_bos_token", tok.add_bos_token()},
      {"add_eos_token", tok.add_eos_token()},
      {"stop_token_ids", tok.stop_ids()},
      {"chat_template_origin", chat_->origin().empty() ? json(nullptr) : json(chat_->origin())}});
  return res;
}

HttpResponse Server::HandleModels(const HttpRequest& req) {
  if (!Authorized(req)) return Respond(Unauthorized());
  HttpResponse res;
  res.content_type = kJson;
  if (req.path != "/v1/models") {
    const std::string model = req.path.substr(std::string("/v1/models/").size());
    if (model != options_.served_model_name) {
      ApiError e;
      e.http_status = 404;
      e.message = "The model '" + EchoValue(model) + "' does not exist.";
      e.param = "model";
      e.code = "model_not_found";
      return Respond(e);
    }
    res.body = JsonText(ModelCard());
    return res;
  }
  res.body = JsonText(json{{"object", "list"}, {"data", json::array({ModelCard()})}});
  return res;
}

HttpResponse Server::HandleSteering(const HttpRequest& req) {
  if (!Authorized(req)) return Respond(Unauthorized());
  json data = json::array();
  for (const auto& [name, module] : options_.steering_modules) {
    json layers = json::array();
    for (const worker::SteeringVector& v : module.config->vectors) layers.push_back(v.layer);
    data.push_back({{"object", "steering_module"},
                    {"name", name},
                    {"file", module.file.filename().string()},
                    {"hook", "residual_stream"},
                    {"layers", std::move(layers)}});
  }
  HttpResponse res;
  res.content_type = kJson;
  res.body = JsonText(json{{"object", "list"},
                           {"data", std::move(data)},
                           {"hooks", {"residual_stream", "attn_out", "mlp_out"}},
                           {"num_layers", engine_->config().num_hidden_layers},
                           {"hidden_size", engine_->config().hidden_size},
                           {"max_steering_configs", engine_->options().max_steering_configs}});
  return res;
}

HttpResponse Server::HandleProbes(const HttpRequest& req) {
  if (!Authorized(req)) return Respond(Unauthorized());
  json data = json::array();
  json status = nullptr;
  if (sets_ != nullptr) {
    for (const probe::ProbeSetInfo& info : sets_->Describe()) {
      data.push_back({{"object", "probe_set"},
                      {"name", info.name},
                      {"file", info.file.filename().string()},
                      {"version", info.version},
                      {"default", info.is_default},
                      {"extraction_points", info.points}});
    }
    const probe::ProbeSetStats stats = sets_->stats();
    status = {{"version", stats.version},
              {"reloads_ok", stats.reloads_ok},
              {"reloads_failed", stats.reloads_failed},
              {"last_error", stats.last_error.empty() ? json(nullptr) : json(stats.last_error)}};
  }
  HttpResponse res;
  res.content_type = kJson;
  res.body = JsonText(json{{"object", "list"}, {"data", std::move(data)}, {"reloads", status}});
  return res;
}

StatusOr<int64_t> Server::ReloadProbeSets() {
  if (sets_ == nullptr) {
    return FailedPreconditionError("this server has no probe sets (start it with --spec)");
  }
  return sets_->Reload();
}

HttpResponse Server::HandleProbesReload(const HttpRequest& req) {
  // Reloading changes what every later request runs: never open to anyone.
  if (options_.api_key.empty()) {
    ApiError e;
    e.http_status = 403;
    e.message =
        "Reloading probe sets needs an API key: start the server with --api-key (or "
        "UNDERCURRENT_API_KEY), or send it SIGHUP.";
    e.code = "api_key_required";
    return Respond(e);
  }
  if (!Authorized(req)) return Respond(Unauthorized());
  StatusOr<int64_t> version = ReloadProbeSets();
  if (!version.ok()) {
    ApiError e;
    e.http_status = sets_ == nullptr ? 404 : 422;
    e.message = version.status().message();
    e.code = sets_ == nullptr ? "no_probe_sets" : "probe_set_reload_failed";
    return Respond(e);
  }
  json sets = json::array();
  for (const probe::ProbeSetInfo& info : sets_->Describe()) {
    sets.push_back({{"name", info.name}, {"version", info.version}});
  }
  HttpResponse res;
  res.content_type = kJson;
  res.body = JsonText(json{{"reloaded", true}, {"version", *version}, {"probe_sets", sets}});
  return res;
}

std::optional<ApiError> Server::AssignProbeSet(const CompletionRequest& request,
                                               std::vector<EngineRequest>* requests) const {
  if (sets_ == nullptr) {
    if (request.probe_set.empty()) return std::nullopt;
    return BadRequest("This server has no probe sets (it was started without --spec).", "probe_set",
                      "probe_set_not_found");
  }
  std::vector<std::string> ids;
  for (const EngineRequest& r : *requests) ids.push_back(r.id);
  StatusOr<probe::ProbeSetAssignment> assigned = sets_->Assign(ids, request.probe_set);
  if (!assigned.ok()) {
    // The message quotes the name (at most kMaxNameBytes): cut it like every echoed value.
    return BadRequest(EchoValue(assigned.status().message(), 512), "probe_set",
                      "probe_set_not_found");
  }
  for (EngineRequest& r : *requests) r.steering.base = assigned->steering;
  return std::nullopt;
}

std::optional<ApiError> Server::BuildSteering(const CompletionRequest& request,
                                              engine::RequestSteering* out) const {
  if (request.steering_name.empty() && request.steering.empty()) return std::nullopt;
  auto config = std::make_shared<worker::SteeringConfig>();
  if (!request.steering_name.empty()) {
    const auto it = options_.steering_modules.find(request.steering_name);
    if (it == options_.steering_modules.end()) {
      std::vector<std::string> names;
      for (const auto& [name, module] : options_.steering_modules) names.push_back(name);
      std::string known;
      for (const std::string& name : names) known += (known.empty() ? "" : ", ") + name;
      return BadRequest(
          "Unknown steering_name '" + EchoValue(request.steering_name) + "'" +
              DidYouMean(request.steering_name, names) +
              (names.empty() ? " (this server registers none)." : " (registered: " + known + ")."),
          "steering_name", "steering_not_found");
    }
    config->vectors = it->second.config->vectors;
  }
  const int num_layers = engine_->config().num_hidden_layers;
  const int64_t hidden = engine_->config().hidden_size;
  for (const CompletionRequest::Steering& s : request.steering) {
    if (s.resid_mid && engine_->config().parallel_residual) {
      return BadRequest(s.param +
                            ": this model's blocks are parallel (attention and MLP read the same "
                            "stream), so there is no hook_resid_mid; steer hook_attn_out or "
                            "hook_resid_pre.",
                        s.param, "invalid_value");
    }
    if (s.vector.layer >= num_layers) {
      return BadRequest("Layer " + std::to_string(s.vector.layer) +
                            " does not exist: the model has layers 0 to " +
                            std::to_string(num_layers - 1) + ".",
                        s.param, "invalid_value");
    }
    if (static_cast<int64_t>(s.vector.values.size()) != hidden) {
      return BadRequest(s.param + " has " + std::to_string(s.vector.values.size()) +
                            " values; the model's hidden size is " + std::to_string(hidden) + ".",
                        s.param, "invalid_value");
    }
    const bool zero = std::all_of(s.vector.values.begin(), s.vector.values.end(),
                                  [](float x) { return x == 0.0f; });
    if (s.vector.norm_match && zero) {
      return BadRequest(s.param + " is all zeros, which norm_match cannot rescale.", s.param,
                        "invalid_value");
    }
    config->vectors.push_back(s.vector);
  }
  out->config = std::move(config);
  return std::nullopt;
}

std::optional<ApiError> Server::BuildEngineRequests(const CompletionRequest& request,
                                                    const std::string& id,
                                                    std::vector<EngineRequest>* out,
                                                    Usage* usage) const {
  engine::RequestSteering steering;
  if (auto error = BuildSteering(request, &steering)) return error;
  if (request.sampling.grammar.active()) {
    // Compiled here so that a bad schema, regex or grammar is a 400 naming the field; the
    // engine's own compile of the same spec is then a cache lookup.
    const auto compiled = engine_->CompileGrammar(request.sampling.grammar);
    if (!compiled.ok()) {
      const bool unsupported = compiled.status().code() == StatusCode::kFailedPrecondition;
      return BadRequest("Invalid value for '" + request.grammar_param +
                            "': " + EchoValue(compiled.status().message(), 1024),
                        request.grammar_param,
                        unsupported ? "unsupported_parameter" : "invalid_grammar");
    }
  }
  const tokenizer::Tokenizer& tok = engine_->tokenizer();
  std::vector<std::vector<int32_t>> prompts;
  const bool chat = request.endpoint == Endpoint::kChatCompletions;
  const std::string prompt_param = chat ? "messages" : "prompt";
  if (chat) {
    StatusOr<std::string> text = chat_->Render(
        request.messages, request.tool_choice == "none" ? nlohmann::json::array() : request.tools);
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
    for (int j = 0; j < request.best_of; ++j) {
      EngineRequest r{id + "-" + std::to_string(index++), engine::Prompt::Ids(ids), params,
                      steering};
      // Choice j of a seeded request: seed + j, so choice 0 equals the same request with n = 1.
      if (request.sampling.seed) r.params.seed = *request.sampling.seed + static_cast<uint64_t>(j);
      out->push_back(std::move(r));
    }
  }
  return std::nullopt;
}

HttpResponse Server::HandleCompletion(const HttpRequest& req, Endpoint endpoint) {
  if (!Authorized(req)) return Respond(Unauthorized());
  std::unique_ptr<InFlight> in_flight = InFlight::Enter(this);
  if (in_flight == nullptr) {
    ApiError e;
    e.http_status = 503;
    e.type = "server_error";
    e.message = "The server is shutting down.";
    e.code = "server_shutting_down";
    HttpResponse res = Respond(e);
    res.close = true;
    return res;
  }
  json body;
  if (auto error = ParseJsonBody(req.body, &body)) return Respond(*error);
  CompletionRequest request;
  if (auto error = ParseCompletionRequest(body, endpoint, &request, chat_->tool_format())) {
    return Respond(*error);
  }
  if (auto error = CheckModel(request.model)) return Respond(*error);
  const bool chat = endpoint == Endpoint::kChatCompletions;
  const std::string id = std::string(chat ? "chatcmpl-" : "cmpl-") + Hex(next_id_++);
  std::vector<EngineRequest> requests;
  Usage usage;
  if (auto error = BuildEngineRequests(request, id, &requests, &usage)) {
    return Respond(*error);
  }
  if (auto error = AssignProbeSet(request, &requests)) return Respond(*error);
  const size_t num_choices = requests.size();
  std::vector<std::string> ids;
  std::vector<std::vector<int32_t>> prompt_ids;
  for (const EngineRequest& r : requests) {
    ids.push_back(r.id);
    if (request.echo) prompt_ids.push_back(std::get<std::vector<int32_t>>(r.prompt.value));
  }
  StatusOr<std::shared_ptr<RequestChannel>> channel = loop_.Submit(std::move(requests));
  if (!channel.ok()) {
    if (sets_ != nullptr) {
      for (const std::string& engine_id : ids) sets_->Unassign(engine_id);
    }
    if (channel.status().code() == StatusCode::kInvalidArgument) {
      return Respond(BadRequest(channel.status().message()));
    }
    ApiError e;
    e.http_status = 500;
    e.type = "server_error";
    e.message = channel.status().message();
    return Respond(e);
  }
  auto state = std::make_unique<ResponseState>();
  state->loop = &loop_;
  state->channel = std::move(channel).value();
  state->ctx = {endpoint, id, static_cast<int64_t>(std::time(nullptr)), options_.served_model_name,
                sets_ != nullptr};
  state->stream = request.stream;
  state->include_usage = request.include_usage;
  state->choices.resize(num_choices);
  state->n = request.n;
  state->best_of = request.best_of;
  state->ctx.logprobs = request.logprobs;
  state->ctx.prompt_logprobs = request.prompt_logprobs;
  state->ctx.echo = request.echo;
  state->ctx.parse_tool_calls = !request.tools.empty() && request.tool_choice != "none";
  state->ctx.tool_format = chat_->tool_format();
  if (request.stream && state->ctx.parse_tool_calls) {
    for (size_t i = 0; i < num_choices; ++i) {
      state->choices[i].tools.emplace(state->ctx.tool_format, id + "_" + std::to_string(i));
    }
  }
  state->ctx.token_text = [tok = &engine_->tokenizer()](int32_t id) {
    return tok->TokenToPiece(id);
  };
  if (request.echo) {
    for (size_t i = 0; i < num_choices; ++i) {
      ResponseState::Choice& c = state->choices[i];
      c.prompt_ids = prompt_ids[i];
      const PromptInput& p = request.prompts[i / static_cast<size_t>(request.best_of)];
      c.echo_text = p.text.has_value() ? *p.text : engine_->tokenizer().Decode(p.ids);
    }
  }
  state->usage = usage;
  state->last_write = Clock::now();
  state->in_flight = std::move(in_flight);
  HttpResponse res;
  res.content_type = request.stream ? "text/event-stream" : kChunkedJson;
  if (request.stream) res.headers.emplace_back("Cache-Control", "no-cache");
  res.stream = std::make_shared<CompletionStream>(this, std::move(state));
  return res;
}

bool Server::Produce(ResponseState& s, std::string* result) const {
  std::string& out = *result;
  if (!s.started) {
    s.started = true;
    if (s.stream && s.ctx.endpoint == Endpoint::kChatCompletions) {
      for (size_t i = 0; i < s.choices.size(); ++i) {
        out += SseEvent(
            RoleChunk(s.ctx, static_cast<int>(i), s.include_usage, s.choices[i].tools.has_value()));
      }
    }
  }
  for (ChannelEvent& e : s.channel->Wait(std::chrono::milliseconds(0))) {
    ResponseState::Choice& c = s.choices[static_cast<size_t>(e.index)];
    switch (e.kind) {
      case ChannelEvent::Kind::kText:
        if (!s.stream) break;
        if (s.ctx.echo && !c.echoed) {
          out += SseEvent(EchoChunk(s.ctx, e.index, c.echo_text, c.prompt_ids, e.prompt_logprobs,
                                    s.include_usage));
          c.echoed = true;
          c.text_offset = c.echo_text.size();
        }
        if (c.tools.has_value()) {
          for (const json& delta : c.tools->Feed(e.text)) {
            out += SseEvent(DeltaChunk(s.ctx, e.index, delta, s.include_usage));
          }
          break;
        }
        out +=
            SseEvent(TextChunk(s.ctx, e.index, e.text, s.include_usage, e.logprobs, c.text_offset));
        c.text_offset += e.text.size();
        break;
      case ChannelEvent::Kind::kFinished:
        c.output = std::move(e.output);
        c.finished_at = Clock::now();
        break;
      case ChannelEvent::Kind::kProbing:
        c.probing = e.probing->spec != nullptr ? ProbingSummary(*e.probing, *e.probing->spec)
                                               : ProbingSummary(*e.probing, probe::Spec());
        c.probe_set =
            json{{"name", e.probing->probe_set}, {"version", e.probing->probe_set_version}};
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
      if (s.ctx.echo && !c.echoed) {
        out += SseEvent(EchoChunk(s.ctx, static_cast<int>(i), c.echo_text, c.prompt_ids,
                                  c.output->prompt_logprobs, s.include_usage));
        c.echoed = true;
      }
      if (c.tools.has_value()) {
        for (const json& delta : c.tools->Finish()) {
          out += SseEvent(DeltaChunk(s.ctx, static_cast<int>(i), delta, s.include_usage));
        }
      }
      out += SseEvent(FinishChunk(s.ctx, s.Result(i), s.include_usage,
                                  c.tools.has_value() && c.tools->called()));
      c.finish_sent = true;
    }
    if (sets_ != nullptr && !c.probing.has_value() &&
        Clock::now() - c.finished_at < probe_timeout) {
      complete = false;
    }
  }
  if (!complete) {
    const auto heartbeat = std::chrono::duration<double>(options_.heartbeat_seconds);
    if (out.empty() && Clock::now() - s.last_write >= heartbeat) {
      // An SSE comment, or whitespace before the JSON body: both are ignored by clients.
      out = s.stream ? ": keep-alive\n\n" : "\n";
    }
    if (!out.empty()) s.last_write = Clock::now();
    return false;
  }
  s.usage.completion_tokens = 0;
  s.usage.cached_tokens = 0;
  std::vector<ChoiceResult> results;
  int64_t group_cached = 0;  // prompt tokens count once per prompt: so do cached ones
  for (size_t i = 0; i < s.choices.size(); ++i) {
    results.push_back(s.Result(i));
    s.usage.completion_tokens += static_cast<int64_t>(results.back().output.output_ids.size());
    group_cached = std::max<int64_t>(group_cached, results.back().output.num_cached_tokens);
    if ((i + 1) % static_cast<size_t>(s.best_of) == 0) {
      s.usage.cached_tokens += group_cached;
      group_cached = 0;
    }
  }
  if (s.best_of > s.n) results = BestOf(std::move(results), s.n, s.best_of);
  if (s.stream) {
    if (s.include_usage) out += SseEvent(UsageChunk(s.ctx, s.usage));
    if (sets_ != nullptr) {
      for (const ChoiceResult& r : results) {
        out += SseEvent(ProbingResultEvent(s.ctx, r), "probing_result");
      }
    }
    out += "data: [DONE]\n\n";
  } else {
    out +=
        ResponseBody(s.ctx, results, s.usage).dump(-1, ' ', false, json::error_handler_t::replace);
  }
  return true;
}

}  // namespace uc::server
