// Fuzzes the server's request path: raw bytes -> the front end's parser, limits and content
// decoding (ParseHttpRequest, what a connection runs as bytes arrive) -> the application's
// routing, authentication and JSON body validation (Server::Handle) on a real engine with the
// bundled stories260K, serving in the background as `undercurrent serve` does. A request that
// starts a generation is followed to its end (bounded) like a client would. Everything a client
// sends must end in an HTTP status with a JSON (or metrics) body: never a crash, an exception or
// a hang; an accepted request has unambiguous framing, and an error body stays small.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>

#include "apps/server/chat_prompt.h"
#include "apps/server/http_front.h"
#include "apps/server/http_server.h"
#include "engine/llm_engine.h"
#include "fuzz/fuzz_util.h"
#include "probe/sinks/metrics.h"

namespace {

using uc::server::HttpRequest;
using uc::server::HttpResponse;

// One engine and server for the whole process, never destroyed (libFuzzer exits without
// joining the serving thread).
struct World {
  World() {
    uc::engine::EngineOptions options;
    options.model_path = std::string(UC_SOURCE_DIR) + "/models/stories260K";
    options.num_threads = 1;
    auto opened = uc::engine::LLMEngine::Open(options);
    UC_FUZZ_ASSERT(opened.ok(), "the bundled model opens");
    engine = std::move(opened).value();
    auto chat = uc::server::ChatPrompt::Load(options.model_path, "");
    UC_FUZZ_ASSERT(chat.ok(), "the chat prompt loads");
    uc::server::ServerOptions server_options;
    server_options.port = 0;
    server_options.served_model_name = "stories260K";
    server_options.model_path = options.model_path;
    server_options.max_body_bytes = kMaxBody;
    server = std::make_unique<uc::server::Server>(engine.get(), nullptr, &metrics,
                                                  std::move(chat).value(), server_options);
    UC_FUZZ_ASSERT(server->Bind().ok(), "the server binds a loopback port");
    serving = std::thread([this] { (void)server->Serve(); });
  }
  static constexpr int64_t kMaxBody = 64 << 10;
  std::unique_ptr<uc::engine::LLMEngine> engine;
  uc::probe::Metrics metrics;
  std::unique_ptr<uc::server::Server> server;
  std::thread serving;
};

World& TheWorld() {
  static World* world = new World();
  return *world;
}

bool IsJson(const std::string& text) { return nlohmann::json::accept(text); }

// UC_FUZZ_TRACE=1 prints each request's outcome (to see what a corpus reaches).
void Trace(const HttpRequest& request, int status, size_t streamed) {
  static const bool on = std::getenv("UC_FUZZ_TRACE") != nullptr;
  if (on) {
    std::fprintf(stderr, "%s %s -> %d (%zu bytes streamed)\n", request.method.c_str(),
                 request.path.c_str(), status, streamed);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  World& world = TheWorld();
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  uc::server::HttpFrontOptions limits;
  limits.max_body_bytes = World::kMaxBody;
  HttpRequest request;
  const int parsed = uc::server::ParseHttpRequest(bytes, limits, &request);
  if (parsed != 0) {
    UC_FUZZ_ASSERT(parsed == 400 || parsed == 413 || parsed == 415 || parsed == 431,
                   "a refused request gets one of the front end's statuses");
    const HttpResponse error = world.server->ErrorResponse(parsed, request.method, request.path);
    UC_FUZZ_ASSERT(error.status == parsed && IsJson(error.body), "a JSON error body");
    Trace(request, parsed, 0);
    return 0;
  }
  UC_FUZZ_ASSERT(static_cast<int64_t>(request.body.size()) <= World::kMaxBody,
                 "the decoded body is within the limit");
  UC_FUZZ_ASSERT(uc::server::CheckFraming(request.headers) == 0,
                 "an accepted request has unambiguous framing (RFC 9112 6.1, 6.3)");
  HttpResponse response = world.server->Handle(request);
  UC_FUZZ_ASSERT(response.status >= 200 && response.status < 600, "an HTTP status");
  if (response.stream == nullptr) {
    if (response.content_type.rfind("application/json", 0) == 0) {
      UC_FUZZ_ASSERT(IsJson(response.body), "a JSON body is JSON");
    }
    // Echoed values are cut: an error body stays small whatever the request held.
    UC_FUZZ_ASSERT(response.status < 400 || response.body.size() <= 8192,
                   "an error body is at most 8 KiB");
    Trace(request, response.status, 0);
    return 0;
  }
  // Follow the generation like a client, for at most a few seconds.
  response.stream->SetNotifier([] {});
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!response.stream->Poll(&out) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  Trace(request, response.status, out.size());
  return 0;
}
