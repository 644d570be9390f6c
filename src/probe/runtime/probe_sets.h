// File: probe_sets.h
// -----------------------------------------------------------------------------
// ProbeSets: several named specs in one engine, each request probed by the one it picks, and
// reloaded from their files atomically while requests run (`serve --spec NAME=FILE`,
// `POST /v1/probes/reload`, SIGHUP).
//
// Each set's current *version* is a ProbingSession built from its file. All sets share one
// version number: 1 at start-up, +1 at every successful Reload. A request is pinned to its
// set's current version when it is assigned (Assign, before the engine sees it) and keeps that
// version's probes until it ends, whatever reloads happen meanwhile: its results come from one
// spec. A version that was replaced is shut down (its async queues drained, its results
// delivered) once its last request ended; new requests get the new one.
//
// Reload re-reads every set's file and builds every new session first (spec problems, probe
// types, weights, layers against the model): when any fails, nothing changes and the error
// names the set and the file. Reloads are serialized.
//
// The spec's `steering:` entries are per version too: Assign returns them as the request's
// base steering (engine::RequestSteering::base), so a request is steered by the spec that
// probes it. A request the engine adds without an assignment gets the default set's current
// version, without its steering.
//
//   UC_ASSIGN_OR_RETURN(auto sets, ProbeSets::Create({{"default", "a.yaml"}, {"strict",
//                       "b.yaml"}}, "default", registry, engine->config(), options));
//   sets->SetResultCallback(...);
//   sets->AttachTo(*engine);
//   UC_ASSIGN_OR_RETURN(ProbeSetAssignment a, sets->Assign({"req-1"}, "strict"));
//   engine->AddRequest("req-1", prompt, params, {.base = a.steering});
//   ... sets->Reload() from any thread ...
//
// Series (on the options' Metrics registry): undercurrent_probe_set_reloads_total{outcome}
// (ok / failed), undercurrent_probe_set_version{probe_set} and
// undercurrent_probe_set_requests_total{probe_set}. Extraction-point series are shared by
// every set and version (labelled by point name).
//
// Thread-safety: Assign, Unassign, Reload, Describe and stats() are thread-safe. The
// StepObserver methods are for the engine thread. The result callback runs on the engine
// thread or a session's worker (never two at once for one version); set it before AttachTo.
// Shutdown: once, after the engine stopped stepping.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "engine/llm_engine.h"
#include "engine/step_observer.h"
#include "models/model_config.h"
#include "probe/probes/registry.h"
#include "probe/runtime/probing_session.h"
#include "probe/spec/spec.h"

namespace prometheus {
class Counter;
class Gauge;
template <typename T>
class Family;
}  // namespace prometheus

namespace uc::probe {

// One named spec file.
struct ProbeSetSource {
  std::string name;
  std::filesystem::path file;
};

// What a request was pinned to.
struct ProbeSetAssignment {
  std::string set;
  int64_t version = 0;
  // The version's spec steering, for RequestSteering::base (null: the spec has none).
  std::shared_ptr<const engine::RequestSteering> steering;
};

// One set as it stands (GET /v1/probes).
struct ProbeSetInfo {
  std::string name;
  std::filesystem::path file;
  int64_t version = 0;
  bool is_default = false;
  std::vector<std::string> points;  // extraction point names, spec order
};

struct ProbeSetStats {
  int64_t version = 0;     // the current version number
  int64_t reloads_ok = 0;  // successful Reloads
  int64_t reloads_failed = 0;
  std::string last_error;  // of the latest failed Reload; cleared by a successful one
  int retired = 0;         // versions shut down after being replaced
};

class ProbeSets : public engine::StepObserver {
 public:
  // Loads every source (names unique, non-empty; `default_set` one of them, or empty for the
  // first). InvalidArgument naming the set and file when one fails. `options.metrics` must be
  // set when the sets' series should appear in a server's registry (else a private one).
  static StatusOr<std::unique_ptr<ProbeSets>> Create(std::vector<ProbeSetSource> sources,
                                                     std::string default_set,
                                                     const ProbeRegistry& registry,
                                                     const models::ModelConfig& config,
                                                     ProbingOptions options);
  ~ProbeSets() override;  // Shutdown(false) when not done
  ProbeSets(const ProbeSets&) = delete;
  ProbeSets& operator=(const ProbeSets&) = delete;

  void SetResultCallback(std::function<void(RequestProbeResults)> callback) {
    on_result_ = std::move(callback);
  }
  // Installs this object as `engine`'s observer (no engine-wide base steering: Assign hands
  // each request its set's). Versions loaded later decode escalation texts with the engine's
  // tokenizer when the options named none.
  void AttachTo(engine::LLMEngine& engine);

