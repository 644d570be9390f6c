// undercurrent._core: the extension module behind the Python package (python/undercurrent).
// It exposes only what the package's Python layer needs: Model (py_model.h), spec parsing, and
// the probe registry's names. Errors come out as _core.Error(code, message); the package turns
// them into 0.1's exception types.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "apps/python/py_model.h"
#include "probe/probes/registry.h"
#include "probe/sinks/ndjson_file_sink.h"
#include "probe/sinks/redaction.h"
#include "probe/sinks/webhook_sink.h"
#include "probe/spec/spec.h"
#include "worker/steering_config.h"

namespace nb = nanobind;

namespace uc::python {
namespace {

using StatusError = StatusException;

// A Status as a Python exception: _core.Error with args (code name, message).
[[noreturn]] void Raise(const Status& status) { throw StatusException(status); }

template <typename T>
T Take(StatusOr<T> value) {
  if (!value.ok()) Raise(value.status());
  return std::move(value).value();
}

template <typename T>
T Get(const nb::dict& d, const char* key, T fallback) {
  return d.contains(key) ? nb::cast<T>(d[key]) : fallback;
}

nlohmann::json PointToJson(const probe::ExtractionPoint& p) {
  nlohmann::json j = {{"name", p.name},
                      {"layers", p.layers},
                      {"tensor_type", std::string(probe::Name(p.tensor_type))},
                      {"position", p.position.ToString()},
                      {"probe_type", p.probe_type},
                      {"probe_kind", std::string(probe::Name(p.probe_kind))},
                      {"probe_args", p.probe_args},
                      {"execution_mode", std::string(probe::Name(p.execution_mode))},
                      {"line", p.line}};
  if (p.queue_depth.has_value()) j["queue_depth"] = *p.queue_depth;
  if (p.overflow_policy.has_value()) {
    j["overflow_policy"] = std::string(probe::Name(*p.overflow_policy));
  }
  if (p.intervention.has_value()) {
    j["intervention"] = {{"mode", std::string(probe::Name(p.intervention->mode))},
                         {"on_timeout", std::string(probe::Name(p.intervention->on_timeout))}};
    if (p.intervention->timeout_ms.has_value()) {
      j["intervention"]["timeout_ms"] = *p.intervention->timeout_ms;
    }
  }
  return j;
}

// Parses a spec (a file when `is_path`, else YAML text named `name`): its points as JSON text.
std::string ParseSpec(const std::string& source, const std::string& name, bool is_path) {
  probe::Spec spec =
      Take(is_path ? probe::ParseSpecFile(source) : probe::ParseSpecText(source, name));
  nlohmann::json points = nlohmann::json::array();
  for (const probe::ExtractionPoint& p : spec.extraction_points) points.push_back(PointToJson(p));
  return points.dump();
}

// {redact_prompt_text, redact_keys, drop_keys, replacement} (probe/sinks/redaction.h).
probe::RedactionOptions ToRedaction(const nb::dict& d) {
  probe::RedactionOptions r;
  r.redact_prompt_text = Get<bool>(d, "redact_prompt_text", false);
  r.redact_keys = Get<std::vector<std::string>>(d, "redact_keys", {});
  r.drop_keys = Get<std::vector<std::string>>(d, "drop_keys", {});
  r.replacement = Get<std::string>(d, "replacement", r.replacement);
  return r;
}

// Records kept for the package, which hands them to a Python LogSink (its write_signal /
// write_result) on the caller's thread after a batch: the engine's threads never take the GIL
// for a sink. Thread-safe.
class BufferSink : public probe::Sink {
 public:
  void Write(const nlohmann::json& record) override {
    std::lock_guard<std::mutex> lock(mu_);
    records_.push_back(record.dump());
  }
  std::string name() const override { return "python"; }
  // The records written since the last call (JSON text, in the order written).
  std::vector<std::string> Drain() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> out;
    out.swap(records_);
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> records_;
};

// What Python holds of a BufferSink (_core.RecordBuffer); the engine shares the sink.
struct RecordBuffer {
  std::shared_ptr<BufferSink> sink = std::make_shared<BufferSink>();
};

// A sink the package describes as a dict: {kind: "buffer", buffer: RecordBuffer} (a Python
// LogSink's records), {kind: "file", path, redaction} (FileLogSink) or
// {kind: "webhook", url, max_retries, backoff_base, request_timeout, dead_letter_path,
// queue_maxsize, bearer_token_env, redaction} (WebhookLogSink).
std::shared_ptr<probe::Sink> ToSink(nb::handle h) {
  const nb::dict d = nb::cast<nb::dict>(h);
  const std::string kind = nb::cast<std::string>(d["kind"]);
  if (kind == "buffer") return nb::cast<RecordBuffer&>(d["buffer"]).sink;
  const probe::RedactionOptions redaction = ToRedaction(nb::cast<nb::dict>(d["redaction"]));
  if (kind == "file") {
    probe::NdjsonFileOptions file;
    file.redactor = Take(probe::Redactor::Create(redaction));
    return Take(probe::NdjsonFileSink::Open(nb::cast<std::string>(d["path"]), std::move(file)));
  }
  probe::WebhookOptions w;
  w.url = nb::cast<std::string>(d["url"]);
  w.max_retries = Get<int>(d, "max_retries", w.max_retries);
  w.backoff_base_seconds = Get<double>(d, "backoff_base", w.backoff_base_seconds);
  w.request_timeout_seconds = Get<double>(d, "request_timeout", w.request_timeout_seconds);
  w.dead_letter_path = Get<std::string>(d, "dead_letter_path", "");
  w.queue_max = Get<size_t>(d, "queue_maxsize", w.queue_max);
  w.bearer_token_env = Get<std::string>(d, "bearer_token_env", "");
  w.redaction = redaction;
  return Take(probe::WebhookSink::Open(std::move(w)));
}

PyModelOptions ToOptions(const nb::dict& engine, const std::string& model_name,
                         const std::string& spec_text, const std::string& spec_path,
                         const nb::list& python_probes, const nb::dict& probing) {
  PyModelOptions o;
  o.model_name = model_name;
  o.engine.model_path = nb::cast<std::string>(engine["model"]);
  if (engine.contains("tokenizer") && !engine["tokenizer"].is_none()) {
    o.engine.tokenizer_path = nb::cast<std::string>(engine["tokenizer"]);
  }
  o.engine.num_threads = Get<int>(engine, "threads", 0);
  o.engine.max_model_len = Get<int>(engine, "max_model_len", 0);
  o.engine.max_num_seqs = Get<int>(engine, "max_num_seqs", o.engine.max_num_seqs);
  o.engine.max_num_batched_tokens =
      Get<int>(engine, "max_num_batched_tokens", o.engine.max_num_batched_tokens);
  o.engine.max_prefill_chunk = Get<int>(engine, "max_prefill_chunk", o.engine.max_prefill_chunk);
  o.engine.kv_cache_bytes = Get<int64_t>(engine, "kv_cache_memory", 0);
  const std::string matmul = Get<std::string>(engine, "matmul", "exact");
  if (matmul == "int8") {
    o.engine.load.matmul_precision = kernels::MatMulPrecision::kInt8;
  } else if (matmul != "exact") {
    throw StatusError("INVALID_ARGUMENT",
                      "matmul: expected 'exact' or 'int8', got '" + matmul + "'");
  }
  o.engine.load.batch_invariant = Get<bool>(engine, "batch_invariant", true);
  o.engine.load.expert_parallel = Get<bool>(engine, "enable_expert_parallel", false);
  o.tensor_parallel_size = Get<int>(engine, "tensor_parallel_size", 1);
  o.pipeline_parallel_size = Get<int>(engine, "pipeline_parallel_size", 1);
  o.step_timeout_seconds = Get<double>(engine, "step_timeout", o.step_timeout_seconds);
  o.spec_text = spec_text;
  o.spec_path = spec_path;
  for (nb::handle h : python_probes) {
    nb::tuple t = nb::cast<nb::tuple>(h);
    const std::string kind = nb::cast<std::string>(t[1]);
    o.python_probes.push_back(
        {nb::cast<std::string>(t[0]),
         kind == "trajectory" ? probe::ProbeKind::kTrajectory : probe::ProbeKind::kSingleShot,
         nb::borrow(t[2])});
  }
  o.probing.async.workers = Get<int>(probing, "workers", o.probing.async.workers);
  o.probing.async.default_queue_depth =
      Get<int>(probing, "default_queue_depth", o.probing.async.default_queue_depth);
  o.probing.async.drain_timeout_seconds =
      Get<double>(probing, "drain_timeout", o.probing.async.drain_timeout_seconds);
  if (probing.contains("default_overflow_policy")) {
    const std::string policy = nb::cast<std::string>(probing["default_overflow_policy"]);
    if (policy == "drop_newest") {
      o.probing.async.default_overflow = probe::OverflowPolicy::kDropNewest;
    } else if (policy == "block") {
      o.probing.async.default_overflow = probe::OverflowPolicy::kBlock;
    } else if (policy == "drop_oldest") {
      o.probing.async.default_overflow = probe::OverflowPolicy::kDropOldest;
    } else {
      throw StatusError("INVALID_ARGUMENT",
                        "default_overflow_policy: expected drop_oldest, drop_newest or block, "
                        "got '" +
                            policy + "'");
    }
  }
  o.probing.circuit_breaker_threshold =
      Get<int>(probing, "circuit_breaker_threshold", o.probing.circuit_breaker_threshold);
  if (probing.contains("sinks")) {
    for (nb::handle h : nb::cast<nb::list>(probing["sinks"])) o.probing.sinks.push_back(ToSink(h));
  }
  return o;
}

// A request from the package: (prompt: str | list[int], params: dict, steering: [(layer, site,
// tokens, scale, norm_match, values float32 [hidden])]). Sampling values are checked by
// SamplingParams::Validate, steering vectors by the engine (both name the field).
PyRequest ToRequest(nb::handle h) {
  nb::tuple t = nb::cast<nb::tuple>(h);
  PyRequest r;
  const nb::handle prompt = t[0];
  if (nb::isinstance<nb::str>(prompt)) {
    r.prompt = engine::Prompt::Text(nb::cast<std::string>(prompt));
  } else {
    r.prompt = engine::Prompt::Ids(nb::cast<std::vector<int32_t>>(prompt));
  }
  const nb::dict params = nb::cast<nb::dict>(t[1]);
  worker::SamplingParams& p = r.params;
  p.max_tokens = Get<int>(params, "max_tokens", p.max_tokens);
  p.temperature = Get<float>(params, "temperature", 0.0f);
  p.top_p = Get<float>(params, "top_p", p.top_p);
  p.top_k = Get<int>(params, "top_k", p.top_k);
  p.min_p = Get<float>(params, "min_p", p.min_p);
  if (params.contains("seed") && !params["seed"].is_none()) {
    p.seed = nb::cast<uint64_t>(params["seed"]);
  }
  p.stop = Get<std::vector<std::string>>(params, "stop", {});
  p.stop_token_ids = Get<std::vector<int32_t>>(params, "stop_token_ids", {});
  p.ignore_eos = Get<bool>(params, "ignore_eos", false);
  if (const Status valid = p.Validate(); !valid.ok()) Raise(valid);
  auto config = std::make_shared<worker::SteeringConfig>();
  for (nb::handle v : nb::cast<nb::list>(t[2])) {
    nb::tuple e = nb::cast<nb::tuple>(v);
    worker::SteeringVector vector;
    vector.layer = nb::cast<int32_t>(e[0]);
    vector.site = Take(worker::ParseSteeringSite(nb::cast<std::string>(e[1])));
    vector.tokens = Take(worker::ParseSteeringTokens(nb::cast<std::string>(e[2])));
    vector.scale = nb::cast<float>(e[3]);
    vector.norm_match = nb::cast<bool>(e[4]);
    auto values =
        nb::cast<nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu>>(e[5]);
    vector.values.assign(values.data(), values.data() + values.shape(0));
    config->vectors.push_back(std::move(vector));
  }
  if (!config->empty()) r.steering.config = std::move(config);
  return r;
}

std::vector<PyRequest> ToRequests(const nb::list& requests) {
  std::vector<PyRequest> out;
  out.reserve(requests.size());
  for (nb::handle h : requests) out.push_back(ToRequest(h));
  return out;
}

}  // namespace
}  // namespace uc::python

