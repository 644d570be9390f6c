// File: spec_steering.h
// -----------------------------------------------------------------------------
// The `steering:` list of a spec (internal to probe/): each entry's fields, reported at the line
// of the key at fault, and the cross-checks against the extraction points (`when.point` names
// an inline point).
#pragma once

#include "probe/spec/spec.h"
#include "probe/spec/spec_report.h"
#include "probe/spec/spec_yaml.h"

namespace uc::probe::internal {

// Parses the value of the top-level `steering` key into spec->steering.
void ParseSteeringList(Reporter* reporter, const MapEntry& e, Spec* spec);
// After every point is parsed: each `when.point` must name an inline extraction point.
void CheckSteeringTriggers(Reporter* reporter, const Spec& spec);

}  // namespace uc::probe::internal
