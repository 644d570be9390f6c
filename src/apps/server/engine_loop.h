// File: engine_loop.h
// -----------------------------------------------------------------------------
// EngineLoop: the one engine thread of the server and the channels that connect it to the HTTP
// handler threads. The thread loops LLMEngine::Step() while any request is unfinished and sleeps
// otherwise; every step's outputs (text increments, finished requests) and every request's probe
// results go to the RequestChannel of the HTTP request that owns them. Requests from all
// clients share each step (continuous batching).
//
//   EngineLoop loop(engine, probe_sets);
//   loop.Start();
//   StatusOr<std::shared_ptr<RequestChannel>> ch = loop.Submit(requests);  // handler thread
//   for (;;) for (ChannelEvent& e : (*ch)->Wait(1s)) ...;
//   loop.Release(**ch);  // when the response is written, or the client went away
//   loop.Stop();         // after the last handler: lets the engine finish what is left
//
// A channel's choice is complete when its engine request finished and, with probe sets,
// when its RequestProbeResults arrived — they may come from another thread, before or after the
// finished output; the HTTP layer bounds the wait for them.
//
// Thread-safety: Submit, Release, Abort*, stats and the channels are thread-safe. Start and
// Stop are called once each, from one controlling thread. The engine (and probe sets) must
// outlive the loop; nobody else may call Step.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "engine/llm_engine.h"
#include "probe/runtime/probe_sets.h"

namespace uc::server {

// Something that happened to one choice (engine request) of an HTTP request.
struct ChannelEvent {
  enum class Kind { kText, kFinished, kProbing };
  Kind kind = Kind::kText;
  int index = 0;                                   // the choice
  std::string text;                                // kText: the increment
  std::vector<worker::PositionLogprobs> logprobs;  // kText: its tokens' (when asked)
  // kText of the first token, when asked: the prompt's logprobs (RequestOutput's).
  std::vector<std::optional<worker::PositionLogprobs>> prompt_logprobs;
  std::optional<engine::RequestOutput> output;        // kFinished
  std::optional<probe::RequestProbeResults> probing;  // kProbing
};

// The events of one HTTP request, in arrival order. Thread-safe.
class RequestChannel {
 public:
  explicit RequestChannel(std::vector<std::string> engine_ids)
      : engine_ids_(std::move(engine_ids)) {}

  // Waits at most `timeout` for events; returns them all (empty on timeout; a zero timeout
  // only takes what is there).
  std::vector<ChannelEvent> Wait(std::chrono::milliseconds timeout);
  void Push(ChannelEvent event);
  // `notify` is called (on the pushing thread, without the channel's lock) after every Push
  // from now on, so that an event-driven reader need not poll. It must be cheap and must not
  // call back into the channel. Null clears it.
  void SetNotifier(std::function<void()> notify);

  // The engine request id of each choice.
  const std::vector<std::string>& engine_ids() const { return engine_ids_; }

 private:
  const std::vector<std::string> engine_ids_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<ChannelEvent> events_;  // guarded by mu_
  std::function<void()> notify_;      // guarded by mu_
};

// One engine request of a submission.
struct EngineRequest {
  std::string id;  // unique among live requests
  engine::Prompt prompt;
  worker::SamplingParams params;
  engine::RequestSteering steering = {};
};

class EngineLoop {
 public:
  // Called on the engine thread after every step with its stats and duration (may be null).
  using StepHook = std::function<void(const engine::EngineStats&, double step_seconds)>;
  // Called on the engine thread for every finished request (may be null).
  using FinishHook = std::function<void(const engine::RequestOutput&)>;

  // `probe_sets` may be null (no spec). Installs their result callback.
  EngineLoop(engine::LLMEngine* engine, probe::ProbeSets* probe_sets);
  ~EngineLoop();  // Stop()s if needed
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  void set_step_hook(StepHook hook) { step_hook_ = std::move(hook); }        // before Start
  void set_finish_hook(FinishHook hook) { finish_hook_ = std::move(hook); }  // before Start

  void Start();
  // Finishes every request still in the engine (aborted ones included), then ends the thread.
  void Stop();

  // Queues the requests of one HTTP request, all or none: when the engine rejects one
  // (InvalidArgument naming the field), those already queued are aborted.
  StatusOr<std::shared_ptr<RequestChannel>> Submit(std::vector<EngineRequest> requests);
  // Forgets the channel; its engine requests that are still running are aborted (reason
  // `why`, e.g. "client disconnected"), so their KV blocks are freed at the next step.
  void Release(const RequestChannel& channel, const std::string& why);
  // Aborts every request of every channel (shutdown after the drain timeout).
  void AbortAll(const std::string& why);

  // The stats after the latest step.
  engine::EngineStats stats() const;

 private:
  struct Route {
    std::weak_ptr<RequestChannel> channel;
    int index = 0;
    bool finished = false;  // the finished output was dispatched
    bool probed = false;    // the probe results were dispatched
  };
  void Run();
  void Dispatch(std::vector<engine::RequestOutput>& outputs);
  void OnProbeResults(probe::RequestProbeResults results);

  engine::LLMEngine* const engine_;
  probe::ProbeSets* const probe_sets_;
  StepHook step_hook_;
  FinishHook finish_hook_;
  std::thread thread_;

  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  bool wake_ = false;      // guarded by wake_mu_
  bool stopping_ = false;  // guarded by wake_mu_

  mutable std::mutex routes_mu_;
  std::unordered_map<std::string, Route> routes_;  // engine request id -> channel; routes_mu_

  mutable std::mutex stats_mu_;
  engine::EngineStats stats_;  // guarded by stats_mu_
};

}  // namespace uc::server
