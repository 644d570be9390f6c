// File: probe_args.h
// -----------------------------------------------------------------------------
// Reading a point's probe_args (a JSON object from the spec) for a probe factory, with errors
// that name the probe type and the argument, and a did-you-mean for unknown keys:
//
//   UC_ASSIGN_OR_RETURN(ProbeArgs a, ProbeArgs::Parse("norm_gate", args, {"threshold", "action"}));
//   UC_ASSIGN_OR_RETURN(double threshold, a.Number("threshold"));
//   // InvalidArgument "probe_type 'norm_gate': argument 'threshold': expected a number (got
//   // \"high\")"
//
// A null value counts as absent. Value type; thread-compatible.
#pragma once

#include <cstddef>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/did_you_mean.h"
#include "base/status.h"
#include "probe/probes/probe.h"

namespace uc::probe {

using uc::ClosestMatches;
using uc::DidYouMean;
using uc::EditDistance;
using uc::JoinQuoted;

class ProbeArgs {
 public:
  // `args` must be an object (or null: no arguments) whose keys are all in `known`;
  // InvalidArgument listing the valid keys otherwise.
  static StatusOr<ProbeArgs> Parse(std::string probe_type, const nlohmann::json& args,
                                   std::vector<std::string> known);
  // Like Parse, but any key is accepted (function probes pass unknown keys on).
  static StatusOr<ProbeArgs> ParseOpen(std::string probe_type, const nlohmann::json& args);

  const std::string& probe_type() const { return probe_type_; }
  const nlohmann::json& raw() const { return args_; }
  // Present and not null.
  bool Has(std::string_view key) const;

  // A finite number (not a bool); InvalidArgument when missing (required forms), NaN or
  // infinite, or of another type.
  StatusOr<double> Number(std::string_view key) const;
  StatusOr<std::optional<double>> OptionalNumber(std::string_view key) const;
  StatusOr<bool> Bool(std::string_view key, bool fallback) const;
  StatusOr<std::string> String(std::string_view key, std::string fallback) const;
  // A string among `allowed` (did-you-mean otherwise), or `fallback` when absent.
  StatusOr<std::string> Choice(std::string_view key, const std::vector<std::string>& allowed,
                               std::string fallback) const;
  // "action": "abort" | "flag" | "escalate" (needs the point's `escalation:` block, checked by
  // the spec); `fallback` when absent.
  StatusOr<ProbeAction> Action(ProbeAction fallback = ProbeAction::kAbort) const;
  // A required path argument, resolved against env.base_dir when relative; InvalidArgument
  // naming the resolved file when it does not exist or is not a regular file.
  StatusOr<std::filesystem::path> File(std::string_view key, const ProbeEnv& env) const;

  // InvalidArgument "probe_type 'T': argument 'KEY': MESSAGE".
  Status Error(std::string_view key, std::string_view message) const;
  // InvalidArgument "probe_type 'T': MESSAGE".
  Status Error(std::string_view message) const;

 private:
  ProbeArgs(std::string probe_type, nlohmann::json args)
      : probe_type_(std::move(probe_type)), args_(std::move(args)) {}
  const nlohmann::json* Find(std::string_view key) const;

  std::string probe_type_;
  nlohmann::json args_;  // an object
};

}  // namespace uc::probe
