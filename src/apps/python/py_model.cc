#include "apps/python/py_model.h"

#include <nanobind/stl/string.h>

#include <chrono>
#include <random>
#include <utility>

#include "apps/python/py_probe_type.h"
#include "engine/generator.h"
#include "engine/model_fingerprint.h"
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

}  // namespace

StatusOr<std::unique_ptr<PyModel>> PyModel::Open(PyModelOptions options) {
  std::unique_ptr<PyModel> model(new PyModel());
  model->id_prefix_ = RandomPrefix();
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
    UC_ASSIGN_OR_RETURN(model->engine_, engine::LLMEngine::Open(options.engine));
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

nb::list PyModel::Generate(const std::vector<std::string>& prompts,
                           const worker::SamplingParams& params) {
  struct Slot {
    std::string id;
    Status status;
    engine::RequestOutput output;
    bool done = false;
  };
  std::vector<Slot> slots(prompts.size());
  std::unique_lock<std::mutex> lock(generate_mu_, std::defer_lock);
  {
    nb::gil_scoped_release release;
    lock.lock();
  }
  if (closed_) throw std::runtime_error("the model is closed");
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < prompts.size(); ++i) {
    slots[i].id = id_prefix_ + std::to_string(next_id_++);
    slots[i].status = engine_->AddRequest(slots[i].id, engine::Prompt::Text(prompts[i]), params);
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
    if (session_ != nullptr) {
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
  nb::list out;
  for (size_t i = 0; i < slots.size(); ++i) {
    Slot& s = slots[i];
    nb::dict d;
    d["request_id"] = s.id;
    d["prompt"] = prompts[i];
    if (!s.status.ok()) {
      d["error"] = s.status.message();
      out.append(d);
      continue;
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
    d["usage"] = usage;
    nb::dict metrics;
    metrics["time_to_first_token"] = o.metrics.time_to_first_token();
    metrics["seconds"] = o.metrics.finish_seconds - o.metrics.arrival_seconds;
    metrics["num_preemptions"] = o.metrics.num_preemptions;
    d["metrics"] = metrics;
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
    out.append(d);
  }
  return out;
}

}  // namespace uc::python
