#include "probe/probes/probe_args.h"

#include <algorithm>
#include <cmath>
#include <system_error>
#include <utility>

namespace uc::probe {

using nlohmann::json;

namespace {

// The value as the user wrote it, shortened for messages.
std::string Describe(const json& value) {
  std::string text = value.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

}  // namespace

StatusOr<ProbeArgs> ProbeArgs::ParseOpen(std::string probe_type, const json& args) {
  if (args.is_null()) return ProbeArgs(std::move(probe_type), json::object());
  if (!args.is_object()) {
    return InvalidArgumentError("probe_type '" + probe_type +
                                "': probe_args must be a mapping (got " + Describe(args) + ")");
  }
  return ProbeArgs(std::move(probe_type), args);
}

StatusOr<ProbeArgs> ProbeArgs::Parse(std::string probe_type, const json& args,
                                     std::vector<std::string> known) {
  UC_ASSIGN_OR_RETURN(ProbeArgs parsed, ParseOpen(std::move(probe_type), args));
  std::sort(known.begin(), known.end());
  for (const auto& [key, value] : parsed.args_.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    const std::string valid = known.empty() ? "none" : JoinQuoted(known, ", ");
    return parsed.Error("unknown argument '" + key + "'" + DidYouMean(key, known) +
                        "; valid arguments: " + valid);
  }
  return parsed;
}

const json* ProbeArgs::Find(std::string_view key) const {
  const auto it = args_.find(key);
  if (it == args_.end() || it->is_null()) return nullptr;
  return &*it;
}

bool ProbeArgs::Has(std::string_view key) const { return Find(key) != nullptr; }

StatusOr<std::optional<double>> ProbeArgs::OptionalNumber(std::string_view key) const {
  const json* value = Find(key);
  if (value == nullptr) return std::optional<double>();
  if (!value->is_number()) {
    return Error(key, "expected a number (got " + Describe(*value) + ")");
  }
  const double number = value->get<double>();
  if (!std::isfinite(number)) {
    return Error(key, "expected a finite number (got " +
                          std::string(std::isnan(number) ? "NaN"
                                      : number > 0       ? "inf"
                                                         : "-inf") +
                          ")");
  }
  return std::optional<double>(number);
}

StatusOr<double> ProbeArgs::Number(std::string_view key) const {
  UC_ASSIGN_OR_RETURN(std::optional<double> value, OptionalNumber(key));
  if (!value) return Error(key, "required (a number)");
  return *value;
}

StatusOr<bool> ProbeArgs::Bool(std::string_view key, bool fallback) const {
  const json* value = Find(key);
  if (value == nullptr) return fallback;
  if (!value->is_boolean())
    return Error(key, "expected true or false (got " + Describe(*value) + ")");
  return value->get<bool>();
}

StatusOr<std::string> ProbeArgs::String(std::string_view key, std::string fallback) const {
  const json* value = Find(key);
  if (value == nullptr) return fallback;
  if (!value->is_string()) return Error(key, "expected a string (got " + Describe(*value) + ")");
  return value->get<std::string>();
}

StatusOr<std::string> ProbeArgs::Choice(std::string_view key,
                                        const std::vector<std::string>& allowed,
                                        std::string fallback) const {
  UC_ASSIGN_OR_RETURN(std::string value, String(key, std::move(fallback)));
  if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) return value;
  return Error(key, "'" + value + "' is not one of " + JoinQuoted(allowed, ", ") +
                        DidYouMean(value, allowed));
}

StatusOr<ProbeAction> ProbeArgs::Action(ProbeAction fallback) const {
  UC_ASSIGN_OR_RETURN(std::string action,
                      Choice("action", {"abort", "flag", "escalate"}, std::string(Name(fallback))));
  if (action == "escalate") return ProbeAction::kEscalate;
  return action == "abort" ? ProbeAction::kAbort : ProbeAction::kFlag;
}

StatusOr<std::filesystem::path> ProbeArgs::File(std::string_view key, const ProbeEnv& env) const {
  UC_ASSIGN_OR_RETURN(std::string text, String(key, ""));
  if (text.empty()) return Error(key, "required (a file path)");
  std::filesystem::path path(text);
  if (path.is_relative() && !env.base_dir.empty()) path = env.base_dir / path;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return Error(key, "file '" + path.string() + "' does not exist");
  }
  if (!std::filesystem::is_regular_file(path, ec)) {
    return Error(key, "'" + path.string() + "' is not a regular file");
  }
  return path;
}

Status ProbeArgs::Error(std::string_view key, std::string_view message) const {
  return InvalidArgumentError("probe_type '" + probe_type_ + "': argument '" + std::string(key) +
                              "': " + std::string(message));
}

Status ProbeArgs::Error(std::string_view message) const {
  return InvalidArgumentError("probe_type '" + probe_type_ + "': " + std::string(message));
}

}  // namespace uc::probe
