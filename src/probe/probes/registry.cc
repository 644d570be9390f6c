#include "probe/probes/registry.h"

#include <dlfcn.h>

#include <utility>

#include "probe/probes/builtin_probes.h"
#include "probe/probes/probe_args.h"
#include "probe/probes/score_probe.h"

namespace uc::probe {

using nlohmann::json;

namespace {

// --- Plugins ----------------------------------------------------------------------------------
// Everything a plugin registers (its factory, the ProbeTypes the factory builds, the Probes
// those spawn) runs code from the plugin's library. Each of them holds a reference to the
// library's handle, declared before the plugin object so that it is released after it: the
// library is closed only when the registry and the last object built from it are gone.

using PluginHandle = std::shared_ptr<void>;
using RegisterProbesFn = void (*)(ProbeRegistry*);
constexpr char kPluginEntryPoint[] = "undercurrent_register_probes";

// The plugin whose entry point runs on this thread, if any: Register() ties what it registers
// to the handle and collects failures for LoadPlugin to report.
struct PluginLoad {
  PluginHandle handle;
  std::vector<std::string> errors;
};
thread_local PluginLoad* loading_plugin = nullptr;

class PluginProbe : public Probe {
 public:
  PluginProbe(PluginHandle handle, std::unique_ptr<Probe> inner)
      : handle_(std::move(handle)), inner_(std::move(inner)) {}
  void OnStart(const RequestContext& ctx) override { inner_->OnStart(ctx); }
  std::optional<ProbeSignal> OnActivation(const ActivationRecord& record) override {
    return inner_->OnActivation(record);
  }
  ProbeResult OnEnd(const RequestContext& ctx) override { return inner_->OnEnd(ctx); }

 private:
  PluginHandle handle_;  // released after inner_
  std::unique_ptr<Probe> inner_;
};

class PluginProbeType : public ProbeType {
 public:
  PluginProbeType(PluginHandle handle, std::unique_ptr<ProbeType> inner)
      : handle_(std::move(handle)), inner_(std::move(inner)) {}
  ProbeKind kind() const override { return inner_->kind(); }
  std::unique_ptr<Probe> Spawn() const override {
    std::unique_ptr<Probe> probe = inner_->Spawn();
    if (probe == nullptr) return nullptr;
    return std::make_unique<PluginProbe>(handle_, std::move(probe));
  }

 private:
  PluginHandle handle_;  // released after inner_
  std::unique_ptr<ProbeType> inner_;
};

// A plugin's factory (a struct, not a lambda, so that the member order fixes the release order).
struct PluginFactory {
  PluginHandle handle;  // released after inner
  ProbeFactory inner;

  StatusOr<std::unique_ptr<ProbeType>> operator()(const json& args, const ProbeEnv& env) const {
    UC_ASSIGN_OR_RETURN(std::unique_ptr<ProbeType> type, inner(args, env));
    if (type == nullptr) return type;
    return std::unique_ptr<ProbeType>(std::make_unique<PluginProbeType>(handle, std::move(type)));
  }
};

// --- Function probes --------------------------------------------------------------------------

class FunctionScorer : public Scorer {
 public:
  FunctionScorer(ScoreFunction fn, json args) : fn_(std::move(fn)), args_(std::move(args)) {}
  std::optional<double> Score(const ActivationRecord& record) const override {
    return fn_(record, args_);
  }

