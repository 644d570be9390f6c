// File: py_model.h
// -----------------------------------------------------------------------------
// PyModel: what the package's ProbedModel drives — one LLMEngine (one process) and, with a spec,
// one ProbingSession whose registry holds the built-in probes and the Python probes the model
// was opened with. Every prompt of a Generate call goes into the engine at once and is served
// by continuous batching; the GIL is released while the engine steps, so Python probes (which
// take it per batch) and other Python threads run meanwhile.
//
// Ctrl-C: between steps Generate checks for a pending signal (PyErr_CheckSignals); a
// KeyboardInterrupt aborts every request of the call, lets the engine finish them and the
// probes deliver their results, then is raised. The model stays usable.
//
// Capture runs prompts with a second, private probing session in place of the model's (the
// capture probes of probe/runtime/capture.h, as `undercurrent capture` uses them), so its rows
// are the CLI's rows for the same prompts and spec.
//
// Thread-safety: Generate and Capture calls are serialized (a second caller waits, without the
// GIL). Close is terminal and idempotent; Generate after Close is an error.
#pragma once

#include <nanobind/nanobind.h>

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/llm_engine.h"
#include "probe/probes/registry.h"
#include "probe/runtime/probing_session.h"

namespace uc::python {

// A Status on its way to Python: the module turns it into _core.Error(code name, message).
struct StatusException : std::runtime_error {
  explicit StatusException(const Status& status)
      : std::runtime_error(status.message()), code(std::string(StatusCodeName(status.code()))) {}
  StatusException(std::string code_name, const std::string& message)
      : std::runtime_error(message), code(std::move(code_name)) {}
  std::string code;
};

struct PythonProbeEntry {
  std::string name;
  probe::ProbeKind kind = probe::ProbeKind::kSingleShot;
  nanobind::object bridge;  // undercurrent._bridge.ProbeBridge
};

struct PyModelOptions {
  engine::EngineOptions engine;
  std::string model_name;  // RequestContext prompt_metadata["model"]
  std::string spec_text;   // a YAML spec, or empty
  std::string spec_path;   // a spec file (relative paths in it resolve against it), or empty
  std::vector<PythonProbeEntry> python_probes;
  probe::ProbingOptions probing;  // sinks, async workers and queues, intervention defaults
  // Several processes (SPMD): every rank of `mpirun -np T*P python SCRIPT` opens the model with
  // the same options; rank 0 gets the engine, the other ranks serve its steps until it closes.
  int tensor_parallel_size = 1;
  int pipeline_parallel_size = 1;
  double step_timeout_seconds = 120.0;  // the driver's watchdog per step
};

// One request of a batch: its prompt (text or ids), sampling and per-request steering.
struct PyRequest {
  engine::Prompt prompt;
  worker::SamplingParams params;
  engine::RequestSteering steering;
};

// What Capture stores instead of the raw rows: these SAE features of each row (cfg.json and
// sae_weights.safetensors in `dir`); empty `features`: all of them.
struct PySaeOptions {
  std::string dir;
  std::vector<int64_t> features;
};

class PyModel {
 public:
  // Loads the model and registers the spec's probes. InvalidArgument / NotFound naming the file,
  // field or probe_type when the spec does not fit; the errors of LLMEngine::Open.
  // With T×P > 1, or under an MPI launcher: MPI starts (once per process) and this rank joins
  // the deployment. On rank 0 the model is returned as usual; on the others this returns once
  // rank 0's model closed, with a model whose is_worker() is true (and that is closed).
  // FailedPrecondition when T×P > 1 without a launcher; InvalidArgument when the launcher's
  // world size is not T×P.
  // REQUIRES: the GIL is held (it is released while the model loads and while a worker serves).
  static StatusOr<std::unique_ptr<PyModel>> Open(PyModelOptions options);
  ~PyModel();

  // Generates for every prompt in one continuous batch. One dict per prompt, in order: the
  // output ({request_id, prompt, text, token_ids, prompt_ids, finish_reason, stop_reason,
  // abort (null or {by, reason, point, token_pos, confidence}), probe_results (JSON text:
  // [ProbeResult::ToJson()]), usage {prompt_tokens, completion_tokens}, metrics}) or {error}
  // for a prompt the engine refused. REQUIRES: the GIL is held.
  nanobind::list Generate(std::vector<PyRequest> requests);
  // Runs `requests` in one continuous batch with the capture probes of `spec_text` (YAML named
  // "spec") or `spec_path` in place of the model's probes, and returns {points: [point names,
  // spec order], outputs: [the Generate dicts], values: float32 [rows, width], and per row
  // prompt_index, point_index, layer, token_pos, generated_index (-1: a prompt token), token_id
  // (int64 arrays), is_generated (bool), token_text (list of str)}. Rows are ordered by prompt,
  // then (token_pos, layer, point) — `undercurrent capture`'s rows; width is the hidden size or
  // the number of SAE features. InvalidArgument naming the file and field for a bad spec or SAE.
  // REQUIRES: the GIL is held.
  nanobind::dict Capture(std::vector<PyRequest> requests, const std::string& spec_text,
                         const std::string& spec_path, const PySaeOptions& sae);
  // `undercurrent calibrate` on this model: runs the prompts file's requests (`defaults` for
  // what a line leaves out) in one batch with the points of `spec_text` (YAML named "spec") or
  // `spec_path` — with thresholds no score reaches (probe::WithoutThresholds) unless `measure`
  // — in place of the model's probes; the built-in and this model's Python probe types.
  // Returns {points: JSON text, the CLI's --json "points" ({point, threshold, requests,
  // flagged, unscored}; with `measure` {point, requests, flagged, rate, rate_95}), requests,
  // model: the fingerprint JSON text, spec_file: what `calibrate --out` writes (empty with
  // `measure`; its header names the prompts `prompts_name`, or the file when that is empty)}.
  // InvalidArgument for a bad spec, prompts file or target_fpr (not in (0, 1)).
  // REQUIRES: the GIL is held.
  nanobind::dict Calibrate(const std::string& prompts_file, const worker::SamplingParams& defaults,
                           const std::string& spec_text, const std::string& spec_path,
                           double target_fpr, bool measure, const std::string& prompts_name);
  // Drains every async probe queue, shuts the session and the engine down.
  void Close();

  bool is_worker() const { return worker_; }
  // MPI_Finalize when this process started MPI (collective: every rank calls it, after its
  // models closed). Idempotent.
  static Status FinalizeMpi();

  const models::ModelConfig& config() const;
  const engine::LLMEngine& engine() const { return *engine_; }

 private:
  struct Slot;
  PyModel() = default;
  // Adds `requests` and steps the engine until they finish, without the GIL; Ctrl-C aborts
  // them and is raised. With `wait_results`, also waits for the model session's results.
  // REQUIRES: generate_mu_ held, the GIL held.
  std::vector<Slot> Run(const std::vector<PyRequest>& requests, bool wait_results);
  nanobind::dict OutputDict(const Slot& slot, const PyRequest& request);

  std::unique_ptr<engine::LLMEngine> engine_;
  probe::ProbeRegistry registry_;
  std::unique_ptr<probe::ProbingSession> session_;
  std::mutex generate_mu_;  // one Generate at a time
  uint64_t next_id_ = 0;
  std::string id_prefix_;
  std::string model_name_;
  // Probe results by request id, delivered by the session (engine thread or async worker).
  std::mutex results_mu_;
  std::condition_variable results_cv_;
  std::map<std::string, probe::RequestProbeResults> results_;
  bool closed_ = false;
  bool worker_ = false;
};

}  // namespace uc::python
