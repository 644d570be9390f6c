// File: validate_command.h
// -----------------------------------------------------------------------------
// `undercurrent validate SPEC... [--strict] [--check-probes [--probe-plugin LIB]...]
// [--format text|json]`: checks probe-spec files for
// CI. Exit 0 when every file is valid, 1 when any is not, 2 on a usage error. Output as
// Undercurrent v0.1's: text
//   probes.yaml: OK (2 extraction points)
//     warning: probes.yaml:4: extraction_points[0] 'p'.layer: 'layer' is deprecated; ...
//   bad.yaml: ERROR 2 issues
//     - bad.yaml:7: extraction_points[1] 'q'.stride: 'stride' must be >= 1 (got 0); ...
// or JSON, an array of {path, valid, extraction_points, errors, warnings}.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "probe/spec.h"

namespace uc::cli {

// A further check of a spec that parsed (e.g. that every probe_type names a registered probe):
// one message per problem, none when it passes.
using SpecCheck = std::function<std::vector<std::string>(const probe::Spec& spec)>;

struct ValidateOptions {
  std::vector<std::string> specs;
  bool strict = false;          // deprecation (and other) warnings count as errors
  std::string format = "text";  // "text" or "json"
  SpecCheck extra_check;        // when set, run on every spec that parsed
};

// The verdict on one file. Never fails: an unreadable file is an invalid one.
struct SpecFileResult {
  std::string path;
  bool valid = false;
  std::optional<int> extraction_points;  // set when the spec parsed
  std::vector<std::string> errors;
  std::vector<std::string> warnings;

  nlohmann::json ToJson() const;
  // The text form above, each line ending in '\n'.
  std::string ToText() const;
};

SpecFileResult ValidateSpecFile(const std::string& path, bool strict,
                                const SpecCheck& extra_check = nullptr);

// Validates every file, prints the results to stdout; returns the exit code.
int RunValidate(const ValidateOptions& options);

// Registers the subcommand on `app`.
void AddValidateCommand(CLI::App& app);

}  // namespace uc::cli
