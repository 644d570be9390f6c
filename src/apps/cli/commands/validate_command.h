// File: validate_command.h
// -----------------------------------------------------------------------------
// `undercurrent validate SPEC... [--strict] [--check-probes [--probe-plugin LIB]...]
// [--format text|json] [--message-style ours|v0.1]`: checks probe-spec files for CI. Exit 0
// when every file is valid, 1 when any is not, 2 on a usage error. Output shaped as
// Undercurrent v0.1's: text
//   probes.yaml: OK (2 extraction points)
//     warning: probes.yaml:4: extraction_points[0] 'p'.layer: 'layer' is deprecated; ...
//   bad.yaml: ERROR 2 issues
//     - bad.yaml:7: extraction_points[1] 'q'.stride: 'stride' must be >= 1 (got 0); ...
// or JSON, an array of {path, valid, extraction_points, errors, warnings}.
//
// --strict fails only on what v0.1 itself warns about (the deprecated keys `layer`, `tensor`);
// our other warnings (`every_n`, duplicate keys) stay warnings.
//
// --message-style v0.1 prints v0.1's exact forms, for scripts that parse them: problems as
// "line 7: WHERE: MESSAGE" (no file name), and the deprecations as v0.1's one warning
//     warning: deprecated spec keys: extraction point 'p' uses 'layer', rename it to 'layers'; ...
// (an error under --strict); the warnings v0.1 does not give are left out. For a spec v0.1
// accepts, the output is then v0.1's byte for byte.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "probe/spec/spec.h"

namespace uc::cli {

// A further check of a spec that parsed (e.g. that every probe_type names a registered probe):
// one message per problem, none when it passes.
using SpecCheck = std::function<std::vector<std::string>(const probe::Spec& spec)>;

struct ValidateOptions {
  std::vector<std::string> specs;
  bool strict = false;          // the warnings v0.1 gives too count as errors
  std::string format = "text";  // "text" or "json"
  probe::MessageStyle style = probe::MessageStyle::kOurs;
  SpecCheck extra_check;  // when set, run on every spec that parsed
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
                                const SpecCheck& extra_check = nullptr,
                                probe::MessageStyle style = probe::MessageStyle::kOurs);

// Validates every file, prints the results to stdout; returns the exit code.
int RunValidate(const ValidateOptions& options);

// Registers the subcommand on `app`.
void AddValidateCommand(CLI::App& app);

}  // namespace uc::cli
