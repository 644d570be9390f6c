#include "probe/spec/spec_yaml.h"

#include <charconv>
#include <cmath>
#include <map>
#include <regex>
#include <set>

#include "probe/spec/spec_util.h"

namespace uc::probe::internal {
namespace {

constexpr std::string_view kTagPrefix = "tag:yaml.org,2002:";

// PyYAML's implicit resolvers (resolver.py), in the order it tries them.
const std::regex& BoolPattern() {
  static const std::regex re(
      "yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF");
  return re;
}
const std::regex& FloatPattern() {
  static const std::regex re(
      R"([-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9_]+(?:[eE][-+][0-9]+)?)"
      R"(|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))");
  return re;
}
const std::regex& IntPattern() {
  static const std::regex re(
      R"([-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)"
      R"(|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)");
  return re;
}
const std::regex& TimestampPattern() {
  static const std::regex re(
      R"([0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9])"
      R"(|[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?(?:[Tt]|[ \t]+)[0-9][0-9]?:[0-9][0-9])"
      R"(:[0-9][0-9](?:\.[0-9]*)?(?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?)");
  return re;
}

std::string WithoutUnderscores(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c != '_') out += c;
  }
  return out;
}

// Digits of `text` in `base` into *value; false on a bad digit. Stops growing past 2^64 and
// sets *overflow instead.
bool AccumulateDigits(std::string_view text, int base, unsigned __int128* value, bool* overflow) {
  for (const char c : text) {
    int digit = -1;
    if (c >= '0' && c <= '9') digit = c - '0';
    if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    if (digit < 0 || digit >= base) return false;
    if (*value > (static_cast<unsigned __int128>(1) << 64)) {
      *overflow = true;
      continue;
    }
    *value = *value * base + digit;
  }
  return true;
}

// PyYAML's construct_yaml_int; false when the text is no integer at all.
bool ConstructInt(std::string_view written, Scalar* out) {
  std::string text = WithoutUnderscores(written);
  bool negative = false;
  if (!text.empty() && (text[0] == '-' || text[0] == '+')) {
    negative = text[0] == '-';
    text.erase(0, 1);
  }
  if (text.empty()) return false;
  unsigned __int128 value = 0;
  bool overflow = false;
  bool ok = true;
  if (text.rfind("0b", 0) == 0) {
    ok =
        text.size() > 2 && AccumulateDigits(std::string_view(text).substr(2), 2, &value, &overflow);
  } else if (text.rfind("0x", 0) == 0) {
    ok = text.size() > 2 &&
         AccumulateDigits(std::string_view(text).substr(2), 16, &value, &overflow);
  } else if (text.find(':') != std::string::npos) {
    size_t begin = 0;
    while (ok && begin <= text.size()) {  // base 60: 1:30 = 90
      const size_t end = std::min(text.find(':', begin), text.size());
      unsigned __int128 part = 0;
      ok = end > begin && AccumulateDigits(std::string_view(text).substr(begin, end - begin), 10,
                                           &part, &overflow);
      if (value > (static_cast<unsigned __int128>(1) << 64)) overflow = true;
      value = value * 60 + part;
      begin = end + 1;
    }
  } else {
    ok = AccumulateDigits(text, text.size() > 1 && text[0] == '0' ? 8 : 10, &value, &overflow);
  }
  if (!ok) return false;
  const unsigned __int128 limit = (static_cast<unsigned __int128>(1) << 63) - (negative ? 0 : 1);
  out->kind = ScalarKind::kInt;
  out->int_overflow = overflow || value > limit;
  if (!out->int_overflow) {
    out->integer = negative ? static_cast<int64_t>(-static_cast<__int128>(value))
                            : static_cast<int64_t>(value);
  }
  if (!negative && !overflow && value <= UINT64_MAX) {
    out->unsigned_integer = static_cast<uint64_t>(value);
  }
  out->real = static_cast<double>(value) * (negative ? -1.0 : 1.0);
  return true;
}

