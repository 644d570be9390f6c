// Extraction-point validation follows Undercurrent v0.1's pydantic model field by field; where
// v0.1 stops at the first failing rule of a point (a model validator raises), this keeps going
// and reports each one, at the line of the key at fault.
#include "probe/spec/spec_point.h"

#include <algorithm>
#include <climits>
#include <map>

#include "models/forward_hooks.h"
#include "probe/spec/spec_util.h"
#include "probe/spec/spec_yaml.h"

namespace uc::probe::internal {
namespace {

const std::vector<std::string_view>& PointKeys() {
  static const std::vector<std::string_view> keys = {
      "name",       "layers",         "tensor_type", "tensor_types",    "combine",
      "position",   "stride",         "until",       "count",           "probe_type",
      "probe_kind", "execution_mode", "queue_depth", "overflow_policy", "intervention",
      "probe_args", "escalation"};
  return keys;
}
const std::vector<std::string_view>& EscalationKeys() {
  static const std::vector<std::string_view> keys = {"url", "timeout_ms", "on_timeout"};
  return keys;
}
const std::vector<std::string_view>& InterventionKeys() {
  static const std::vector<std::string_view> keys = {"mode", "timeout_ms", "on_timeout"};
  return keys;
}

struct Alias {
  std::string_view old_key;
  std::string_view new_key;
};
constexpr Alias kAliases[] = {
    {"layer", "layers"}, {"tensor", "tensor_type"}, {"every_n", "stride"}};

bool IsAliasKey(std::string_view key) {
  return std::any_of(std::begin(kAliases), std::end(kAliases),
                     [&](const Alias& a) { return a.old_key == key; });
}

bool Contains(const std::vector<std::string_view>& list, std::string_view value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

// One extraction point: its mapping, its index and (for messages) its name.
class PointParser {
 public:
  PointParser(Reporter* reporter, const YAML::Node& node, int index)
      : r_(reporter), node_(node), index_(index), line_(LineOf(node)) {}

  // Null when the point has a problem (all of them reported).
  std::optional<ExtractionPoint> Parse();
  // The point's name when it is a non-empty string (messages name the point by it).
  const std::optional<std::string>& name() const { return name_; }
  int name_line() const { return name_line_; }

 private:
  std::string Where(std::string_view field = "") const {
    std::string out = "extraction_points[" + std::to_string(index_) + "]";
    if (name_.has_value()) out += " " + PyQuote(*name_);
    if (!field.empty()) out += "." + std::string(field);
    return out;
  }
  // One warning per repeated key of a mapping at `field` ("" for the point itself).
  void WarnDuplicates(const std::vector<DuplicateKey>& duplicates, std::string_view field) {
    for (const DuplicateKey& d : duplicates) {
      r_->Warn(d.line, Where(field),
               "duplicate key " + PyQuote(d.key) + " (first on line " +
                   std::to_string(d.first_line) + "); the last value is used");
    }
  }
  void Error(int line, std::string_view field, std::string message) {
    r_->Error(line, Where(field), std::move(message));
    ok_ = false;
  }
  const MapEntry* Find(std::string_view key) const {
    const auto it = entries_.find(std::string(key));
    return it == entries_.end() ? nullptr : &it->second;
  }
  const MapEntry* FindField(std::string_view key);
  const MapEntry* Required(std::string_view key, std::string_view hint = "");
  static int KeyLine(const MapEntry& e) { return LineOf(e.key_node); }

  enum class Need { kRequired, kOptional, kOptionalOrNull };
  // Parses the field `key` (or its deprecated spelling) into *out with `parse` when present and,
  // for kOptionalOrNull, not null; records whether it parsed.
  template <typename T, typename ParseFn>
  void ParseField(std::string_view key, Need need, T* out, ParseFn parse,
                  std::string_view missing_hint = "");
  // `parse` for an enum field.
  template <typename E>
  auto Enum(std::string_view enum_field) {
    return [this, enum_field](const MapEntry& e) {
      return ParseEnum<E>(e.value, KeyLine(e), e.key, enum_field);
    };
  }

  void ReadEntries();
  void CheckKeys();
  void ParseCaptureFields(ExtractionPoint* p);
  bool ParseHookTensorType(ExtractionPoint* p);
  void ParseProbeFields(ExtractionPoint* p);
  std::optional<std::string> ParseString(const MapEntry& e);
  std::optional<std::vector<int>> ParseLayers(const MapEntry& e);
  std::optional<int> ParseLayer(const YAML::Node& node, std::string_view field, bool in_list);
  std::optional<PositionSelector> ParsePosition(const MapEntry& e);
  std::optional<int> ParseBoundedInt(const YAML::Node& value, int line, std::string_view field,
                                     std::string_view hint);
  template <typename E>
  std::optional<E> ParseEnum(const YAML::Node& value, int line, std::string_view field,
                             std::string_view enum_field);
  std::optional<nlohmann::json> ParseProbeArgs(const MapEntry& e);
  std::optional<InterventionPolicy> ParseIntervention(const MapEntry& e);
  std::optional<InterventionPolicy> CheckIntervention(const MapEntry& e, InterventionPolicy policy,
                                                      std::optional<int64_t> timeout);
  std::optional<EscalationConfig> ParseEscalation(const MapEntry& e);
  bool Good(const char* key) const;  // absent (so defaulted) or parsed without problems
  bool Present(const char* key) const { return line_of_.count(key) > 0; }
  void CheckModeRules(const ExtractionPoint& p);
  void CheckWindowRules(const ExtractionPoint& p);
  void CheckCombineRules(const ExtractionPoint& p);
  std::optional<std::vector<TensorType>> ParseTensorTypes(const MapEntry& e);

  Reporter* r_;
  YAML::Node node_;
  int index_;
  int line_;
  bool ok_ = true;
  std::optional<std::string> name_;
  int name_line_ = 0;
  std::map<std::string, MapEntry> entries_;
  std::map<std::string, std::string> written_;  // canonical key -> key as written
  std::map<std::string, bool> field_ok_;        // canonical key -> parsed without problems
  std::map<std::string, int> line_of_;          // canonical key -> line of its key
  int intervention_mode_line_ = 0;
  int escalation_line_ = 0;
  int timeout_line_ = 0;
  int on_timeout_line_ = 0;
};

template <typename T, typename ParseFn>
void PointParser::ParseField(std::string_view key, Need need, T* out, ParseFn parse,
                             std::string_view missing_hint) {
  const MapEntry* e = need == Need::kRequired ? Required(key, missing_hint) : FindField(key);
  if (e == nullptr || (need == Need::kOptionalOrNull && e->value.IsNull())) return;
  auto value = parse(*e);
  if (!value.has_value()) {
    field_ok_[std::string(key)] = false;
    return;
  }
  *out = std::move(*value);
}

const MapEntry* PointParser::FindField(std::string_view key) {
  const MapEntry* current = Find(key);
  for (const Alias& alias : kAliases) {
    if (alias.new_key != key) continue;
    const MapEntry* old = Find(alias.old_key);
    if (old == nullptr) break;
    if (current != nullptr) {
      Error(KeyLine(*old), alias.old_key,
            "both " + PyQuote(alias.old_key) + " (deprecated) and " + PyQuote(key) +
                " are set; use only " + PyQuote(key));
      field_ok_[std::string(key)] = false;
      break;
    }
    // v0.1 warns about `layer` and `tensor` only; it takes `every_n` as a plain alias.
    const bool v0_1_warns = alias.old_key != "every_n";
    r_->Warn(KeyLine(*old), Where(alias.old_key),
             PyQuote(alias.old_key) + " is deprecated; rename it to " + PyQuote(key), v0_1_warns);
    if (v0_1_warns) {
      r_->V01Deprecation("extraction point '" + name_.value_or("<unnamed>") + "' uses '" +
                         std::string(alias.old_key) + "', rename it to '" + std::string(key) + "'");
    }
    current = old;
  }
  if (current != nullptr) {
    written_[std::string(key)] = current->key;
    line_of_[std::string(key)] = KeyLine(*current);
    field_ok_.emplace(std::string(key), true);
  }
  return current;
}

const MapEntry* PointParser::Required(std::string_view key, std::string_view hint) {
  const MapEntry* e = FindField(key);
  if (e == nullptr) {
    Error(line_, "", "missing required key " + PyQuote(key) + "." + std::string(hint));
    field_ok_[std::string(key)] = false;
  }
  return e;
}

void PointParser::CheckKeys() {
  for (const auto& [key, e] : entries_) {
    if (!Contains(PointKeys(), key) && !IsAliasKey(key)) {
      Error(KeyLine(e), "", UnknownKeyMessage(e, PointKeys()));
    }
  }
}

std::optional<std::string> PointParser::ParseString(const MapEntry& e) {
  const bool is_string = e.value.IsScalar() && ResolveScalar(e.value).kind == ScalarKind::kString;
  if (!is_string) {
    Error(KeyLine(e), e.key, "expected a string (got " + Describe(e.value) + ")");
    return std::nullopt;
  }
  const std::string text = e.value.Scalar();
  if (text.find_first_not_of(" \t\n\r\v\f") == std::string::npos) {
    Error(KeyLine(e), e.key,
          PyQuote(e.key) + " must be a non-empty string (got " + PyQuote(text) + ")");
    return std::nullopt;
  }
  return text;
}

std::optional<int> PointParser::ParseLayer(const YAML::Node& node, std::string_view field,
                                           bool in_list) {
  const LaxInt v(node);
  const int line = LineOf(node);
  if (v.problem != LaxInt::Problem::kNone && v.problem != LaxInt::Problem::kRange) {
    Error(line, field, v.Message(in_list ? "an int" : "an int or a list of ints"));
    return std::nullopt;
  }
  if (std::string bounds = BoundsMessage(v, "'layers' entries", 0); !bounds.empty()) {
    if (v.value.has_value() && *v.value < 0) {
      bounds += ". Count layers from 0; final_norm is addressed as layer num_hidden_layers";
    }
    Error(line, field, bounds);
    return std::nullopt;
  }
  return static_cast<int>(*v.value);
}

std::optional<std::vector<int>> PointParser::ParseLayers(const MapEntry& e) {
  const std::string field = e.key;
  if (!e.value.IsSequence()) {
    const std::optional<int> layer = ParseLayer(e.value, field, false);
    if (!layer.has_value()) return std::nullopt;
    return std::vector<int>{*layer};
  }
  if (e.value.size() == 0) {
    Error(KeyLine(e), field,
          "'layers' list must not be empty. List at least one layer index, e.g. layers: [6]");
    return std::nullopt;
  }
  std::vector<int> layers;
  bool ok = true;
  for (size_t i = 0; i < e.value.size(); ++i) {
    const std::optional<int> layer =
        ParseLayer(e.value[i], field + "[" + std::to_string(i) + "]", true);
    ok = ok && layer.has_value();
    if (layer.has_value()) layers.push_back(*layer);
  }
  if (!ok) return std::nullopt;
  return layers;
}

std::optional<PositionSelector> PointParser::ParsePosition(const MapEntry& e) {
  const int line = KeyLine(e);
  if (e.value.IsScalar() && ResolveScalar(e.value).kind == ScalarKind::kString) {
    StatusOr<PositionSelector> parsed = PositionSelector::Parse(e.value.Scalar());
    if (!parsed.ok()) {
      Error(line, e.key, parsed.status().message());
      return std::nullopt;
    }
    return *parsed;
  }
  const LaxInt index(e.value);
  if (index.problem == LaxInt::Problem::kRange) {
    Error(line, e.key, "invalid position " + index.got + ": the index is out of range");
    return std::nullopt;
  }
  if (!index.value.has_value()) {
    Error(line, e.key, index.Message("an int or a string"));
    return std::nullopt;
  }
  return PositionSelector::Absolute(*index.value);
}

std::optional<int> PointParser::ParseBoundedInt(const YAML::Node& value, int line,
                                                std::string_view field, std::string_view hint) {
  const LaxInt v(value);
  if (v.problem != LaxInt::Problem::kNone && v.problem != LaxInt::Problem::kRange) {
    Error(line, field, v.Message("an int"));
    return std::nullopt;
  }
  const std::string name = PyQuote(field.substr(field.rfind('.') + 1));
  if (const std::string bounds = BoundsMessage(v, name, 1); !bounds.empty()) {
    Error(line, field, bounds + (v.value.has_value() && *v.value < 1 ? std::string(hint) : ""));
    return std::nullopt;
  }
  return static_cast<int>(*v.value);
}

template <typename E>
std::optional<E> PointParser::ParseEnum(const YAML::Node& value, int line, std::string_view field,
                                        std::string_view enum_field) {
  const std::vector<std::string_view> names = EnumNameList<E>();
  const bool is_string = value.IsScalar() && ResolveScalar(value).kind == ScalarKind::kString;
  if (is_string) {
    if (const std::optional<E> v = EnumFromName<E>(value.Scalar())) return v;
  }
  Error(line, field,
        Describe(value) + " is not a valid " + std::string(enum_field) + "." +
            (is_string ? DidYouMean(value.Scalar(), names) : "") + " Use " + OneOf(names) + ".");
  return std::nullopt;
}

std::optional<nlohmann::json> PointParser::ParseProbeArgs(const MapEntry& e) {
  if (!e.value.IsMap()) {
    Error(KeyLine(e), e.key,
          "expected a mapping of keys to values, got " + Describe(e.value) + ".");
    return std::nullopt;
  }
  bool ok = true;
  for (const MapEntry& arg : MappingEntries(e.value, nullptr)) {
    if (arg.key_node.IsScalar() && ResolveScalar(arg.key_node).kind == ScalarKind::kString) {
      continue;
    }
    const bool is_bool =
        arg.key_node.IsScalar() && ResolveScalar(arg.key_node).kind == ScalarKind::kBool;
    Error(KeyLine(arg), e.key,
          "keys must be strings (got " + Describe(arg.key_node) +
              (is_bool ? "; YAML reads unquoted yes/no/true/false/on/off as booleans, quote it"
                       : "") +
              ")");
    ok = false;
  }
  if (!ok) return std::nullopt;
  constexpr size_t kMaxValues = 1'000'000;
  size_t budget = kMaxValues;
  nlohmann::json args = ToJson(e.value, &budget);
  if (budget == 0) {
    Error(KeyLine(e), e.key,
          "too large: more than " + std::to_string(kMaxValues) +
              " values once YAML aliases are expanded");
    return std::nullopt;
  }
  return args;
}

std::optional<InterventionPolicy> PointParser::ParseIntervention(const MapEntry& e) {
  const std::string field = e.key;
  if (!e.value.IsMap()) {
    Error(
        KeyLine(e), field,
        "expected a mapping with mode, timeout_ms and on_timeout (got " + Describe(e.value) + ")");
    return std::nullopt;
  }
  InterventionPolicy policy;
  std::optional<int64_t> timeout;
  const bool was_ok = ok_;
  ok_ = true;
  std::vector<DuplicateKey> duplicates;
  for (const MapEntry& key : MappingEntries(e.value, &duplicates)) {
    const int line = KeyLine(key);
    const std::string where = field + "." + key.key;
    if (key.key == "mode") {
      intervention_mode_line_ = line;
      policy.mode =
          ParseEnum<InterventionMode>(key.value, line, where, "mode").value_or(policy.mode);
    } else if (key.key == "on_timeout") {
      on_timeout_line_ = line;
      policy.on_timeout =
          ParseEnum<OnTimeout>(key.value, line, where, "on_timeout").value_or(policy.on_timeout);
    } else if (key.key == "timeout_ms") {
      timeout_line_ = line;
      if (key.value.IsNull()) continue;
      const LaxInt v(key.value);
      if (v.problem == LaxInt::Problem::kRange) {
        Error(line, where, BoundsMessage(v, "timeout_ms", 1));
      } else if (!v.value.has_value()) {
        Error(line, where, v.Message("an int"));
      }
      timeout = v.value;
    } else {
      Error(line, field, UnknownKeyMessage(key, InterventionKeys()));
    }
  }
  WarnDuplicates(duplicates, field);
  const bool keys_ok = ok_;
  ok_ = was_ok && keys_ok;
  if (!keys_ok) return std::nullopt;
  return CheckIntervention(e, policy, timeout);
}

// v0.1's rule: reject is always the all-defaults policy; block_until_signal needs a timeout.
std::optional<InterventionPolicy> PointParser::CheckIntervention(const MapEntry& e,
                                                                 InterventionPolicy policy,
                                                                 std::optional<int64_t> timeout) {
  const std::string field = e.key;
  if (policy.mode == InterventionMode::kBlockUntilSignal) {
    if (!timeout.has_value()) {
      Error(KeyLine(e), field,
            "timeout_ms is required when mode is 'block_until_signal': a probe must never be "
            "able to hang generation. Add e.g. timeout_ms: 50");
      return std::nullopt;
    }
    if (*timeout < 1) {
      Error(timeout_line_, field + ".timeout_ms",
            "must be >= 1 (got " + std::to_string(*timeout) +
                "); it is how many milliseconds generation waits for the probe, e.g. "
                "timeout_ms: 50");
      return std::nullopt;
    }
    if (*timeout > INT_MAX) {
      Error(timeout_line_, field + ".timeout_ms",
            "timeout_ms must be <= " + std::to_string(INT_MAX) + " (got " +
                std::to_string(*timeout) + ")");
      return std::nullopt;
    }
    policy.timeout_ms = static_cast<int>(*timeout);
    return policy;
  }
  bool ok = true;
  if (timeout.has_value()) {
    Error(timeout_line_, field + ".timeout_ms",
          "only valid with mode 'block_until_signal' (got mode 'reject'). Set mode: "
          "block_until_signal, or remove timeout_ms");
    ok = false;
  }
  if (policy.on_timeout != OnTimeout::kContinue) {
    Error(on_timeout_line_, field + ".on_timeout",
          "only meaningful with mode 'block_until_signal' (got mode 'reject'). Set mode: "
          "block_until_signal, or remove on_timeout");
    ok = false;
  }
  if (!ok) return std::nullopt;
  return policy;
}

// Extension: the classifier an `escalate` signal asks (spec.h EscalationConfig).
std::optional<EscalationConfig> PointParser::ParseEscalation(const MapEntry& e) {
  const std::string field = e.key;
  escalation_line_ = KeyLine(e);
  if (!e.value.IsMap()) {
    Error(KeyLine(e), field,
          "expected a mapping with url, timeout_ms and on_timeout (got " + Describe(e.value) + ")");
    return std::nullopt;
  }
  EscalationConfig config;
  bool has_url = false;
  bool has_timeout = false;
  const bool was_ok = ok_;
  ok_ = true;
  std::vector<DuplicateKey> duplicates;
  for (const MapEntry& key : MappingEntries(e.value, &duplicates)) {
    const int line = KeyLine(key);
    const std::string where = field + "." + key.key;
    if (key.key == "url") {
      const bool is_string =
          key.value.IsScalar() && ResolveScalar(key.value).kind == ScalarKind::kString;
      const std::string url = is_string ? key.value.Scalar() : std::string();
      const size_t scheme_end = url.find("://");
      if (!is_string) {
        Error(line, where, "expected a string (got " + Describe(key.value) + ")");
      } else if ((url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0) ||
                 url.size() <= scheme_end + 3 || url[scheme_end + 3] == '/') {
        Error(line, where,
              "expected an http:// or https:// URL with a host, e.g. "
              "http://127.0.0.1:8080/classify (got " +
                  PyQuote(url) + ")");
      } else {
        config.url = url;
        has_url = true;
      }
    } else if (key.key == "timeout_ms") {
      const LaxInt v(key.value);
      if (v.problem == LaxInt::Problem::kRange || (v.value.has_value() && *v.value > INT_MAX)) {
        Error(line, where, BoundsMessage(v, "timeout_ms", 1));
      } else if (!v.value.has_value()) {
        Error(line, where, v.Message("an int"));
      } else if (*v.value < 1) {
        Error(line, where,
              "must be >= 1 (got " + std::to_string(*v.value) +
                  "); it is how many milliseconds the request is held at most, e.g. "
                  "timeout_ms: 2000");
      } else {
        config.timeout_ms = static_cast<int>(*v.value);
        has_timeout = true;
      }
    } else if (key.key == "on_timeout") {
      config.on_timeout =
          ParseEnum<OnTimeout>(key.value, line, where, "on_timeout").value_or(config.on_timeout);
    } else {
      Error(line, field, UnknownKeyMessage(key, EscalationKeys()));
    }
  }
  WarnDuplicates(duplicates, field);
  if (ok_ && !has_url) {
    Error(KeyLine(e), field + ".url",
          "required: the classifier's URL, e.g. url: http://127.0.0.1:8080/classify");
  }
  if (ok_ && !has_timeout) {
    Error(KeyLine(e), field + ".timeout_ms",
          "required: a held request must never wait forever. Add e.g. timeout_ms: 2000");
  }
  const bool keys_ok = ok_;
  ok_ = was_ok && keys_ok;
  if (!keys_ok) return std::nullopt;
  return config;
}

bool PointParser::Good(const char* key) const {
  const auto it = field_ok_.find(key);
  return it == field_ok_.end() || it->second;
}

// Rules that involve execution_mode. Each applies only when the fields it reads parsed.
void PointParser::CheckModeRules(const ExtractionPoint& p) {
  if (!Good("execution_mode")) return;
  const bool is_async = p.execution_mode == ExecutionMode::kAsync;
  if (is_async && Good("probe_kind") && Present("probe_kind") &&
      p.probe_kind == ProbeKind::kSingleShot) {
    Error(line_of_["execution_mode"], written_["execution_mode"],
          "execution_mode 'async' is not valid with probe_kind 'single_shot': async execution "
          "implies a probe that keeps state across calls; use probe_kind: trajectory, or "
          "execution_mode: inline");
  }
  const bool async_only_set[] = {p.queue_depth.has_value(), p.overflow_policy.has_value()};
  const char* async_only[] = {"queue_depth", "overflow_policy"};
  for (int i = 0; i < 2; ++i) {
    if (is_async || !async_only_set[i] || !Good(async_only[i])) continue;
    Error(line_of_[async_only[i]], async_only[i],
          "only valid with execution_mode 'async' (got execution_mode " +
              PyQuote(Name(p.execution_mode)) + "). Remove " + async_only[i] +
              ", or set execution_mode: async");
  }
  if (is_async && p.escalation.has_value()) {
    Error(escalation_line_, written_["escalation"],
          "execution_mode 'async' cannot escalate: an async probe only observes and cannot hold "
          "generation. Remove the escalation block, or set execution_mode: inline");
  }
  const auto action = p.probe_args.is_object() ? p.probe_args.find("action") : p.probe_args.end();
  if (Good("probe_args") && action != p.probe_args.end() && *action == "escalate" &&
      !p.escalation.has_value() && Good("escalation")) {
    Error(line_of_["probe_args"], written_["probe_args"] + ".action",
          "action 'escalate' needs the point's escalation block (url, timeout_ms, on_timeout): "
          "where the held request's classifier is. Add e.g. escalation: {url: "
          "http://127.0.0.1:8080/classify, timeout_ms: 2000, on_timeout: abort}");
  }
  if (is_async && p.intervention.has_value() && p.intervention->mode != InterventionMode::kReject) {
    Error(intervention_mode_line_, written_["intervention"] + ".mode",
          "execution_mode 'async' cannot use intervention mode 'block_until_signal': an async "
          "probe only observes and cannot hold generation. Remove the intervention block, or "
          "set execution_mode: inline");
  }
}

// Rules that involve the position's window: stride, until and count.
void PointParser::CheckWindowRules(const ExtractionPoint& p) {
  if (p.count.has_value() && Good("count") && Good("until") && p.until != Until::kFixedCount) {
    Error(line_of_["count"], "count",
          "only valid with until: fixed_count (" +
              (p.until.has_value() ? "got until " + PyQuote(Name(*p.until)) : "until is not set") +
              "). Set until: fixed_count, or remove count");
  }
  if (!Good("position") || !Present("position") || p.position.continuous()) return;
  const bool set[] = {p.stride.has_value(), p.until.has_value()};
  const char* keys[] = {"stride", "until"};
  for (int i = 0; i < 2; ++i) {
    if (!set[i] || !Good(keys[i])) continue;
    const std::string& written = written_[keys[i]];
    Error(line_of_[keys[i]], written,
          "only meaningful for a continuous position ('generated[*]' or a slice like "
          "'generated[5:]'), not for position " +
              PyQuote(p.position.ToString()) + ". Remove " + written +
              ", or use a continuous position");
  }
}

// Rules of the extensions combine and tensor_types.
void PointParser::CheckCombineRules(const ExtractionPoint& p) {
  const bool concat = Good("combine") && p.combine == Combine::kConcat;
  if (Present("tensor_types") && Present("tensor_type")) {
    Error(line_of_["tensor_types"], "tensor_types",
          "give tensor_type or tensor_types, not both (tensor_types lists every tensor type of "
          "a combine: concat point)");
  } else if (Present("tensor_types") && Good("combine") && !concat) {
    Error(line_of_["tensor_types"], "tensor_types",
          "only valid with combine: concat (several tensor types in one record). Add combine: "
          "concat, or use tensor_type and one point per tensor type");
  }
  if (!concat || !Good("layers")) return;
  std::vector<int> sorted = p.layers;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    Error(line_of_["layers"], written_["layers"],
          "combine: concat reads each layer once; remove the repeated layer");
  }
}

std::optional<std::vector<TensorType>> PointParser::ParseTensorTypes(const MapEntry& e) {
  if (!e.value.IsSequence()) {
    Error(KeyLine(e), e.key,
          "expected a list of tensor types, e.g. [residual_stream, mlp_out]; got " +
              Describe(e.value) + ".");
    return std::nullopt;
  }
  if (e.value.size() == 0) {
    Error(KeyLine(e), e.key,
          "'tensor_types' list must not be empty, e.g. tensor_types: [residual_stream, mlp_out]");
    return std::nullopt;
  }
  std::vector<TensorType> types;
  bool ok = true;
  for (size_t i = 0; i < e.value.size(); ++i) {
    const std::optional<TensorType> type = ParseEnum<TensorType>(
        e.value[i], LineOf(e.value[i]), e.key + "[" + std::to_string(i) + "]", "tensor_type");
    if (!type.has_value()) {
      ok = false;
    } else if (std::find(types.begin(), types.end(), *type) != types.end()) {
      Error(LineOf(e.value[i]), e.key + "[" + std::to_string(i) + "]",
            PyQuote(Name(*type)) + " is listed twice");
      ok = false;
    } else {
      types.push_back(*type);
    }
  }
  if (!ok) return std::nullopt;
  return types;
}

void PointParser::ReadEntries() {
  std::vector<DuplicateKey> duplicates;
  for (MapEntry& e : MappingEntries(node_, &duplicates)) entries_[e.key] = std::move(e);
  const MapEntry* name = Find("name");
  if (name != nullptr && name->value.IsScalar() &&
      ResolveScalar(name->value).kind == ScalarKind::kString && !name->value.Scalar().empty()) {
    name_ = name->value.Scalar();
    name_line_ = KeyLine(*name);
  }
  WarnDuplicates(duplicates, "");
}

// tensor_type as a TransformerLens hook name ("hook_resid_pre", "blocks.3.hook_attn_out"):
// resolved to our tensor type and layers (resid_pre: the layer before). True when it was one
// (problems reported).
bool PointParser::ParseHookTensorType(ExtractionPoint* p) {
  const MapEntry* e = Find("tensor_type");
  if (e == nullptr || !e->value.IsScalar() || ResolveScalar(e->value).kind != ScalarKind::kString) {
    return false;
  }
  const std::optional<models::TlHookName> hook =
      models::ParseTransformerLensHook(e->value.Scalar());
  if (!hook.has_value()) return false;
  FindField("tensor_type");  // records where it was written
  const int line = KeyLine(*e);
  if (hook->layer.has_value()) {
    if (Find("layers") != nullptr || Find("layer") != nullptr) {
      Error(line, "tensor_type",
            PyQuote(e->value.Scalar()) + " names its block; drop 'layers' or write " +
                PyQuote(e->value.Scalar().substr(e->value.Scalar().rfind('.') + 1)));
      field_ok_["tensor_type"] = false;
      return true;
    }
    p->layers = {*hook->layer};
  } else {
    ParseField("layers", Need::kRequired, &p->layers,
               [this](const MapEntry& e) { return ParseLayers(e); });
  }
  std::vector<int> layers;
  for (const int layer : p->layers) {
    const StatusOr<models::TapPoint> tap = models::TapOfTransformerLensHook(hook->hook, layer);
    if (!tap.ok()) {
      Error(line, "tensor_type", std::string(tap.status().message()));
      field_ok_["tensor_type"] = false;
      return true;
    }
    layers.push_back(tap->layer);
    p->tensor_type = tap->site == models::Site::kAttnOut    ? TensorType::kAttnOut
                     : tap->site == models::Site::kMlpOut   ? TensorType::kMlpOut
                     : tap->site == models::Site::kResidMid ? TensorType::kResidMid
                                                            : TensorType::kResidualStream;
  }
  p->layers = std::move(layers);
  return true;
}

// What is captured: layers, tensor_type, position and its window.
void PointParser::ParseCaptureFields(ExtractionPoint* p) {
  if (!ParseHookTensorType(p)) {
    ParseField("layers", Need::kRequired, &p->layers,
               [this](const MapEntry& e) { return ParseLayers(e); });
    // tensor_types (several) stands in for tensor_type; CheckCombineRules says when it may.
    ParseField("tensor_type", Find("tensor_types") != nullptr ? Need::kOptional : Need::kRequired,
               &p->tensor_type, Enum<TensorType>("tensor_type"),
               " Set it to " + OneOf(EnumNameList<TensorType>()) + ".");
  }
  ParseField("tensor_types", Need::kOptional, &p->tensor_types,
             [this](const MapEntry& e) { return ParseTensorTypes(e); });
  if (!p->tensor_types.empty()) p->tensor_type = p->tensor_types.front();
  ParseField("combine", Need::kOptional, &p->combine, Enum<Combine>("combine"));
  ParseField("position", Need::kRequired, &p->position,
             [this](const MapEntry& e) { return ParsePosition(e); });
  ParseField("stride", Need::kOptionalOrNull, &p->stride, [this](const MapEntry& e) {
    return ParseBoundedInt(e.value, KeyLine(e), e.key,
                           "; " + e.key + ": 1 captures every position");
  });
  ParseField("until", Need::kOptionalOrNull, &p->until, Enum<Until>("until"));
  ParseField("count", Need::kOptionalOrNull, &p->count, [this](const MapEntry& e) {
    return ParseBoundedInt(e.value, KeyLine(e), e.key, "; it is how many positions to capture");
  });
}

// Who consumes it, and how.
void PointParser::ParseProbeFields(ExtractionPoint* p) {
  ParseField("probe_type", Need::kRequired, &p->probe_type,
             [this](const MapEntry& e) { return ParseString(e); });
  ParseField("probe_kind", Need::kRequired, &p->probe_kind, Enum<ProbeKind>("probe_kind"),
             " Set it to " + OneOf(EnumNameList<ProbeKind>()) + ".");
  ParseField("probe_args", Need::kOptional, &p->probe_args,
             [this](const MapEntry& e) { return ParseProbeArgs(e); });
  ParseField("execution_mode", Need::kOptional, &p->execution_mode,
             Enum<ExecutionMode>("execution_mode"));
  ParseField("queue_depth", Need::kOptionalOrNull, &p->queue_depth, [this](const MapEntry& e) {
    return ParseBoundedInt(e.value, KeyLine(e), e.key, "; it is how many activations may wait");
  });
  ParseField("overflow_policy", Need::kOptionalOrNull, &p->overflow_policy,
             Enum<OverflowPolicy>("overflow_policy"));
  ParseField("intervention", Need::kOptionalOrNull, &p->intervention,
             [this](const MapEntry& e) { return ParseIntervention(e); });
  ParseField("escalation", Need::kOptionalOrNull, &p->escalation,
             [this](const MapEntry& e) { return ParseEscalation(e); });
}

std::optional<ExtractionPoint> PointParser::Parse() {
  if (!node_.IsMap()) {
    Error(line_, "",
          "expected a mapping of keys to values, got " + Describe(node_) +
              ". Each extraction point is a mapping with name, layers, tensor_type, position, "
              "...");
    return std::nullopt;
  }
  ReadEntries();
  CheckKeys();
  ExtractionPoint p;
  p.line = line_;
  ParseField("name", Need::kRequired, &p.name,
             [this](const MapEntry& e) { return ParseString(e); });
  ParseCaptureFields(&p);
  ParseProbeFields(&p);
  CheckModeRules(p);
  CheckWindowRules(p);
  CheckCombineRules(p);
  if (!ok_) return std::nullopt;
  return p;
}

}  // namespace

ParsedPoint ParsePoint(Reporter* reporter, const YAML::Node& node, int index) {
  PointParser parser(reporter, node, index);
  ParsedPoint out;
  out.point = parser.Parse();
  out.name = parser.name();
  out.name_line = parser.name_line();
  return out;
}

}  // namespace uc::probe::internal
