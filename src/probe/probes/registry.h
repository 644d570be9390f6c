// File: registry.h
// -----------------------------------------------------------------------------
// ProbeRegistry: probe_type name -> factory. A factory turns a point's probe_args into a
// ProbeType (checking them and loading weights once); the router spawns one Probe per
// (request, point) from it.
//
// Sources: the built-ins (linear, mlp, norm_gate, cosine, ema, running_mean — see
// builtin_probes.h), explicit registrations (C++ API; `override` replaces a built-in), and
// plugins: shared libraries loaded with LoadPlugin, which must export
//   extern "C" void undercurrent_register_probes(uc::probe::ProbeRegistry* registry);
// and register their probes from it. A plugin links no copy of uc_probe: its references to
// uc::probe symbols resolve against the host executable, which must export them (CMake
// ENABLE_EXPORTS, i.e. -rdynamic). Function-style probes (a callable + threshold/action)
// register through RegisterFunction.
//
// Plugin lifetime: a plugin is dlopen'ed RTLD_NOW | RTLD_LOCAL, and everything built from its
// code (the factories its entry point registers, on the loading thread; the ProbeTypes they
// create; the Probes those spawn) holds a reference to the library handle, so the library is
// closed (dlclose) only when the registry that loaded it and the last such object are all
// destroyed: a ProbeType or Probe may safely outlive the registry. Global() is never
// destroyed, so its plugins stay loaded until exit.
//
// Thread-safe: every method may be called from any thread. Factories run outside the lock and
// may themselves use the registry.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "probe/probes/probe.h"

namespace uc::probe {

// Builds a ProbeType from a point's probe_args. InvalidArgument naming the argument (and the
// file, for weights) when they are wrong.
using ProbeFactory = std::function<StatusOr<std::unique_ptr<ProbeType>>(const nlohmann::json& args,
                                                                        const ProbeEnv& env)>;

// A function probe's scoring function: a score (compared with the threshold), or nullopt for
// "no opinion on this record".
using ScoreFunction = std::function<std::optional<double>(const ActivationRecord& record,
                                                          const nlohmann::json& args)>;

class ProbeRegistry {
 public:
  // A registry with the built-in probes.
  ProbeRegistry();
  // The process-wide registry (built-ins plus whatever was registered or loaded into it);
  // created on first use, never destroyed.
  static ProbeRegistry& Global();

  // FailedPrecondition when `name` is taken, unless `override`; InvalidArgument for an empty
  // name or factory.
  Status Register(const std::string& name, ProbeKind kind, ProbeFactory factory,
                  bool override = false);
  // A single_shot probe from a function: each record's score s emits `action` ("abort" or
  // "flag") when threshold is set and s >= threshold, else continue (confidence = s,
  // metadata {"score": s, "probe": name}); every emitted signal is kept in signal_history; a
  // nullopt score emits nothing and is not counted. Verdict {"flagged", "max_score" (null
  // before any score), "n"}. probe_args may override "threshold" (a number) and "action"
  // ("abort" | "flag"); the other keys reach the function as its `args`, unchecked.
  // InvalidArgument for an empty function or action kContinue.
  Status RegisterFunction(const std::string& name, ScoreFunction fn,
                          std::optional<double> threshold, ProbeAction action = ProbeAction::kAbort,
                          bool override = false);
  // Loads a plugin library and lets it register its probes (see the file comment for lifetime).
  // FailedPrecondition naming the file and dlerror() when it cannot be loaded or lacks the
  // entry point, or listing the registrations the plugin attempted that failed (the others
  // stay). Loading the same library again into one registry is a no-op.
  Status LoadPlugin(const std::filesystem::path& library);
  // False when `name` was not registered.
  bool Unregister(const std::string& name);

  // NotFound "unknown probe_type 'X' (did you mean 'Y'?); registered probe types: A, B, ...".
  StatusOr<ProbeKind> KindOf(const std::string& name) const;
  // Builds the ProbeType of `point` from its probe_args (env.point defaults to &point). Errors
  // start with "extraction point 'NAME': ": NotFound for an unknown probe_type,
  // InvalidArgument when point.probe_kind differs from the registration ("probe_type 'linear'
  // is single_shot but the point says trajectory") or the factory rejects the arguments.
  StatusOr<std::unique_ptr<ProbeType>> Create(const ExtractionPoint& point,
                                              const ProbeEnv& env) const;
  // Registered names, sorted.
  std::vector<std::string> List() const;

 private:
  struct Entry {
    ProbeKind kind = ProbeKind::kSingleShot;
    ProbeFactory factory;  // a plugin's factory holds its library handle
  };
  mutable std::mutex mu_;
  // dlopen handles of the loaded plugins; declared before entries_ so that they are released
  // after every factory (a factory registered outside the plugin's entry point holds none).
  std::vector<std::shared_ptr<void>> plugins_;
  std::map<std::string, Entry> entries_;
};

}  // namespace uc::probe