// PyYAML's construct_yaml_float.
bool ConstructFloat(std::string_view written, Scalar* out) {
  std::string text = WithoutUnderscores(written);
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double sign = 1.0;
  if (!text.empty() && (text[0] == '-' || text[0] == '+')) {
    sign = text[0] == '-' ? -1.0 : 1.0;
    text.erase(0, 1);
  }
  out->kind = ScalarKind::kFloat;
  if (text == ".inf") {
    out->real = sign * HUGE_VAL;
    return true;
  }
  if (text == ".nan") {
    out->real = std::nan("");
    return true;
  }
  double value = 0.0;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(':', begin), text.size());
    const std::string part = text.substr(begin, end - begin);
    char* parse_end = nullptr;
    const double v = std::strtod(part.c_str(), &parse_end);
    if (part.empty() || parse_end != part.c_str() + part.size()) return false;
    value = value * 60 + v;
    begin = end + 1;
  }
  out->real = sign * value;
  return true;
}

void ResolvePlain(Scalar* s) {
  const std::string& t = s->text;
  if (std::regex_match(t, BoolPattern())) {
    s->kind = ScalarKind::kBool;
    s->boolean = t[0] == 'y' || t[0] == 'Y' || t[0] == 't' || t[0] == 'T' || t == "on" ||
                 t == "On" || t == "ON";
  } else if (std::regex_match(t, FloatPattern()) && ConstructFloat(t, s)) {
  } else if (std::regex_match(t, IntPattern()) && ConstructInt(t, s)) {
  } else if (std::regex_match(t, TimestampPattern())) {
    s->kind = ScalarKind::kTimestamp;
  } else {
    s->kind = ScalarKind::kString;
  }
}

void ResolveTagged(const std::string& tag, Scalar* s) {
  const std::string type = tag.substr(kTagPrefix.size());
  s->kind = ScalarKind::kInvalid;
  if (type == "str" || type == "binary") {
    s->kind = ScalarKind::kString;
  } else if (type == "null") {
    s->kind = ScalarKind::kNull;
  } else if (type == "bool") {
    std::string lower = s->text;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == "yes" || lower == "true" || lower == "on" || lower == "no" || lower == "false" ||
        lower == "off") {
      s->kind = ScalarKind::kBool;
      s->boolean = lower == "yes" || lower == "true" || lower == "on";
    }
  } else if (type == "int") {
    if (!ConstructInt(s->text, s)) s->kind = ScalarKind::kInvalid;
  } else if (type == "float") {
    if (!ConstructFloat(s->text, s)) s->kind = ScalarKind::kInvalid;
  } else if (type == "timestamp") {
    if (std::regex_match(s->text, TimestampPattern())) s->kind = ScalarKind::kTimestamp;
  } else {
    s->error = "could not determine a constructor for the tag '" + tag + "'";
    return;
  }
  if (s->kind == ScalarKind::kInvalid) {
    s->error = "'" + s->text + "' is not a valid !!" + type;
  }
}

bool IsStandardCollectionTag(const std::string& tag, YAML::NodeType::value type) {
  if (tag == "?" || tag == "!" || tag.empty()) return true;
  if (type == YAML::NodeType::Map) return tag == std::string(kTagPrefix) + "map";
  return tag == std::string(kTagPrefix) + "seq";
}

bool IsMergeKey(const YAML::Node& key) {
  return key.IsScalar() && key.Tag() == "?" && key.Scalar() == "<<";
}

