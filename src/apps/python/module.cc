// undercurrent._core: the extension module behind the Python package (python/undercurrent).
// It exposes only what the package's Python layer needs: Model (py_model.h), spec parsing, and
// the probe registry's names. Errors come out as _core.Error(code, message); the package turns
// them into 0.1's exception types.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <stdexcept>
#include <string>

#include "apps/python/py_model.h"
#include "probe/probes/registry.h"
#include "probe/sinks/ndjson_file_sink.h"
#include "probe/spec/spec.h"

namespace nb = nanobind;

namespace uc::python {
namespace {

// A Status as a Python exception: _core.Error with args (code name, message).
struct StatusError : std::runtime_error {
  StatusError(std::string code_, const std::string& message)
      : std::runtime_error(message), code(std::move(code_)) {}
  std::string code;
};

[[noreturn]] void Raise(const Status& status) {
  throw StatusError(std::string(StatusCodeName(status.code())), status.message());
}

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
  if (probing.contains("log_file")) {
    o.probing.sinks.push_back(Take(probe::NdjsonFileSink::Open(
        nb::cast<std::string>(probing["log_file"]), probe::NdjsonFileOptions{})));
  }
  return o;
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
      "builtin_probe_types", [] { return uc::probe::ProbeRegistry().List(); },
      "The probe types of the C++ registry (the built-ins).");

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
          [](PyModel& model, const std::vector<std::string>& prompts, int max_tokens,
             float temperature, float top_p, int top_k, std::optional<uint64_t> seed,
             const std::vector<std::string>& stop, bool ignore_eos) {
            uc::worker::SamplingParams p;
            p.max_tokens = max_tokens;
            p.temperature = temperature;
            p.top_p = top_p;
            p.top_k = top_k;
            p.seed = seed;
            p.stop = stop;
            p.ignore_eos = ignore_eos;
            if (const uc::Status valid = p.Validate(); !valid.ok()) uc::python::Raise(valid);
            return model.Generate(prompts, p);
          },
          nb::arg("prompts"), nb::arg("max_tokens"), nb::arg("temperature"), nb::arg("top_p"),
          nb::arg("top_k"), nb::arg("seed").none(), nb::arg("stop"), nb::arg("ignore_eos"))
      .def("close",
           [](PyModel& model) {
             nb::gil_scoped_release release;
             model.Close();
           })
      .def_prop_ro("num_layers", [](const PyModel& m) { return m.config().num_hidden_layers; })
      .def_prop_ro("hidden_size",
                   [](const PyModel& m) { return static_cast<int64_t>(m.config().hidden_size); })
      .def_prop_ro("max_model_len", [](const PyModel& m) { return m.engine().max_model_len(); });
}
