#include "apps/python/py_model.h"

#include <dlfcn.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <chrono>
#include <random>
#include <utility>
#include <variant>

#include "apps/python/py_probe_type.h"
#include "distributed/mpi/mpi_runtime.h"
#include "engine/deployment.h"
#include "engine/generator.h"
#include "engine/model_fingerprint.h"
#include "engine/prompts_file.h"
#include "probe/probes/trained/sae.h"
#include "probe/runtime/calibration.h"
#include "probe/runtime/capture.h"
#include "probe/spec/spec.h"

namespace nb = nanobind;

namespace uc::python {
namespace {

nb::object AbortToPython(const std::optional<engine::AbortInfo>& abort) {
  if (!abort.has_value()) return nb::none();
  nb::dict d;
  d["by"] = abort->by;
  d["reason"] = abort->reason;
  d["point"] = abort->point;
  d["token_pos"] = abort->token_pos;
  d["confidence"] = abort->confidence.has_value() ? nb::cast(*abort->confidence) : nb::none();
  return d;
}

nb::list Ids(const std::vector<int32_t>& ids) {
  nb::list out;
  for (int32_t id : ids) out.append(id);
  return out;
}

// A per-model prefix for request ids, so that ids from two models (or runs) appending to one
// sink file never collide.
std::string RandomPrefix() {
  std::random_device device;
  std::mt19937_64 rng((static_cast<uint64_t>(device()) << 32) ^ device());
  char prefix[32];
  std::snprintf(prefix, sizeof(prefix), "req-%08llx-",
                static_cast<unsigned long long>(rng() & 0xffffffffULL));
  return prefix;
}

// Python loads this module (and libmpi with it) with RTLD_LOCAL; Open MPI's plugins, loaded
// later, look for libmpi's symbols globally. Promote the already loaded library first (its
// sonames: Open MPI, MPICH).
void MakeMpiSymbolsGlobal() {
  for (const char* name : {"libmpi.so.40", "libmpi.so.12", "libmpi.so"}) {
    if (dlopen(name, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD) != nullptr) return;
  }
}

// This rank's part of a multi-process deployment (null unless MPI is in use).
StatusOr<std::unique_ptr<engine::Deployment>> JoinDeployment(const PyModelOptions& o) {
  const int world = o.tensor_parallel_size * o.pipeline_parallel_size;
  if (world == 1 && !distributed::LaunchedUnderMpi()) return std::unique_ptr<engine::Deployment>();
  if (!distributed::LaunchedUnderMpi()) {
    return FailedPreconditionError(
        "tensor_parallel_size x pipeline_parallel_size = " + std::to_string(world) +
        " processes: run the script under an MPI launcher, every rank the same script (mpirun "
        "-np " +
        std::to_string(world) + " python SCRIPT); rank 0 gets the results");
  }
  if (!distributed::MpiRuntime::initialized()) {
    MakeMpiSymbolsGlobal();
    UC_RETURN_IF_ERROR(distributed::MpiRuntime::Init(nullptr, nullptr));
  }
  if (distributed::MpiRuntime::world_size() != world) {
    return InvalidArgumentError(
        "tensor_parallel_size x pipeline_parallel_size = " + std::to_string(world) +
        ", but the launcher started " + std::to_string(distributed::MpiRuntime::world_size()) +
        " processes");
  }
  distributed::MpiBackend backend;
  engine::DeploymentOptions d;
  d.model_path = o.engine.model_path;
  d.tensor_parallel_size = o.tensor_parallel_size;
  d.pipeline_parallel_size = o.pipeline_parallel_size;
  d.num_threads = o.engine.num_threads;
  d.load = o.engine.load;
  d.step_timeout_seconds = o.step_timeout_seconds;
  return engine::Deployment::Create(d, &backend);
}

}  // namespace

Status PyModel::FinalizeMpi() { return distributed::MpiRuntime::Finalize(); }

StatusOr<std::unique_ptr<PyModel>> PyModel::Open(PyModelOptions options) {
  std::unique_ptr<PyModel> model(new PyModel());
  model->id_prefix_ = RandomPrefix();
  model->model_name_ = options.model_name;
  for (PythonProbeEntry& p : options.python_probes) {
    UC_RETURN_IF_ERROR(
        RegisterPythonProbe(model->registry_, p.name, p.kind, std::move(p.bridge), true));
  }
  std::optional<probe::Spec> spec;
  if (!options.spec_path.empty()) {
    UC_ASSIGN_OR_RETURN(spec, probe::ParseSpecFile(options.spec_path));
  } else if (!options.spec_text.empty()) {
    UC_ASSIGN_OR_RETURN(spec, probe::ParseSpecText(options.spec_text, "spec"));
  }
  {
    nb::gil_scoped_release release;
    UC_ASSIGN_OR_RETURN(std::unique_ptr<engine::Deployment> deployment, JoinDeployment(options));
    if (deployment != nullptr && !deployment->is_driver()) {
      deployment->worker().Loop();  // until the driver's engine shuts the ranks down
      model->worker_ = true;
      model->closed_ = true;
      return model;
    }
    if (deployment != nullptr) {
      UC_ASSIGN_OR_RETURN(model->engine_,
                          engine::LLMEngine::OpenDriver(options.engine, std::move(deployment)));
    } else {
      UC_ASSIGN_OR_RETURN(model->engine_, engine::LLMEngine::Open(options.engine));
    }
  }
  if (spec.has_value() && !spec->extraction_points.empty()) {
    probe::ProbingOptions probing = std::move(options.probing);
    probing.model_name = options.model_name;
    probing.stop_token_ids = model->engine_->eos_token_ids();
    probing.model_fingerprint = engine::ModelFingerprint(*model->engine_);
    // Creating the session runs the Python probes' argument checks (they take the GIL).
    UC_ASSIGN_OR_RETURN(
        model->session_,
        probe::ProbingSession::Create(*spec, model->registry_, model->engine_->config(), probing));
    PyModel* self = model.get();
    model->session_->SetResultCallback([self](probe::RequestProbeResults r) {
      {
        std::lock_guard<std::mutex> lock(self->results_mu_);
        const std::string id = r.request_id;
        self->results_[id] = std::move(r);
      }
      self->results_cv_.notify_all();
    });
    UC_RETURN_IF_ERROR(model->session_->AttachTo(*model->engine_));
  }
  return model;
}

PyModel::~PyModel() {
  if (Py_IsInitialized() && PyGILState_Check()) {
    nb::gil_scoped_release release;
    Close();
  } else {
    Close();
  }
}

const models::ModelConfig& PyModel::config() const { return engine_->config(); }

void PyModel::Close() {
  std::lock_guard<std::mutex> lock(generate_mu_);
  if (closed_) return;
  closed_ = true;
  if (session_ != nullptr) {
    session_->Shutdown(/*wait=*/true);
    engine_->SetObserver(nullptr);
    session_.reset();
  }
  engine_.reset();
}

struct PyModel::Slot {
  std::string id;
  Status status;
  engine::RequestOutput output;
  bool done = false;
};

std::vector<PyModel::Slot> PyModel::Run(const std::vector<PyRequest>& requests, bool wait_results) {
  std::vector<Slot> slots(requests.size());
  if (closed_) throw std::runtime_error("the model is closed");
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < requests.size(); ++i) {
    const PyRequest& r = requests[i];
    slots[i].id = id_prefix_ + std::to_string(next_id_++);
    slots[i].status = engine_->AddRequest(slots[i].id, r.prompt, r.params, r.steering);
    slots[i].done = !slots[i].status.ok();
    if (slots[i].status.ok()) index[slots[i].id] = i;
  }
  PyObject* interrupt_type = nullptr;
  PyObject* interrupt_value = nullptr;
  PyObject* interrupt_tb = nullptr;
  {
    nb::gil_scoped_release release;
    while (engine_->HasUnfinished()) {
      for (engine::RequestOutput& out : engine_->Step()) {
        if (!out.finished) continue;
        auto it = index.find(out.request_id);
        if (it == index.end()) continue;
        slots[it->second].output = std::move(out);
        slots[it->second].done = true;
      }
      if (interrupt_type != nullptr) continue;
      nb::gil_scoped_acquire gil;
      if (PyErr_CheckSignals() != 0) {
        // Ctrl-C: the batch ends here; its requests finish as aborted and the model stays usable.
        PyErr_Fetch(&interrupt_type, &interrupt_value, &interrupt_tb);
        for (const Slot& s : slots) {
          if (!s.done) engine_->Abort(s.id, engine::AbortInfo("client", "KeyboardInterrupt"));
        }
      }
    }
    if (wait_results && session_ != nullptr) {
      // Async points deliver a request's results once its queues drained.
      std::unique_lock<std::mutex> results_lock(results_mu_);
      results_cv_.wait(results_lock, [&] {
        for (const Slot& s : slots) {
          if (s.status.ok() && results_.count(s.id) == 0) return false;
        }
        return true;
      });
    }
  }
  if (interrupt_type != nullptr) {
    std::lock_guard<std::mutex> results_lock(results_mu_);
    for (const Slot& s : slots) results_.erase(s.id);
    PyErr_Restore(interrupt_type, interrupt_value, interrupt_tb);
    throw nb::python_error();
  }
  return slots;
}