// The (key, value) pairs of a mapping after PyYAML's flatten_mapping: merged pairs first
// (the first of several merged mappings placed last, so that it wins), then the mapping's own.
void Flatten(const YAML::Node& map, std::vector<MapEntry>* merged, std::vector<MapEntry>* own) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node key = it->first;
    const YAML::Node value = it->second;
    if (!IsMergeKey(key)) {
      own->push_back({key.IsScalar() ? key.Scalar() : Describe(key), key, value});
      continue;
    }
    std::vector<YAML::Node> sources;
    if (value.IsMap()) sources.push_back(value);
    if (value.IsSequence()) {
      for (auto s = value.begin(); s != value.end(); ++s) {
        if (s->IsMap()) sources.insert(sources.begin(), *s);
      }
    }
    for (const YAML::Node& source : sources) {
      std::vector<MapEntry> sub_merged;
      std::vector<MapEntry> sub_own;
      Flatten(source, &sub_merged, &sub_own);
      merged->insert(merged->end(), sub_merged.begin(), sub_merged.end());
      merged->insert(merged->end(), sub_own.begin(), sub_own.end());
    }
  }
}

// Whether the quoted scalar starting at text[pos] has its closing quote.
bool QuoteIsClosed(std::string_view text, size_t pos) {
  const char quote = text[pos];
  for (size_t i = pos + 1; i < text.size(); ++i) {
    if (quote == '"' && text[i] == '\\') {
      ++i;
    } else if (text[i] == quote) {
      if (quote == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
        ++i;  // '' is an escaped quote
        continue;
      }
      return true;
    }
  }
  return false;
}

struct Walk {
  std::string_view text;  // after a UTF-8 BOM (yaml-cpp's positions skip it)
  std::set<size_t> visited;
  std::vector<YamlProblem>* problems;
};

void CollectProblems(const YAML::Node& node, Walk* walk) {
  std::vector<YamlProblem>* problems = walk->problems;
  if (node.IsScalar()) {
    const Scalar s = ResolveScalar(node);
    if (s.kind == ScalarKind::kInvalid) problems->push_back({LineOf(node), s.error});
    const int pos = node.Mark().pos;
    if (node.Tag() == "!" && pos >= 0 && static_cast<size_t>(pos) < walk->text.size() &&
        (walk->text[pos] == '"' || walk->text[pos] == '\'') && !QuoteIsClosed(walk->text, pos)) {
      problems->push_back(
          {LineOf(node), "found unexpected end of stream: a quoted scalar is never closed"});
    }
    return;
  }
  if (!node.IsMap() && !node.IsSequence()) return;
  // Aliases share their anchor's node (and position): visit each collection once.
  if (!walk->visited.insert(static_cast<size_t>(node.Mark().pos)).second) return;
  if (!IsStandardCollectionTag(node.Tag(), node.Type())) {
    problems->push_back(
        {LineOf(node), "could not determine a constructor for the tag '" + node.Tag() + "'"});
  }
  for (auto it = node.begin(); it != node.end(); ++it) {
    if (node.IsSequence()) {
      CollectProblems(*it, walk);
      continue;
    }
    const YAML::Node value = it->second;
    if (IsMergeKey(it->first)) {
      bool ok = value.IsMap() || value.IsSequence();
      if (value.IsSequence()) {
        for (auto s = value.begin(); s != value.end(); ++s) ok = ok && s->IsMap();
      }
      if (!ok) {
        problems->push_back(
            {LineOf(it->first), "expected a mapping or list of mappings for merging (<<)"});
      }
    } else {
      CollectProblems(it->first, walk);
    }
    CollectProblems(value, walk);
  }
}

std::string PythonFloatRepr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), v);
  std::string text(buffer, result.ptr);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

}  // namespace

Scalar ResolveScalar(const YAML::Node& node) {
  Scalar s;
  const std::string& tag = node.Tag();
  if (node.IsScalar()) s.text = node.Scalar();
  if (tag == "!") {
    s.kind = ScalarKind::kString;
  } else if (tag.rfind(kTagPrefix, 0) == 0) {
    ResolveTagged(tag, &s);
  } else if (node.IsNull()) {
    s.kind = ScalarKind::kNull;
  } else if (tag == "?" || tag.empty()) {
    ResolvePlain(&s);
  } else {
    s.kind = ScalarKind::kInvalid;
    s.error = "could not determine a constructor for the tag '" + tag + "'";
  }
  return s;
}