  // Pins the requests `request_ids` (about to be added to the engine; the choices of one HTTP
  // request, say) to set `set`'s current version, all to the same one; empty `set`: the
  // default. NotFound naming the known sets (with a did-you-mean); InvalidArgument when an id
  // is already assigned (nothing is then assigned).
  StatusOr<ProbeSetAssignment> Assign(const std::vector<std::string>& request_ids,
                                      const std::string& set);
  // Forgets an assignment whose request never reached the engine (AddRequest failed).
  void Unassign(const std::string& request_id);

  // Re-reads every file; all or nothing (see the file comment). Returns the new version.
  StatusOr<int64_t> Reload();

  std::vector<ProbeSetInfo> Describe() const;
  ProbeSetStats stats() const;
  const std::string& default_set() const { return default_set_; }
  bool has_set(const std::string& name) const;
  Metrics& metrics() { return *metrics_; }

  // Ends every version: requests still registered get their results (ended_by "shutdown"),
  // async queues drain (wait) or are discarded, then the workers stop. Idempotent.
  void Shutdown(bool wait, double timeout_seconds = -1);

  // engine::StepObserver: each call goes to the version of the requests it concerns.
  void OnRequestAdded(uint64_t seq_id, const std::string& request_id,
                      std::span<const int32_t> prompt_ids) override;
  std::vector<worker::CaptureItem> PlanCapture(const worker::SchedulerOutput& plan) override;
  std::vector<engine::StopRequest> OnStepExecuted(const worker::SchedulerOutput& plan,
                                                  const std::vector<Tensor>& captured) override;
  std::vector<engine::SteeringSwitch> TakeSteeringSwitches() override;
  std::vector<uint64_t> TakeHolds() override;
  std::vector<engine::HoldDecision> TakeHoldDecisions() override;
  void SetWakeup(std::function<void()> wake) override;
  bool WantsFinalToken(uint64_t seq_id, int64_t num_generated) override;
  bool WantsPromptActivations(uint64_t seq_id) override;
  void OnRequestFinished(uint64_t seq_id, int64_t num_generated, bool aborted) override;

 private:
  struct Version;
  ProbeSets() = default;
  // Builds the session of one source (version `number`). Errors name the set and file.
  StatusOr<std::shared_ptr<Version>> Load(const ProbeSetSource& source, int64_t number);
  // Queues a version with no requests left for shutdown. REQUIRES: mu_ held.
  void RetireLocked(std::shared_ptr<Version> version);
  void ReaperLoop();

  std::vector<ProbeSetSource> sources_;
  std::string default_set_;
  const ProbeRegistry* registry_ = nullptr;
  models::ModelConfig config_;
  ProbingOptions options_;
  std::unique_ptr<Metrics> owned_metrics_;
  Metrics* metrics_ = nullptr;
  std::function<void(RequestProbeResults)> on_result_;

  std::mutex reload_mu_;  // serializes Reload
  mutable std::mutex mu_;
  // Guarded by mu_:
  std::map<std::string, std::shared_ptr<Version>> current_;             // by set name
  std::unordered_map<std::string, std::shared_ptr<Version>> assigned_;  // by request id
  int64_t version_ = 0;
  ProbeSetStats stats_;
  std::deque<std::shared_ptr<Version>> retiring_;
  bool shut_down_ = false;
  bool reaper_stop_ = false;
  std::condition_variable reaper_cv_;
  std::thread reaper_;

  // Engine thread only:
  std::unordered_map<uint64_t, std::shared_ptr<Version>> by_seq_;
  // Versions with live requests, in a fixed order (by version, then set name), each with its
  // count; and this step's parts: how many capture items each session planned.
  std::map<std::pair<int64_t, std::string>, std::pair<std::shared_ptr<Version>, int>> live_;
  std::vector<std::pair<Version*, size_t>> step_parts_;
  std::vector<engine::SteeringSwitch> switches_;
  std::vector<uint64_t> holds_;
  std::function<void()> wake_;  // guarded by mu_; handed to every version's session

  prometheus::Family<prometheus::Counter>* reloads_family_ = nullptr;
  prometheus::Counter* reloads_ok_ = nullptr;
  prometheus::Counter* reloads_failed_ = nullptr;
  prometheus::Family<prometheus::Gauge>* version_family_ = nullptr;
  prometheus::Family<prometheus::Counter>* requests_family_ = nullptr;
};

}  // namespace uc::probe