NB_MODULE(_core, m) {
  using uc::python::PyModel;
  m.attr("__version__") = UC_VERSION;
  static nb::exception<uc::python::StatusError> error(m, "Error");
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const uc::python::StatusError& e) {
      PyErr_SetObject(error.ptr(), nb::make_tuple(e.code, std::string(e.what())).ptr());
    }
  });

  m.def("parse_spec", &uc::python::ParseSpec, nb::arg("source"), nb::arg("name") = "",
        nb::arg("is_path") = false,
        "Parses and validates a spec; its extraction points as JSON text. Raises Error.");
  m.def(
      "finalize_mpi",
      [] {
        nb::gil_scoped_release release;
        if (const uc::Status s = PyModel::FinalizeMpi(); !s.ok()) uc::python::Raise(s);
      },
      "MPI_Finalize when this process started MPI (every rank, at exit). Idempotent.");
  m.def(
      "reserved_kv_cache_bytes", [] { return uc::engine::ReservedKvCacheBytes(); },
      "The KV cache bytes the open engines of this process reserved "
      "(engine/scheduling/kv_cache_plan.h).");
  m.def(
      "builtin_probe_types", [] { return uc::probe::ProbeRegistry().List(); },
      "The probe types of the C++ registry (the built-ins).");

  nb::class_<uc::python::RecordBuffer>(m, "RecordBuffer")
      .def(nb::init<>())
      .def(
          "drain", [](uc::python::RecordBuffer& b) { return b.sink->Drain(); },
          "The sink records written since the last drain, as JSON text, in order.");

  nb::class_<PyModel>(m, "Model")
      .def_static(
          "open",
          [](const nb::dict& engine, const std::string& model_name, const std::string& spec_text,
             const std::string& spec_path, const nb::list& python_probes, const nb::dict& probing) {
            return uc::python::Take(PyModel::Open(uc::python::ToOptions(
                engine, model_name, spec_text, spec_path, python_probes, probing)));
          },
          nb::arg("engine"), nb::arg("model_name"), nb::arg("spec_text"), nb::arg("spec_path"),
          nb::arg("python_probes"), nb::arg("probing"))
      .def(
          "generate",
          [](PyModel& model, const nb::list& requests) {
            return model.Generate(uc::python::ToRequests(requests));
          },
          nb::arg("requests"),
          "Generates [(prompt, params, steering)] in one batch: a dict per request, in order.")
      .def(
          "capture",
          [](PyModel& model, const nb::list& requests, const std::string& spec_text,
             const std::string& spec_path, const std::string& sae_dir,
             const std::vector<int64_t>& sae_features) {
            return model.Capture(uc::python::ToRequests(requests), spec_text, spec_path,
                                 {sae_dir, sae_features});
          },
          nb::arg("requests"), nb::arg("spec_text"), nb::arg("spec_path"), nb::arg("sae_dir"),
          nb::arg("sae_features"),
          "Runs the requests in one batch with a spec's capture probes: the rows of "
          "`undercurrent capture` as arrays (PyModel::Capture).")
      .def(
          "calibrate",
          [](PyModel& model, const std::string& prompts_file, const nb::dict& defaults,
             const std::string& spec_text, const std::string& spec_path, double target_fpr,
             bool measure, const std::string& prompts_name) {
            // The CLI's defaults: greedy, SamplingParams' max_tokens.
            uc::worker::SamplingParams p;
            p.temperature = uc::python::Get<float>(defaults, "temperature", 0.0f);
            p.max_tokens = uc::python::Get<int>(defaults, "max_tokens", p.max_tokens);
            return model.Calibrate(prompts_file, p, spec_text, spec_path, target_fpr, measure,
                                   prompts_name);
          },
          nb::arg("prompts_file"), nb::arg("defaults"), nb::arg("spec_text"), nb::arg("spec_path"),
          nb::arg("target_fpr"), nb::arg("measure"), nb::arg("prompts_name") = "",
          "`undercurrent calibrate` (or --measure) on this model (PyModel::Calibrate).")
      .def("close",
           [](PyModel& model) {
             nb::gil_scoped_release release;
             model.Close();
           })
      .def_prop_ro("is_worker", &PyModel::is_worker)
      .def_prop_ro("num_layers", [](const PyModel& m) { return m.config().num_hidden_layers; })
      .def_prop_ro("hidden_size",
                   [](const PyModel& m) { return static_cast<int64_t>(m.config().hidden_size); })
      .def_prop_ro("max_model_len", [](const PyModel& m) { return m.engine().max_model_len(); })
      .def_prop_ro("kv_cache_bytes", [](const PyModel& m) { return m.engine().kv_cache_bytes(); })
      .def_prop_ro("kv_budget_bytes",
                   [](const PyModel& m) { return m.engine().kv_budget_bytes(); });
}
