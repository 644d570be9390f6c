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
// Thread-safety: Generate calls are serialized (a second caller waits, without the GIL). Close
// is terminal and idempotent; Generate after Close is an error.
#pragma once

#include <nanobind/nanobind.h>

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/llm_engine.h"
#include "probe/probes/registry.h"
#include "probe/runtime/probing_session.h"

namespace uc::python {

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
};

class PyModel {
 public:
  // Loads the model and registers the spec's probes. InvalidArgument / NotFound naming the file,
  // field or probe_type when the spec does not fit; the errors of LLMEngine::Open.
  // REQUIRES: the GIL is held (it is released while the model loads).
  static StatusOr<std::unique_ptr<PyModel>> Open(PyModelOptions options);
  ~PyModel();

  // Generates for every prompt in one continuous batch. One dict per prompt, in order: the
  // output ({request_id, prompt, text, token_ids, prompt_ids, finish_reason, stop_reason,
  // abort (null or {by, reason, point, token_pos, confidence}), probe_results (JSON text:
  // [ProbeResult::ToJson()]), usage {prompt_tokens, completion_tokens}, metrics}) or {error}
  // for a prompt the engine refused. REQUIRES: the GIL is held.
  nanobind::list Generate(const std::vector<std::string>& prompts,
                          const worker::SamplingParams& params);
  // Drains every async probe queue, shuts the session and the engine down.
  void Close();

  const models::ModelConfig& config() const;
  const engine::LLMEngine& engine() const { return *engine_; }

 private:
  PyModel() = default;

  std::unique_ptr<engine::LLMEngine> engine_;
  probe::ProbeRegistry registry_;
  std::unique_ptr<probe::ProbingSession> session_;
  std::mutex generate_mu_;  // one Generate at a time
  uint64_t next_id_ = 0;
  std::string id_prefix_;
  // Probe results by request id, delivered by the session (engine thread or async worker).
  std::mutex results_mu_;
  std::condition_variable results_cv_;
  std::map<std::string, probe::RequestProbeResults> results_;
  bool closed_ = false;
};

}  // namespace uc::python