nb::dict PyModel::OutputDict(const Slot& s, const PyRequest& request) {
  nb::dict d;
  d["request_id"] = s.id;
  if (const auto* text = std::get_if<std::string>(&request.prompt.value)) {
    d["prompt"] = *text;
  } else {
    d["prompt"] = nb::none();
  }
  if (!s.status.ok()) {
    d["error"] = s.status.message();
    return d;
  }
  const engine::RequestOutput& o = s.output;
  d["text"] = o.text;
  d["token_ids"] = Ids(o.output_ids);
  d["prompt_ids"] = Ids(o.prompt_ids);
  d["finish_reason"] = std::string(engine::FinishReasonName(o.finish_reason));
  d["stop_reason"] = o.stop_reason;
  d["abort"] = AbortToPython(o.abort);
  nb::dict usage;
  usage["prompt_tokens"] = o.prompt_ids.size();
  usage["completion_tokens"] = o.output_ids.size();
  usage["cached_tokens"] = o.num_cached_tokens;
  d["usage"] = usage;
  nb::dict metrics;
  metrics["time_to_first_token"] = o.metrics.time_to_first_token();
  metrics["seconds"] = o.metrics.finish_seconds - o.metrics.arrival_seconds;
  metrics["num_preemptions"] = o.metrics.num_preemptions;
  d["metrics"] = metrics;
  return d;
}

