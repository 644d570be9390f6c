#include "apps/cli/commands/validate_command.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>

#include "apps/cli/exit_codes.h"
#include "probe/probes/registry.h"

namespace uc::cli {
namespace {

std::string Plural(size_t n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

// --check-probes: every probe_type is registered (built-ins, plugins) with the point's kind.
std::vector<std::string> CheckProbes(const probe::Spec& spec, probe::MessageStyle style) {
  std::vector<std::string> problems;
  const probe::ProbeRegistry& registry = probe::ProbeRegistry::Global();
  for (size_t i = 0; i < spec.extraction_points.size(); ++i) {
    const probe::ExtractionPoint& p = spec.extraction_points[i];
    std::string where;
    if (style == probe::MessageStyle::kV0_1) {
      if (p.line > 0) where = "line " + std::to_string(p.line) + ": ";
    } else {
      where = spec.source.string();
      if (p.line > 0) where += ":" + std::to_string(p.line);
      where += ": ";
    }
    where += "extraction_points[" + std::to_string(i) + "] '" + p.name + "'.probe_type: ";
    StatusOr<probe::ProbeKind> kind = registry.KindOf(p.probe_type);
    if (!kind.ok()) {
      problems.push_back(where + kind.status().message());
    } else if (*kind != p.probe_kind) {
      problems.push_back(where + "probe_type '" + p.probe_type + "' is " +
                         std::string(probe::Name(*kind)) + " but the point says " +
                         std::string(probe::Name(p.probe_kind)));
    }
  }
  return problems;
}

// Always: the numeric arguments built-in probe types read (threshold, bias, alpha, window) are
// finite: generate and serve refuse a NaN or infinite one when they build the probe, so
// validate must not call it OK. Other keys are left to the probe (v0.1 checks none).
std::vector<std::string> CheckBuiltinArgs(const probe::Spec& spec, probe::MessageStyle style) {
  static const std::vector<std::string> builtins = probe::ProbeRegistry().List();
  static const std::vector<std::string> numeric = {"threshold", "bias", "alpha", "window"};
  std::vector<std::string> problems;
  for (size_t i = 0; i < spec.extraction_points.size(); ++i) {
    const probe::ExtractionPoint& p = spec.extraction_points[i];
    if (!p.probe_args.is_object() ||
        std::find(builtins.begin(), builtins.end(), p.probe_type) == builtins.end()) {
      continue;
    }
    for (const auto& [key, value] : p.probe_args.items()) {
      if (std::find(numeric.begin(), numeric.end(), key) == numeric.end() ||
          !value.is_number_float() || std::isfinite(value.get<double>())) {
        continue;
      }
      const double v = value.get<double>();
      std::string where;
      if (style == probe::MessageStyle::kV0_1) {
        if (p.line > 0) where = "line " + std::to_string(p.line) + ": ";
      } else {
        where = spec.source.string();
        if (p.line > 0) where += ":" + std::to_string(p.line);
        where += ": ";
      }
      problems.push_back(where + "extraction_points[" + std::to_string(i) + "] '" + p.name +
                         "'.probe_args." + key + ": expected a finite number (got " +
                         (std::isnan(v) ? "NaN"
                          : v > 0       ? "inf"
                                        : "-inf") +
                         ")");
    }
  }
  return problems;
}

}  // namespace

nlohmann::json SpecFileResult::ToJson() const {
  return {{"path", path},
          {"valid", valid},
          {"extraction_points",
           extraction_points.has_value() ? nlohmann::json(*extraction_points) : nullptr},
          {"errors", errors},
          {"warnings", warnings}};
}

std::string SpecFileResult::ToText() const {
  std::string out;
  if (valid) {
    out = path + ": OK (" + Plural(extraction_points.value_or(0), "extraction point") + ")\n";
  } else {
    out = path + ": ERROR " + Plural(errors.size(), "issue") + "\n";
    for (const std::string& e : errors) out += "  - " + e + "\n";
  }
  for (const std::string& w : warnings) out += "  warning: " + w + "\n";
  return out;
}

SpecFileResult ValidateSpecFile(const std::string& path, bool strict, const SpecCheck& extra_check,
                                probe::MessageStyle style) {
  SpecFileResult result;
  result.path = path;
  probe::SpecReport report = probe::CheckSpecFile(path, style);
  if (!report.spec.has_value()) {
    result.errors = std::move(report.problems);
    return result;
  }
  const probe::Spec& spec = *report.spec;
  result.extraction_points = static_cast<int>(spec.extraction_points.size());
  if (style == probe::MessageStyle::kV0_1) {
    // v0.1's one DeprecationWarning per file; it gives no other warnings.
    if (!spec.v0_1_deprecations.empty()) {
      std::string joined;
      for (const std::string& use : spec.v0_1_deprecations) {
        joined += (joined.empty() ? "" : "; ") + use;
      }
      (strict ? result.errors : result.warnings).push_back("deprecated spec keys: " + joined);
    }
  } else {
    for (const std::string& w : spec.warnings) {
      const bool fails =
          strict && std::find(spec.strict_warnings.begin(), spec.strict_warnings.end(), w) !=
                        spec.strict_warnings.end();
      (fails ? result.errors : result.warnings).push_back(w);
    }
  }
  for (std::string& problem : CheckBuiltinArgs(spec, style)) {
    result.errors.push_back(std::move(problem));
  }
  if (extra_check) {
    for (std::string& problem : extra_check(spec)) result.errors.push_back(std::move(problem));
  }
  result.valid = result.errors.empty();
  return result;
}

int RunValidate(const ValidateOptions& options) {
  std::vector<SpecFileResult> results;
  bool all_valid = true;
  for (const std::string& path : options.specs) {
    results.push_back(ValidateSpecFile(path, options.strict, options.extra_check, options.style));
    all_valid = all_valid && results.back().valid;
  }
  if (options.format == "json") {
    nlohmann::json out = nlohmann::json::array();
    for (const SpecFileResult& r : results) out.push_back(r.ToJson());
    std::cout << out.dump(2) << "\n";
  } else {
    for (const SpecFileResult& r : results) std::cout << r.ToText();
  }
  std::cout.flush();
  return all_valid ? kExitOk : kExitFailure;
}

void AddValidateCommand(CLI::App& app) {
  auto options = std::make_shared<ValidateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "validate",
      "Check probe-spec files (exit 0 if all are valid, 1 if any is not, 2 on a usage error)");
  cmd->add_option("specs", options->specs, "Spec file(s) to check")->type_name("SPEC")->required();
  cmd->add_flag("--strict", options->strict,
                "Treat the warnings Undercurrent v0.1 gives (the deprecated keys 'layer' and "
                "'tensor') as errors; the others ('every_n', duplicate keys) stay warnings");
  cmd->add_option("--format", options->format, "Output format")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  auto style = std::make_shared<std::string>("ours");
  cmd->add_option("--message-style", *style,
                  "ours: problems as FILE:LINE: ...; v0.1: Undercurrent v0.1's exact forms "
                  "(line N: ..., one 'deprecated spec keys' warning, no others), for scripts "
                  "that parse them")
      ->check(CLI::IsMember({"ours", "v0.1"}))
      ->capture_default_str();
  auto check_probes = std::make_shared<bool>(false);
  auto plugins = std::make_shared<std::vector<std::string>>();
  cmd->add_flag("--check-probes", *check_probes,
                "Also check that every probe_type is registered (built-ins and --probe-plugin "
                "libraries) with the point's probe_kind");
  CLI::Option* plugin_option =
      cmd->add_option("--probe-plugin", *plugins,
                      "Shared library registering probe types, for --check-probes (repeatable)")
          ->check(CLI::ExistingFile);
  cmd->callback([options, check_probes, plugins, plugin_option, style] {
    options->style = *style == "v0.1" ? probe::MessageStyle::kV0_1 : probe::MessageStyle::kOurs;
    if (plugin_option->count() > 0 && !*check_probes) {
      throw CLI::ValidationError("--probe-plugin", "needs --check-probes");
    }
    for (const std::string& plugin : *plugins) {
      const Status status = probe::ProbeRegistry::Global().LoadPlugin(plugin);
      if (!status.ok()) {
        std::cerr << "error: " << status.message() << "\n";
        throw CLI::RuntimeError(kExitFailure);
      }
    }
    if (*check_probes) {
      const probe::MessageStyle s = options->style;
      options->extra_check = [s](const probe::Spec& spec) { return CheckProbes(spec, s); };
    }
    throw CLI::RuntimeError(RunValidate(*options));
  });
}

}  // namespace uc::cli
