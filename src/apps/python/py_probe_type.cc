#include "apps/python/py_probe_type.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace nb = nanobind;

namespace uc::python {
namespace {

using probe::ActivationRecord;
using probe::ProbeSignal;

// A Python object that may be released on a thread without the GIL (an engine or async worker
// thread, or a destructor at any time): takes the GIL to drop its reference, and leaks it once
// the interpreter is gone.
class PyRef {
 public:
  explicit PyRef(nb::object o) : o_(std::move(o)) {}
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
  ~PyRef() {
    if (!Py_IsInitialized()) {
      o_.release();
      return;
    }
    nb::gil_scoped_acquire gil;
    o_.reset();
  }
  const nb::object& get() const { return o_; }

 private:
  nb::object o_;
};

class PythonProbe : public probe::Probe {
 public:
  PythonProbe(std::shared_ptr<PyRef> bridge, std::string args_json)
      : bridge_(std::move(bridge)), args_json_(std::move(args_json)) {}
  ~PythonProbe() override {
    if (instance_ == nullptr) return;
    instance_.reset();  // PyRef takes the GIL
  }

  void OnStart(const probe::RequestContext& ctx) override {
    nb::gil_scoped_acquire gil;
    try {
      nb::object instance =
          bridge_->get().attr("spawn")(ctx.request_id, PointName(ctx), args_json_);
      instance_ = std::make_unique<PyRef>(std::move(instance));
      bridge_->get().attr("start")(instance_->get(), ctx.request_id, ctx.prompt_metadata.dump(),
                                   PointName(ctx));
    } catch (nb::python_error& e) {
      throw std::runtime_error(e.what());
    }
  }

  std::optional<ProbeSignal> OnActivation(const ActivationRecord& record) override;

  probe::ProbeResult OnEnd(const probe::RequestContext& ctx) override {
    nb::gil_scoped_acquire gil;
    probe::ProbeResult result;
    if (instance_ == nullptr) {
      result.metadata = {{"error", "the probe was never started (its spawn or on_start failed)"}};
      return result;
    }
    try {
      nb::tuple out = nb::cast<nb::tuple>(bridge_->get().attr("end")(
          instance_->get(), ctx.request_id, ctx.prompt_metadata.dump(), PointName(ctx)));
      result.verdict = nlohmann::json::parse(nb::cast<std::string>(out[0]));
      for (const nlohmann::json& s : nlohmann::json::parse(nb::cast<std::string>(out[1]))) {
        ProbeSignal signal;
        signal.action = ActionOf(s.value("action", std::string("continue")));
        if (s.contains("confidence") && s["confidence"].is_number()) {
          signal.confidence = s["confidence"].get<double>();
        }
        signal.metadata = s.value("metadata", nlohmann::json::object());
        signal.timestamp = s.value("timestamp", 0.0);
        result.signal_history.push_back(std::move(signal));
      }
      result.metadata = nlohmann::json::parse(nb::cast<std::string>(out[2]));
    } catch (nb::python_error& e) {
      throw std::runtime_error(e.what());
    }
    return result;
  }

  PyRef* instance() const { return instance_.get(); }

  static probe::ProbeAction ActionOf(const std::string& action) {
    if (action == "abort") return probe::ProbeAction::kAbort;
    if (action == "flag") return probe::ProbeAction::kFlag;
    if (action == "escalate") return probe::ProbeAction::kEscalate;
    return probe::ProbeAction::kContinue;
  }

 private:
  static std::string PointName(const probe::RequestContext& ctx) {
    return ctx.point != nullptr ? ctx.point->name : std::string();
  }