nb::list PyModel::Generate(std::vector<PyRequest> requests) {
  std::unique_lock<std::mutex> lock(generate_mu_, std::defer_lock);
  {
    nb::gil_scoped_release release;
    lock.lock();
  }
  const std::vector<Slot> slots = Run(requests, /*wait_results=*/true);
  nb::list out;
  for (size_t i = 0; i < slots.size(); ++i) {
    const Slot& s = slots[i];
    nb::dict d = OutputDict(s, requests[i]);
    if (s.status.ok()) {
      nlohmann::json results = nlohmann::json::array();
      if (session_ != nullptr) {
        std::lock_guard<std::mutex> results_lock(results_mu_);
        auto it = results_.find(s.id);
        if (it != results_.end()) {
          for (const probe::ProbeResult& r : it->second.results) results.push_back(r.ToJson());
          results_.erase(it);
        }
      }
      d["probe_results"] = results.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    out.append(d);
  }
  return out;
}

namespace {

// A numpy array that owns `values`.
template <typename T>
nb::ndarray<nb::numpy, T> ToArray(std::vector<T> values, std::initializer_list<size_t> shape) {
  auto* owned = new std::vector<T>(std::move(values));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(owned->data(), shape, owner);
}

}  // namespace

nb::dict PyModel::Capture(std::vector<PyRequest> requests, const std::string& spec_text,
                          const std::string& spec_path, const PySaeOptions& sae_options) {
  std::unique_lock<std::mutex> lock(generate_mu_, std::defer_lock);
  {
    nb::gil_scoped_release release;
    lock.lock();
  }
  if (closed_) throw std::runtime_error("the model is closed");
  auto check = [](const Status& s) {
    if (!s.ok()) throw StatusException(s);
  };
  StatusOr<probe::Spec> spec = !spec_path.empty() ? probe::ParseSpecFile(spec_path)
                                                  : probe::ParseSpecText(spec_text, "spec");
  check(spec.status());
  check(probe::CheckCapturable(*spec));
  if (!spec->steering.empty()) {
    throw StatusException(InvalidArgumentError(
        "capture spec: steering entries apply from the model's spec only (LLM(spec=...)); steer "
        "a capture with SamplingParams(steering_vectors=...)"));
  }
  std::shared_ptr<const probe::SaeEncoder> sae;
  if (!sae_options.dir.empty()) {
    std::vector<int64_t> features = sae_options.features;
    StatusOr<std::shared_ptr<const probe::SaeEncoder>> loaded =
        probe::SaeEncoder::Load(sae_options.dir, features);
    if (loaded.ok() && features.empty()) {  // every feature
      for (int64_t f = 0; f < (*loaded)->d_sae(); ++f) features.push_back(f);
      loaded = probe::SaeEncoder::Load(sae_options.dir, std::move(features));
    }
    if (!loaded.ok()) {
      throw StatusException(
          InvalidArgumentError("sae " + sae_options.dir + ": " + loaded.status().message()));
    }
    if ((*loaded)->d_in() != static_cast<int64_t>(config().hidden_size)) {
      throw StatusException(InvalidArgumentError(
          "sae " + sae_options.dir + ": the SAE reads " + std::to_string((*loaded)->d_in()) +
          " values (d_in); the model's hidden size is " + std::to_string(config().hidden_size)));
    }
    sae = *loaded;
  }
  probe::CaptureCollector collector(*spec);
  probe::ProbeRegistry registry;
  check(collector.RegisterProbes(registry));
  probe::ProbingOptions probing;
  probing.stop_token_ids = engine_->eos_token_ids();
  StatusOr<std::unique_ptr<probe::ProbingSession>> capture = probe::ProbingSession::Create(
      probe::CaptureSpec(*spec), registry, engine_->config(), probing);
  check(capture.status());
  // One values matrix: every point's rows must be as wide (router_logits / expert_weights have
  // num_experts values, the others hidden_size).
  size_t width = sae != nullptr ? sae->features().size() : config().hidden_size;
  for (size_t i = 0; i < spec->extraction_points.size(); ++i) {
    const probe::ExtractionPoint& p = spec->extraction_points[i];
    const auto w = static_cast<size_t>(probe::PointWidth(p, config()));
    const probe::ExtractionPoint& first = spec->extraction_points.front();
    if (sae != nullptr ? w != static_cast<size_t>(config().hidden_size) : (i > 0 && w != width)) {
      throw StatusException(InvalidArgumentError(
          "capture spec: extraction point '" + p.name + "' has rows of " + std::to_string(w) +
          " values, but " +
          (sae != nullptr ? std::string("the SAE reads hidden_size rows")
                          : "'" + first.name + "' has " + std::to_string(width)) +
          "; capture router_logits / expert_weights (num_experts values) in a separate call"));
    }
    if (sae == nullptr) width = w;
  }
  // The capture session stands in for the model's own for this batch only.
  engine_->SetObserver(capture->get());
  std::vector<Slot> slots;
  try {
    slots = Run(requests, /*wait_results=*/false);
  } catch (...) {
    engine_->SetObserver(session_.get());
    (*capture)->Shutdown(/*wait=*/false);
    throw;
  }
  engine_->SetObserver(session_.get());
  (*capture)->Shutdown(/*wait=*/true);

  std::map<std::string, int64_t> point_index;
  nb::list points;
  for (const probe::ExtractionPoint& p : spec->extraction_points) {
    point_index.emplace(p.name, static_cast<int64_t>(point_index.size()));
    points.append(p.name);
  }
  std::vector<float> values;
  std::vector<int64_t> prompt_index, point_col, layer, token_pos, generated_index, token_id;
  std::vector<bool> is_generated;
  nb::list token_text;
  nb::list outputs;
  for (size_t i = 0; i < slots.size(); ++i) {
    const Slot& s = slots[i];
    outputs.append(OutputDict(s, requests[i]));
    if (!s.status.ok()) continue;
    const engine::RequestOutput& o = s.output;
    const auto prompt_len = static_cast<int64_t>(o.prompt_ids.size());
    for (probe::ActivationRecord& r : collector.Take(s.id)) {
      prompt_index.push_back(static_cast<int64_t>(i));
      point_col.push_back(point_index.at(r.point));
      layer.push_back(r.layer);
      token_pos.push_back(r.token_pos);
      is_generated.push_back(r.is_generated);
      generated_index.push_back(r.is_generated ? r.token_pos - prompt_len : -1);
      int32_t id = -1;
      if (r.token_pos < prompt_len) {
        id = o.prompt_ids[static_cast<size_t>(r.token_pos)];
      } else if (r.token_pos - prompt_len < static_cast<int64_t>(o.output_ids.size())) {
        id = o.output_ids[static_cast<size_t>(r.token_pos - prompt_len)];
      }
      token_id.push_back(id);
      const std::string piece = id >= 0 ? engine_->tokenizer().TokenToPiece(id) : std::string();
      token_text.append(nb::steal(
          PyUnicode_DecodeUTF8(piece.data(), static_cast<Py_ssize_t>(piece.size()), "replace")));
      if (sae != nullptr) {
        for (double f : sae->Encode(r.values)) values.push_back(static_cast<float>(f));
      } else {
        values.insert(values.end(), r.values.begin(), r.values.end());
      }
    }
  }
  const size_t rows = prompt_index.size();
  std::vector<uint8_t> generated_flags(is_generated.begin(), is_generated.end());
  nb::dict d;
  d["points"] = points;
  d["outputs"] = outputs;
  d["values"] = ToArray(std::move(values), {rows, width});
  d["prompt_index"] = ToArray(std::move(prompt_index), {rows});
  d["point_index"] = ToArray(std::move(point_col), {rows});
  d["layer"] = ToArray(std::move(layer), {rows});
  d["token_pos"] = ToArray(std::move(token_pos), {rows});
  d["generated_index"] = ToArray(std::move(generated_index), {rows});
  d["token_id"] = ToArray(std::move(token_id), {rows});
  d["is_generated"] = ToArray(std::move(generated_flags), {rows});
  d["token_text"] = token_text;
  return d;
}

nb::dict PyModel::Calibrate(const std::string& prompts_file, const worker::SamplingParams& defaults,
                            const std::string& spec_text, const std::string& spec_path,
                            double target_fpr, bool measure, const std::string& prompts_name) {
  std::unique_lock<std::mutex> lock(generate_mu_, std::defer_lock);
  {
    nb::gil_scoped_release release;
    lock.lock();
  }
  if (closed_) throw std::runtime_error("the model is closed");
  auto check = [](const Status& s) {
    if (!s.ok()) throw StatusException(s);
  };
  if (!measure && !(target_fpr > 0.0 && target_fpr < 1.0)) {
    check(InvalidArgumentError("target_fpr: expected a share in (0, 1), got " +
                               std::to_string(target_fpr)));
  }
  StatusOr<probe::Spec> spec = !spec_path.empty() ? probe::ParseSpecFile(spec_path)
                                                  : probe::ParseSpecText(spec_text, "spec");
  check(spec.status());
  StatusOr<engine::PromptSet> prompts = engine::ReadPromptSet(prompts_file, defaults);
  check(prompts.status());
  if (prompts->requests.empty()) check(InvalidArgumentError(prompts_file + ": no prompts"));
  probe::ProbingOptions probing;
  probing.model_name = model_name_;
  probing.stop_token_ids = engine_->eos_token_ids();
  probing.model_fingerprint = engine::ModelFingerprint(*engine_);
  StatusOr<std::unique_ptr<probe::ProbingSession>> session = probe::ProbingSession::Create(
      measure ? *spec : probe::WithoutThresholds(*spec), registry_, engine_->config(), probing);
  check(session.status());
  std::mutex mu;
  std::map<std::string, std::vector<probe::ProbeResult>> results;
  (*session)->SetResultCallback([&](probe::RequestProbeResults r) {
    std::lock_guard<std::mutex> guard(mu);
    results[r.request_id] = std::move(r.results);
  });
  std::vector<PyRequest> requests;
  for (engine::GenerateRequest& r : prompts->requests) {
    requests.push_back({std::move(r.prompt), r.params, std::move(r.steering)});
  }
  // The calibration session stands in for the model's own for this batch only.
  engine_->SetObserver(session->get());
  std::vector<Slot> slots;
  try {
    slots = Run(requests, /*wait_results=*/false);
  } catch (...) {
    engine_->SetObserver(session_.get());
    (*session)->Shutdown(/*wait=*/false);
    throw;
  }
  engine_->SetObserver(session_.get());
  {
    nb::gil_scoped_release release;  // async Python probes finish with the GIL
    (*session)->Shutdown(/*wait=*/true);
  }
  std::vector<std::vector<probe::ProbeResult>> per_request;
  for (size_t i = 0; i < slots.size(); ++i) {
    check(slots[i].status.Annotate("prompt " + std::to_string(i + 1) + " of " + prompts_file));
    auto it = results.find(slots[i].id);
    if (it == results.end()) {
      check(InternalError("no probe results for prompt " + std::to_string(i + 1)));
    }
    per_request.push_back(std::move(it->second));
  }
  const nlohmann::json model = engine::ModelFingerprint(*engine_);
  const auto n = static_cast<int64_t>(per_request.size());
  nlohmann::json points = nlohmann::json::array();
  std::vector<probe::PointCalibration> fitted;
  for (size_t p = 0; p < spec->extraction_points.size(); ++p) {
    if (measure) {
      int64_t flagged = 0;
      for (const auto& r : per_request) flagged += probe::Flagged(r[p]);
      const probe::Interval ci = probe::Wilson95(flagged, n);
      points.push_back({{"point", spec->extraction_points[p].name},
                        {"requests", n},
                        {"flagged", flagged},
                        {"rate", static_cast<double>(flagged) / static_cast<double>(n)},
                        {"rate_95", {ci.low, ci.high}}});
      continue;
    }
    std::vector<std::optional<double>> peaks;
    for (const auto& r : per_request) peaks.push_back(probe::PeakStatistic(r[p]));
    StatusOr<probe::PointCalibration> c =
        probe::FitThreshold(spec->extraction_points[p].name, peaks, target_fpr);
    check(c.status());
    points.push_back({{"point", c->point},
                      {"threshold", c->threshold},
                      {"requests", c->requests},
                      {"flagged", c->flagged},
                      {"unscored", c->unscored}});
    fitted.push_back(*c);
  }
  nb::dict d;
  d["points"] = points.dump();
  d["requests"] = n;
  d["model"] = model.dump();
  d["spec_file"] =
      measure ? std::string()
              : probe::CalibratedSpecFile(*spec, fitted, target_fpr, static_cast<size_t>(n),
                                          prompts_name.empty() ? prompts_file : prompts_name,
                                          prompts->hash, model.dump());
  return d;
}

}  // namespace uc::python
