// File: py_probe_type.h
// -----------------------------------------------------------------------------
// Probe types implemented in Python (a `Probe` subclass or an `@probe` function), registered
// into a ProbeRegistry at run time by name. The Python side is one bridge object per registered
// name (python/undercurrent/_bridge.py, ProbeBridge), which has these methods:
//   check(point_name, args_json) -> None | str    the problem when probe_args do not fit
//   spawn(request_id, point_name, args_json) -> instance
//   start(instance, request_id, prompt_metadata_json, point_name)
//   activate(instances, metadata, tensors) -> [None | (action, confidence, metadata_json,
//                                               timestamp) | ("__error__", message)]
//       one call per batch; `metadata[i]` is record i's (request_id, point, layer, token_pos,
//       is_generated, generated_index, tensor_type, timestamp) and `tensors` a float32 numpy
//       array [n, hidden] (row i is record i's activation)
//   end(instance, request_id, prompt_metadata_json, point_name) -> (verdict_json,
//       signal_history_json, metadata_json)
// A PythonProbeType is batched (probes/probe.h): an inline point makes one `activate` call per
// engine step with every request's records; other points call it with one record. Every call
// takes the GIL; the engine thread does not hold it between calls.
#pragma once

#include <nanobind/nanobind.h>

#include <string>

#include "base/status.h"
#include "probe/probes/registry.h"

namespace uc::python {

// Registers `name` (kind `kind`) in `registry`: its probes are checked, spawned and called
// through `bridge`.
// REQUIRES: the GIL is held. FailedPrecondition when the name is taken (override: replaced).
Status RegisterPythonProbe(probe::ProbeRegistry& registry, const std::string& name,
                           probe::ProbeKind kind, nanobind::object bridge, bool override);

}  // namespace uc::python