 private:
  ScoreFunction fn_;
  json args_;  // the point's probe_args without threshold and action
};

ProbeFactory FunctionProbeFactory(std::string name, ScoreFunction fn,
                                  std::optional<double> threshold, ProbeAction action) {
  return [name = std::move(name), fn = std::move(fn), threshold, action](
             const json& raw, const ProbeEnv&) -> StatusOr<std::unique_ptr<ProbeType>> {
    UC_ASSIGN_OR_RETURN(ProbeArgs args, ProbeArgs::ParseOpen(name, raw));
    ScoreProbeOptions options;
    options.probe_name = name;
    UC_ASSIGN_OR_RETURN(std::optional<double> point_threshold, args.OptionalNumber("threshold"));
    options.threshold = point_threshold ? point_threshold : threshold;
    UC_ASSIGN_OR_RETURN(options.action, args.Action(action));
    json rest = args.raw();
    rest.erase("threshold");
    rest.erase("action");
    return MakeScoreProbeType(std::make_shared<FunctionScorer>(fn, std::move(rest)),
                              std::move(options));
  };
}

template <typename Map>
std::vector<std::string> NamesOf(const Map& entries) {
  std::vector<std::string> names;
  for (const auto& [name, entry] : entries) names.push_back(name);
  return names;
}

Status UnknownProbeTypeError(const std::string& name, const std::vector<std::string>& known) {
  std::string list;
  for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
  return NotFoundError("unknown probe_type '" + name + "'" + DidYouMean(name, known) +
                       "; registered probe types: " + (list.empty() ? "none" : list));
}

}  // namespace

ProbeRegistry::ProbeRegistry() { RegisterBuiltinProbes(*this); }

ProbeRegistry& ProbeRegistry::Global() {
  // Never destroyed: probes spawned from it may be alive in other static objects at exit, and
  // plugins stay loaded until the process ends.
  static ProbeRegistry& registry = *new ProbeRegistry();
  return registry;
}

Status ProbeRegistry::Register(const std::string& name, ProbeKind kind, ProbeFactory factory,
                               bool override) {
  Status status;
  if (name.empty()) {
    status = InvalidArgumentError("a probe_type name must not be empty");
  } else if (!factory) {
    status = InvalidArgumentError("probe_type '" + name + "': the factory is empty");
  } else {
    if (loading_plugin != nullptr) {
      factory = PluginFactory{loading_plugin->handle, std::move(factory)};
    }
    Entry replaced;  // destroyed after the lock is released (it may close a plugin)
    std::lock_guard<std::mutex> lock(mu_);
    Entry& slot = entries_[name];
    if (!override && slot.factory) {
      status = FailedPreconditionError("probe_type '" + name +
                                       "' is already registered (register with override to "
                                       "replace it, or pick another name)");
    } else {
      replaced = std::exchange(slot, Entry{kind, std::move(factory)});
    }
  }
  if (!status.ok() && loading_plugin != nullptr) loading_plugin->errors.push_back(status.message());
  return status;
}

Status ProbeRegistry::RegisterFunction(const std::string& name, ScoreFunction fn,
                                       std::optional<double> threshold, ProbeAction action,
                                       bool override) {
  if (!fn) return InvalidArgumentError("probe_type '" + name + "': the score function is empty");
  if (action == ProbeAction::kContinue) {
    return InvalidArgumentError("probe_type '" + name + "': the action must be abort or flag");
  }
  return Register(name, ProbeKind::kSingleShot,
                  FunctionProbeFactory(name, std::move(fn), threshold, action), override);
}

Status ProbeRegistry::LoadPlugin(const std::filesystem::path& library) {
  const std::string where = "probe plugin '" + library.string() + "'";
  dlerror();
  void* raw = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (raw == nullptr) {
    const char* error = dlerror();
    return FailedPreconditionError("cannot load " + where + ": " + (error ? error : "unknown"));
  }
  // The deleter drops this dlopen reference; a library loaded twice stays open until both go.
  PluginHandle handle(raw, [](void* h) { dlclose(h); });
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const PluginHandle& loaded : plugins_) {
      if (loaded.get() == raw) return OkStatus();  // already loaded into this registry
    }
  }
  dlerror();
  void* symbol = dlsym(raw, kPluginEntryPoint);
  if (symbol == nullptr) {
    const char* error = dlerror();
    return FailedPreconditionError(where + " does not export " + kPluginEntryPoint + ": " +
                                   (error ? error : "null symbol"));
  }
  PluginLoad load{handle, {}};
  PluginLoad* const outer = std::exchange(loading_plugin, &load);
  reinterpret_cast<RegisterProbesFn>(symbol)(this);
  loading_plugin = outer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    plugins_.push_back(std::move(handle));
  }
  if (load.errors.empty()) return OkStatus();
  std::string message = where + " failed to register:";
  for (const std::string& error : load.errors) message += "\n  - " + error;
  return FailedPreconditionError(message);
}

bool ProbeRegistry::Unregister(const std::string& name) {
  ProbeFactory doomed;  // destroyed after the lock is released
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = entries_.find(name);
  if (it == entries_.end()) return false;
  doomed = std::move(it->second.factory);
  entries_.erase(it);
  return true;
}

StatusOr<ProbeKind> ProbeRegistry::KindOf(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = entries_.find(name);
  if (it != entries_.end()) return it->second.kind;
  return UnknownProbeTypeError(name, NamesOf(entries_));
}

StatusOr<std::unique_ptr<ProbeType>> ProbeRegistry::Create(const ExtractionPoint& point,
                                                           const ProbeEnv& env) const {
  const std::string where = "extraction point '" + point.name + "'";
  Entry entry;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = entries_.find(point.probe_type);
    if (it == entries_.end()) {
      return UnknownProbeTypeError(point.probe_type, NamesOf(entries_)).Annotate(where);
    }
    entry = it->second;
  }
  if (entry.kind != point.probe_kind) {
    return InvalidArgumentError(where + ": probe_type '" + point.probe_type + "' is " +
                                std::string(Name(entry.kind)) + " but the point says " +
                                std::string(Name(point.probe_kind)));
  }
  ProbeEnv point_env = env;
  if (point_env.point == nullptr) point_env.point = &point;
  StatusOr<std::unique_ptr<ProbeType>> type = entry.factory(point.probe_args, point_env);
  if (!type.ok()) return type.status().Annotate(where);
  if (*type == nullptr || (*type)->kind() != entry.kind) {
    return InternalError(where + ": the factory of probe_type '" + point.probe_type +
                         "' returned " +
                         (*type == nullptr ? "nothing" : "a probe of another kind"));
  }
  return type;
}

std::vector<std::string> ProbeRegistry::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  return NamesOf(entries_);
}

}  // namespace uc::probe
