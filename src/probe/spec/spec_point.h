// File: spec_point.h
// -----------------------------------------------------------------------------
// One extraction point of a spec (internal to probe/): every field of v0.1's §2.2 and our two
// extensions, their cross-field rules, the deprecated spellings, each problem reported at the
// line of the key at fault.
#pragma once

#include <yaml-cpp/yaml.h>

#include <optional>
#include <string>

#include "probe/spec/spec.h"
#include "probe/spec/spec_report.h"

namespace uc::probe::internal {

struct ParsedPoint {
  std::optional<ExtractionPoint> point;  // null when the point has any problem
  std::optional<std::string> name;       // when `name` is a non-empty string (even if invalid)
  int name_line = 0;
};

// Parses extraction_points[index] (`node`, its list item), reporting every problem and warning
// to `reporter`. Names unique across points are the caller's business.
ParsedPoint ParsePoint(Reporter* reporter, const YAML::Node& node, int index);

}  // namespace uc::probe::internal
