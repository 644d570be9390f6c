// File: spec_report.h
// -----------------------------------------------------------------------------
// Problem reporting and typed value reading shared by the spec parser's document and point
// levels (internal to probe/): problems and warnings rendered as "FILE:LINE: WHERE: MESSAGE" and
// sorted by line, and ints read the way Undercurrent v0.1 (pydantic's lax mode) reads them.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "probe/spec/spec_yaml.h"

namespace uc::probe::internal {

// "unknown key 'x'. Did you mean 'y'? Valid keys: a, b, c."
std::string UnknownKeyMessage(const MapEntry& e, const std::vector<std::string_view>& valid);

// Collects problems and warnings of one spec. Thread-compatible.
class Reporter {
 public:
  // `source` names the file in rendered lines (may be empty: "line N: ..." then, v0.1's form).
  explicit Reporter(std::string source) : source_(std::move(source)) {}

  // `line` 1-based, 0 when unknown; `where` e.g. "extraction_points[2] 'drift'.position".
  void Error(int line, std::string where, std::string message) {
    errors_.push_back({line, std::move(where), std::move(message)});
  }
  // `strict`: a warning Undercurrent v0.1 gives too, which `validate --strict` turns into an
  // error (v0.1's deprecated keys `layer` and `tensor`); the others stay warnings.
  void Warn(int line, std::string where, std::string message, bool strict = false) {
    warnings_.push_back({line, std::move(where), std::move(message), strict});
  }
  // One use of a deprecated key in v0.1's words, in the order v0.1 lists them.
  void V01Deprecation(std::string use) { v0_1_deprecations_.push_back(std::move(use)); }
  // "FILE:LINE: WHERE: MESSAGE" each, by line (unknown lines last), else in the order reported.
  std::vector<std::string> RenderedErrors() const { return Rendered(errors_); }
  std::vector<std::string> RenderedWarnings() const { return Rendered(warnings_); }
  std::vector<std::string> RenderedStrictWarnings() const;
  const std::vector<std::string>& v0_1_deprecations() const { return v0_1_deprecations_; }

 private:
  struct Item {
    int line;
    std::string where;
    std::string message;
    bool strict = false;
  };
  std::vector<std::string> Rendered(std::vector<Item> items) const;
  std::string Render(const Item& item) const;

  std::string source_;
  std::vector<Item> errors_;
  std::vector<Item> warnings_;
  std::vector<std::string> v0_1_deprecations_;
};

// An int the way pydantic's lax mode reads one (YAML ints, floats without a fraction, strings
// like " 12 ", "1_000" or "3.0"), except booleans, which we refuse.
struct LaxInt {
  enum class Problem { kNone, kType, kFraction, kBool, kRange };

  explicit LaxInt(const YAML::Node& node);
  // "expected EXPECTED (got X)", with why X is not an int. REQUIRES: problem is kType, kFraction
  // or kBool.
  std::string Message(std::string_view expected) const;

  std::optional<int64_t> value;  // set when problem == kNone
  Problem problem = Problem::kNone;
  std::string got;  // the value as messages show it
};

// "NAME must be <= 2147483647 (got X)" / "NAME must be >= MIN (got X)" for an int outside
// [min, INT_MAX] (kRange included), or "" when it is inside (or not an int at all).
std::string BoundsMessage(const LaxInt& v, std::string_view name, int64_t min);

}  // namespace uc::probe::internal