  std::shared_ptr<PyRef> bridge_;
  std::string args_json_;
  std::unique_ptr<PyRef> instance_;
};

// Calls the bridge's `activate` with a batch; the GIL must be held. One outcome per record.
std::vector<probe::BatchedSignal> Activate(const nb::object& bridge,
                                           std::span<probe::Probe* const> probes,
                                           std::span<const ActivationRecord> records) {
  const size_t n = records.size();
  const size_t hidden = n > 0 ? records[0].values.size() : 0;
  std::vector<probe::BatchedSignal> out(n);
  nb::list instances;
  nb::list metadata;
  for (size_t i = 0; i < n; ++i) {
    const auto* p = static_cast<const PythonProbe*>(probes[i]);
    if (p->instance() == nullptr) {
      out[i].error = "the probe was never started (its spawn or on_start failed)";
      instances.append(nb::none());
    } else {
      instances.append(p->instance()->get());
    }
    const ActivationRecord& r = records[i];
    if (r.values.size() != hidden) throw std::runtime_error("records of one batch differ in size");
    metadata.append(nb::make_tuple(r.request_id, r.point, r.layer, r.token_pos, r.is_generated,
                                   r.generated_index, std::string(probe::Name(r.tensor_type)),
                                   r.timestamp));
  }
  // One copy into an array Python owns; each record's tensor is a row view of it.
  auto* block = new float[std::max<size_t>(1, n * hidden)];
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(block + i * hidden, records[i].values.data(), hidden * sizeof(float));
  }
  nb::capsule owner(block, [](void* p) noexcept { delete[] static_cast<float*>(p); });
  nb::ndarray<nb::numpy, float, nb::ndim<2>> tensors(block, {n, hidden}, owner);
  nb::list signals = nb::cast<nb::list>(bridge.attr("activate")(instances, metadata, tensors));
  if (signals.size() != n) {
    throw std::runtime_error("the probe bridge returned " + std::to_string(signals.size()) +
                             " signals for " + std::to_string(n) + " records");
  }
  for (size_t i = 0; i < n; ++i) {
    nb::handle s = signals[i];
    if (!out[i].error.empty() || s.is_none()) continue;
    nb::tuple t = nb::cast<nb::tuple>(s);
    const std::string action = nb::cast<std::string>(t[0]);
    if (action == "__error__") {
      out[i].error = nb::cast<std::string>(t[1]);
      continue;
    }
    ProbeSignal signal;
    signal.action = PythonProbe::ActionOf(action);
    if (!t[1].is_none()) signal.confidence = nb::cast<double>(t[1]);
    signal.metadata = nlohmann::json::parse(nb::cast<std::string>(t[2]));
    signal.timestamp = nb::cast<double>(t[3]);
    out[i].signal = std::move(signal);
  }
  return out;
}

std::optional<ProbeSignal> PythonProbe::OnActivation(const ActivationRecord& record) {
  nb::gil_scoped_acquire gil;
  probe::Probe* self = this;
  std::vector<probe::BatchedSignal> out;
  try {
    out = Activate(bridge_->get(), std::span<probe::Probe* const>(&self, 1),
                   std::span<const ActivationRecord>(&record, 1));
  } catch (nb::python_error& e) {
    throw std::runtime_error(e.what());
  }
  if (!out[0].error.empty()) throw std::runtime_error(out[0].error);
  return std::move(out[0].signal);
}

class PythonProbeType : public probe::ProbeType {
 public:
  PythonProbeType(probe::ProbeKind kind, std::shared_ptr<PyRef> bridge, std::string args_json)
      : kind_(kind), bridge_(std::move(bridge)), args_json_(std::move(args_json)) {}
  probe::ProbeKind kind() const override { return kind_; }
  std::unique_ptr<probe::Probe> Spawn() const override {
    return std::make_unique<PythonProbe>(bridge_, args_json_);
  }
  bool batched() const override { return true; }
  std::vector<probe::BatchedSignal> OnActivationBatch(
      std::span<probe::Probe* const> probes,
      std::span<const ActivationRecord> records) const override {
    nb::gil_scoped_acquire gil;
    try {
      return Activate(bridge_->get(), probes, records);
    } catch (nb::python_error& e) {
      throw std::runtime_error(e.what());
    }
  }

 private:
  probe::ProbeKind kind_;
  std::shared_ptr<PyRef> bridge_;
  std::string args_json_;
};

}  // namespace

Status RegisterPythonProbe(probe::ProbeRegistry& registry, const std::string& name,
                           probe::ProbeKind kind, nb::object bridge, bool override) {
  auto shared = std::make_shared<PyRef>(std::move(bridge));
  probe::ProbeFactory factory =
      [kind, shared](const nlohmann::json& args,
                     const probe::ProbeEnv& env) -> StatusOr<std::unique_ptr<probe::ProbeType>> {
    const std::string args_json = args.is_null() ? "{}" : args.dump();
    {
      nb::gil_scoped_acquire gil;
      try {
        nb::object problem = shared->get().attr("check")(
            env.point != nullptr ? env.point->name : std::string(), args_json);
        if (!problem.is_none()) return InvalidArgumentError(nb::cast<std::string>(problem));
      } catch (nb::python_error& e) {
        return InvalidArgumentError(e.what());
      }
    }
    return std::unique_ptr<probe::ProbeType>(new PythonProbeType(kind, shared, args_json));
  };
  return registry.Register(name, kind, std::move(factory), override);
}

}  // namespace uc::python