ScalarKind PlainScalarKind(const std::string& text) {
  Scalar s;
  s.text = text;
  if (text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL") {
    return ScalarKind::kNull;
  }
  ResolvePlain(&s);
  return s.kind;
}

int LineOf(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  return mark.is_null() || mark.line < 0 ? 0 : mark.line + 1;
}

std::string Describe(const YAML::Node& node) {
  if (node.IsMap()) return "a dict";
  if (node.IsSequence()) return "a list";
  const Scalar s = ResolveScalar(node);
  switch (s.kind) {
    case ScalarKind::kNull:
      return "None";
    case ScalarKind::kBool:
      return s.boolean ? "True" : "False";
    case ScalarKind::kInt:
      return s.int_overflow ? s.text : std::to_string(s.integer);
    case ScalarKind::kFloat:
      return PythonFloatRepr(s.real);
    case ScalarKind::kTimestamp:
      return "a date (" + s.text + ")";
    case ScalarKind::kString:
    case ScalarKind::kInvalid:
      return PyQuote(s.text);
  }
  return PyQuote(s.text);
}

std::vector<MapEntry> MappingEntries(const YAML::Node& map, std::vector<DuplicateKey>* duplicates) {
  std::vector<MapEntry> merged;
  std::vector<MapEntry> own;
  Flatten(map, &merged, &own);
  std::vector<MapEntry> entries;
  std::map<std::string, size_t> index;  // key -> position in entries
  std::map<std::string, int> own_line;  // key -> line of its last explicit occurrence
  const size_t num_merged = merged.size();
  merged.insert(merged.end(), own.begin(), own.end());
  for (size_t i = 0; i < merged.size(); ++i) {
    MapEntry& e = merged[i];
    if (i >= num_merged) {
      const auto seen = own_line.find(e.key);
      if (seen != own_line.end() && duplicates != nullptr) {
        duplicates->push_back({e.key, seen->second, LineOf(e.key_node)});
      }
      own_line[e.key] = LineOf(e.key_node);
    }
    const auto it = index.find(e.key);
    if (it == index.end()) {
      index[e.key] = entries.size();
      entries.push_back(std::move(e));
    } else {
      entries[it->second] = std::move(e);
    }
  }
  return entries;
}

std::vector<YamlProblem> FindYamlProblems(const YAML::Node& root, std::string_view text) {
  std::vector<YamlProblem> problems;
  constexpr std::string_view kBom = "\xEF\xBB\xBF";
  if (text.substr(0, kBom.size()) == kBom) text.remove_prefix(kBom.size());
  Walk walk{text, {}, &problems};
  CollectProblems(root, &walk);
  return problems;
}

nlohmann::json ToJson(const YAML::Node& node, size_t* budget) {
  if (budget != nullptr) {
    if (*budget == 0) return nullptr;
    --*budget;
  }
  if (node.IsMap()) {
    nlohmann::json out = nlohmann::json::object();
    for (const MapEntry& e : MappingEntries(node, nullptr)) out[e.key] = ToJson(e.value, budget);
    return out;
  }
  if (node.IsSequence()) {
    nlohmann::json out = nlohmann::json::array();
    for (auto it = node.begin(); it != node.end(); ++it) out.push_back(ToJson(*it, budget));
    return out;
  }
  const Scalar s = ResolveScalar(node);
  switch (s.kind) {
    case ScalarKind::kNull:
      return nullptr;
    case ScalarKind::kBool:
      return s.boolean;
    case ScalarKind::kInt:
      if (!s.int_overflow) return s.integer;
      if (s.unsigned_integer.has_value()) return *s.unsigned_integer;
      return s.real;
    case ScalarKind::kFloat:
      return s.real;
    case ScalarKind::kString:
    case ScalarKind::kTimestamp:
    case ScalarKind::kInvalid:
      return s.text;
  }
  return s.text;
}

}  // namespace uc::probe::internal
