#include "probe/spec/spec_steering.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>

#include "probe/spec/spec_util.h"

namespace uc::probe::internal {
namespace {

const std::vector<std::string_view>& EntryKeys() {
  static const std::vector<std::string_view> keys = {"name",        "vector",   "layers",
                                                     "tensor_type", "scale",    "norm_match",
                                                     "tokens",      "position", "when"};
  return keys;
}
const std::vector<std::string_view>& WhenKeys() {
  static const std::vector<std::string_view> keys = {"point", "signal", "action"};
  return keys;
}

// One entry of the list: every field checked, each problem at its key's line.
class EntryParser {
 public:
  EntryParser(Reporter* r, const YAML::Node& node, int index) : r_(r), node_(node), index_(index) {}

  std::optional<SteeringEntry> Parse() {
    if (!node_.IsMap()) {
      Error(LineOf(node_), "",
            "expected a mapping with 'name' and 'vector' (got " + Describe(node_) + ")");
      return std::nullopt;
    }
    SteeringEntry entry;
    entry.line = LineOf(node_);
    std::vector<DuplicateKey> duplicates;
    for (const MapEntry& e : MappingEntries(node_, &duplicates)) fields_[e.key] = e;
    if (const MapEntry* e = Field("name")) {
      if (auto name = String(*e)) {
        entry.name = *name;
        name_ = *name;
      }
    }
    for (const auto& [key, e] : fields_) {
      if (std::find(EntryKeys().begin(), EntryKeys().end(), key) == EntryKeys().end()) {
        Error(LineOf(e.key_node), "", UnknownKeyMessage(e, EntryKeys()));
      }
    }
    if (fields_.count("name") == 0) Error(entry.line, "", "missing required key 'name'");
    if (const MapEntry* e = Field("vector")) {
      if (auto v = String(*e)) entry.vector = *v;
    } else {
      Error(entry.line, "",
            "missing required key 'vector' (a control vector file: .gguf, .safetensors, .npy)");
    }
    if (const MapEntry* e = Field("layers")) ParseLayers(*e, &entry.layers);
    if (const MapEntry* e = Field("tensor_type")) {
      const std::optional<std::string> t = String(*e);
      const std::vector<std::string_view> sites = {"residual_stream", "attn_out", "mlp_out"};
      if (t.has_value() && std::find(sites.begin(), sites.end(), *t) == sites.end()) {
        Error(LineOf(e->key_node), "tensor_type",
              "steering goes to " + OneOf(sites) + ", not " + PyQuote(*t) + "." +
                  DidYouMean(*t, sites));
      } else if (t.has_value()) {
        entry.tensor_type = *EnumFromName<TensorType>(*t);
      }
    }
    if (const MapEntry* e = Field("scale")) {
      const Scalar s = ResolveScalar(e->value);
      if (!e->value.IsScalar() || (s.kind != ScalarKind::kFloat && s.kind != ScalarKind::kInt) ||
          !std::isfinite(s.real)) {
        Error(LineOf(e->key_node), "scale",
              "expected a finite number (got " + Describe(e->value) + ")");
      } else {
        entry.scale = s.real;
      }
    }
    if (const MapEntry* e = Field("norm_match")) {
      const Scalar s = ResolveScalar(e->value);
      if (!e->value.IsScalar() || s.kind != ScalarKind::kBool) {
        Error(LineOf(e->key_node), "norm_match",
              "expected true or false (got " + Describe(e->value) + ")");
      } else {
        entry.norm_match = s.boolean;
      }
    }
    if (const MapEntry* e = Field("tokens")) {
      const std::optional<std::string> t = String(*e);
      const std::vector<std::string_view> scopes = {"all", "prompt", "generated"};
      if (t.has_value() && std::find(scopes.begin(), scopes.end(), *t) == scopes.end()) {
        Error(LineOf(e->key_node), "tokens",
              "expected " + OneOf(scopes) + " (got " + PyQuote(*t) + ")." + DidYouMean(*t, scopes));
      } else if (t.has_value()) {
        entry.tokens = *t;
      }
    }
    if (const MapEntry* e = Field("position")) {
      const Scalar s = ResolveScalar(e->value);
      if (!e->value.IsScalar() || (s.kind != ScalarKind::kString && s.kind != ScalarKind::kInt)) {
        Error(LineOf(e->key_node), "position",
              "expected a position selector such as \"generated[4:]\" (got " + Describe(e->value) +
                  ")");
      } else if (StatusOr<PositionSelector> p = PositionSelector::Parse(e->value.Scalar());
                 !p.ok()) {
        Error(LineOf(e->key_node), "position", std::string(p.status().message()));
      } else if (p->needs_total()) {
        Error(LineOf(e->key_node), "position",
              PyQuote(p->ToString()) +
                  " counts from the end of the generation, which is not known while "
                  "generating; steer with generated[a:] or a `when` trigger instead");
      } else {
        entry.position = *p;
      }
    }
    if (const MapEntry* e = Field("when")) entry.when = ParseWhen(*e);
    if (!ok_) return std::nullopt;
    return entry;
  }

  const std::string& name() const { return name_; }

