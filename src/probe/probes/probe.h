// File: probe.h
// -----------------------------------------------------------------------------
// What a probe sees and says (Undercurrent v0.1's objects, with generated_index added):
//   ActivationRecord  one (request, extraction point, layer, token) activation, float32
//   ProbeSignal       continue / flag / abort, with confidence and metadata
//   ProbeResult       exactly one per (request, extraction point), from on_end
//   Probe             one fresh instance per (request, point): OnStart once, OnActivation per
//                     record in routed order, OnEnd exactly once
//   ProbeType         what a registry entry builds from a point's probe_args, once, at
//                     registration: checks the arguments, loads weights (shared, immutable),
//                     and then spawns cheap Probe instances.
//
// Thread-safety: a Probe instance is only ever called by one thread at a time (the router
// guarantees it); a ProbeType is immutable after creation and Spawn is thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "probe/spec/spec.h"

namespace uc::probe {

struct ActivationRecord {
  std::string request_id;
  std::string point;  // extraction point name
  int layer = 0;
  int64_t token_pos = 0;  // absolute index in prompt + generated
  bool is_generated = false;
  int64_t generated_index = -1;  // token_pos - prompt_len when generated, else -1
  TensorType tensor_type = TensorType::kResidualStream;
  std::vector<float> values;  // [hidden_size]
  double timestamp = 0.0;     // seconds since the Unix epoch, at capture

  std::span<const float> tensor() const { return values; }
  // Every field but the tensor, as JSON (the sinks' record format): {request_id,
  // extraction_point_name, layer, token_pos, tensor_type ("residual_stream", ...),
  // is_generated, generated_index (null for a prompt token), timestamp}.
  nlohmann::json Metadata() const;
};

// kEscalate (an inline point with an `escalation:` block): hold the request and ask the
// point's external classifier, whose answer continues or aborts it (probing_session.h).
enum class ProbeAction { kContinue, kFlag, kAbort, kEscalate };
std::string_view Name(ProbeAction a);  // "continue", "flag", "abort", "escalate"

struct ProbeSignal {
  ProbeAction action = ProbeAction::kContinue;
  std::optional<double> confidence;
  nlohmann::json metadata = nlohmann::json::object();
  double timestamp = 0.0;  // seconds since the Unix epoch; 0: filled in by the router
  // {action ("continue" | "flag" | "abort" | "escalate"), confidence (null when unset), metadata,
  // timestamp}
  nlohmann::json ToJson() const;
};

struct ProbeResult {
  std::string request_id;
  std::string point;
  nlohmann::json verdict;                   // probe-defined
  std::vector<ProbeSignal> signal_history;  // filled by the probe
  nlohmann::json metadata = nlohmann::json::object();
  // {request_id, extraction_point_name, verdict, signal_history: [signal ToJson()], metadata}
  nlohmann::json ToJson() const;
};

// Seconds since the Unix epoch, now: the clock of record and signal timestamps. The built-in
// probes stamp their signals with it, so signal_history carries real times.
double UnixSeconds();

struct RequestContext {
  std::string request_id;
  nlohmann::json prompt_metadata = nlohmann::json::object();  // {"model", "prompt_len", ...}
  const ExtractionPoint* point = nullptr;                     // this probe's point
};

class Probe {
 public:
  virtual ~Probe() = default;
  virtual void OnStart(const RequestContext& ctx) { (void)ctx; }
  // May return a signal; only an inline point's kAbort stops generation (and its kEscalate
  // holds it until the classifier decides).
  virtual std::optional<ProbeSignal> OnActivation(const ActivationRecord& record) = 0;
  // Called exactly once, even with zero activations or after an abort.
  virtual ProbeResult OnEnd(const RequestContext& ctx) = 0;
};

// One record's outcome in a batched call (ProbeType::OnActivationBatch): a signal (or none), or
// the error its probe raised (non-empty).
struct BatchedSignal {
  std::optional<ProbeSignal> signal;
  std::string error;
};

// What a ProbeType may look at while checking its arguments.
// What to do with a probe artifact (a weights file) whose metadata says it was made for another
// model, layer or site than the one it is deployed on (probes/trained/artifact.h).
enum class ArtifactPolicy { kIgnore, kWarn, kRefuse };

struct ProbeEnv {
  // Length of every activation the probe will get (hidden_size, num_experts for router_logits /
  // expert_weights, the sum of the inputs' with combine: concat); 0: unknown.
  // Weight sizes are then not checked at creation.
  int hidden_size = 0;
  std::filesystem::path base_dir;  // relative paths in probe_args resolve against it
  const ExtractionPoint* point = nullptr;
  // The deployment's model fingerprint (engine::ModelFingerprint); null: unknown, not checked.
  nlohmann::json model_fingerprint;
  ArtifactPolicy artifact_policy = ArtifactPolicy::kWarn;
};

class ProbeType {
 public:
  virtual ~ProbeType() = default;
  virtual ProbeKind kind() const = 0;
  // A fresh instance for one (request, point): it shares only immutable state (weights) with
  // its siblings. Never null.
  virtual std::unique_ptr<Probe> Spawn() const = 0;

  // Batched types (probes implemented outside C++, e.g. in Python, where a call has a fixed
  // cost): true makes the session call OnActivationBatch once per engine step for each inline
  // point of this type under the `reject` intervention (the default), with all that step's
  // records of the point, every request's, in routed (request, token_pos, layer) order, instead
  // of one OnActivation per record. Signals are then applied in that order, so an ABORT at token
  // p stops its request exactly as a per-record ABORT does (no token after p is returned), though
  // the call has already seen the request's later records of the same step (prefill). Async
  // points call OnActivationBatch on a worker with every record a (request, point) queue held
  // when served (async_executor.h). `block_until_signal` points and generated[-k] points still
  // call OnActivation per record. False by default.
  virtual bool batched() const { return false; }
  // REQUIRES: probes.size() == records.size(); probes[i] is the instance (from this type's
  // Spawn) of the request records[i] belongs to. Returns one outcome per record, in order: a
  // record whose outcome has an error fails under its point's intervention policy (on_timeout
  // decides, as for a throwing OnActivation); a wrong count or a throw fails every record of
  // the call. Called on the engine thread (inline points) or an async worker (async points; one
  // call at a time per request's probe, calls for different requests may overlap). The default
  // calls each probe's OnActivation.
  virtual std::vector<BatchedSignal> OnActivationBatch(
      std::span<Probe* const> probes, std::span<const ActivationRecord> records) const;
};

}  // namespace uc::probe