 private:
  std::string Where(std::string_view field) const {
    std::string out = "steering[" + std::to_string(index_) + "]";
    if (!name_.empty()) out += " " + PyQuote(name_);
    if (!field.empty()) out += "." + std::string(field);
    return out;
  }
  void Error(int line, std::string_view field, std::string message) {
    r_->Error(line, Where(field), std::move(message));
    ok_ = false;
  }
  const MapEntry* Field(const std::string& key) const {
    const auto it = fields_.find(key);
    return it == fields_.end() ? nullptr : &it->second;
  }
  std::optional<std::string> String(const MapEntry& e) {
    if (!e.value.IsScalar() || ResolveScalar(e.value).kind != ScalarKind::kString ||
        e.value.Scalar().empty()) {
      Error(LineOf(e.key_node), e.key,
            "expected a non-empty string (got " + Describe(e.value) + ")");
      return std::nullopt;
    }
    return e.value.Scalar();
  }
  void ParseLayers(const MapEntry& e, std::vector<int>* out) {
    std::vector<YAML::Node> items;
    if (e.value.IsSequence()) {
      for (const YAML::Node& n : e.value) items.push_back(n);
    } else {
      items.push_back(e.value);
    }
    for (const YAML::Node& n : items) {
      const LaxInt v(n);
      if (v.problem != LaxInt::Problem::kNone || *v.value < 0 || *v.value > INT_MAX) {
        Error(LineOf(e.key_node), "layers",
              "expected a block index or a list of them (non-negative integers), got " + v.got);
        return;
      }
      out->push_back(static_cast<int>(*v.value));
    }
    if (out->empty()) Error(LineOf(e.key_node), "layers", "an empty list steers nothing");
  }
  std::optional<SteeringTrigger> ParseWhen(const MapEntry& e) {
    if (!e.value.IsMap()) {
      Error(LineOf(e.key_node), "when",
            "expected {point: NAME, signal: flag, action: start|stop} (got " + Describe(e.value) +
                ")");
      return std::nullopt;
    }
    SteeringTrigger trigger;
    std::vector<DuplicateKey> duplicates;
    bool has_point = false;
    for (const MapEntry& w : MappingEntries(e.value, &duplicates)) {
      const int line = LineOf(w.key_node);
      if (w.key == "point") {
        if (auto p = String(w)) {
          trigger.point = *p;
          has_point = true;
        }
      } else if (w.key == "signal") {
        const std::optional<std::string> s = String(w);
        if (s.has_value() && *s != "flag") {
          Error(
              line, "when.signal",
              "only 'flag' triggers steering (the point's probe signals flag); got " + PyQuote(*s));
        }
      } else if (w.key == "action") {
        const std::optional<std::string> a = String(w);
        if (a == "start") {
          trigger.action = SteeringAction::kStart;
        } else if (a == "stop") {
          trigger.action = SteeringAction::kStop;
        } else if (a.has_value()) {
          Error(line, "when.action", "expected 'start' or 'stop' (got " + PyQuote(*a) + ")");
        }
      } else {
        Error(line, "when", UnknownKeyMessage(w, WhenKeys()));
      }
    }
    if (!has_point) {
      Error(LineOf(e.key_node), "when", "missing required key 'point' (an extraction point)");
      return std::nullopt;
    }
    return trigger;
  }

  Reporter* r_;
  YAML::Node node_;
  int index_;
  bool ok_ = true;
  std::string name_;
  std::map<std::string, MapEntry> fields_;
};

}  // namespace

void ParseSteeringList(Reporter* reporter, const MapEntry& e, Spec* spec) {
  if (e.value.IsNull()) return;
  if (!e.value.IsSequence()) {
    reporter->Error(LineOf(e.key_node), "steering",
                    "expected a list of steering entries (got " + Describe(e.value) + ")");
    return;
  }
  std::map<std::string, int> first;
  for (size_t i = 0; i < e.value.size(); ++i) {
    EntryParser parser(reporter, e.value[i], static_cast<int>(i));
    std::optional<SteeringEntry> entry = parser.Parse();
    if (!parser.name().empty()) {
      const auto [it, added] = first.emplace(parser.name(), static_cast<int>(i));
      if (!added) {
        reporter->Error(LineOf(e.value[i]),
                        "steering[" + std::to_string(i) + "] " + PyQuote(parser.name()) + ".name",
                        "duplicate name (also steering[" + std::to_string(it->second) +
                            "]); names must be unique");
      }
    }
    if (entry.has_value()) spec->steering.push_back(std::move(*entry));
  }
  if (spec->steering.size() > 255) {
    reporter->Error(LineOf(e.key_node), "steering", "at most 255 steering entries");
  }
}

void CheckSteeringTriggers(Reporter* reporter, const Spec& spec) {
  std::vector<std::string_view> names;
  for (const ExtractionPoint& p : spec.extraction_points) names.push_back(p.name);
  for (size_t i = 0; i < spec.steering.size(); ++i) {
    const SteeringEntry& s = spec.steering[i];
    if (!s.when.has_value()) continue;
    const std::string where =
        "steering[" + std::to_string(i) + "] " + PyQuote(s.name) + ".when.point";
    const auto it = std::find_if(spec.extraction_points.begin(), spec.extraction_points.end(),
                                 [&](const ExtractionPoint& p) { return p.name == s.when->point; });
    if (it == spec.extraction_points.end()) {
      reporter->Error(s.line, where,
                      "no extraction point named " + PyQuote(s.when->point) + "." +
                          DidYouMean(s.when->point, names));
    } else if (it->execution_mode != ExecutionMode::kInline) {
      reporter->Error(s.line, where,
                      "extraction point " + PyQuote(s.when->point) +
                          " is async; only an inline point switches steering token-exactly");
    }
  }
}

}  // namespace uc::probe::internal
