#include "chat/jinja_builtins.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <map>
#include <set>

namespace uc::chat::jinja {
namespace {

// ------------------------------------------------------------------ argument helpers

// Binds call arguments to parameter names Python-style: positional first, then keywords.
// Missing parameters are undefined.
class Params {
 public:
  Params(const std::string& callee, CallArgs& args, std::initializer_list<const char*> names)
      : values_(names.size()) {
    std::vector<std::string> n(names.begin(), names.end());
    if (args.positional.size() > n.size()) {
      throw JinjaError(callee + "() takes at most " + std::to_string(n.size()) + " argument(s) (" +
                       std::to_string(args.positional.size()) + " given)");
    }
    for (size_t i = 0; i < args.positional.size(); ++i) values_[i] = args.positional[i];
    for (auto& [key, value] : args.keyword) {
      auto it = std::find(n.begin(), n.end(), key);
      if (it == n.end()) {
        throw JinjaError(callee + "() got an unexpected keyword argument '" + key + "'");
      }
      values_[static_cast<size_t>(it - n.begin())] = value;
    }
  }
  const Value& operator[](size_t i) const { return values_[i]; }
  bool has(size_t i) const { return !values_[i].is_undefined(); }

 private:
  std::vector<Value> values_;
};

std::string RequireString(const Value& v, const std::string& what) {
  if (!v.is_string()) throw JinjaError(what + " must be a string, got " + v.TypeName());
  return v.as_string();
}

int64_t RequireInt(const Value& v, const std::string& what) {
  if (!v.is_int() && !v.is_bool())
    throw JinjaError(what + " must be an integer, got " + v.TypeName());
  return v.as_int();
}

void RequireDefined(const Value& v, const std::string& what) {
  if (v.is_undefined()) {
    throw JinjaError(v.undefined_name().empty() ? what + ": the value is undefined"
                                                : "'" + v.undefined_name() + "' is undefined");
  }
}

// The items of an iterable (strings by code point, dicts by key); undefined is empty.
List Iterate(const Value& v, const std::string& what) {
  if (v.is_undefined()) return {};
  if (v.is_list()) return v.as_list();
  if (v.is_dict()) {
    List keys;
    for (const auto& [k, e] : v.as_dict()) keys.push_back(Value::String(k));
    return keys;
  }
  if (v.is_string()) {
    List chars;
    for (char32_t c : Utf8ToCodePoints(v.as_string())) {
      chars.push_back(Value::String(CodePointsToUtf8(std::u32string(1, c))));
    }
    return chars;
  }
  throw JinjaError(what + ": '" + v.TypeName() + "' object is not iterable");
}

int64_t Length(const Value& v) {
  if (v.is_undefined()) return 0;
  if (v.is_string()) return static_cast<int64_t>(Utf8ToCodePoints(v.as_string()).size());
  if (v.is_list()) return static_cast<int64_t>(v.as_list().size());
  if (v.is_dict()) return static_cast<int64_t>(v.as_dict().size());
  throw JinjaError("object of type '" + v.TypeName() + "' has no len()");
}

std::string AsciiMap(std::string s, int (*f)(int)) {
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x80)
      c = static_cast<char>(f(static_cast<unsigned char>(c)));
  }
  return s;
}

std::string Capitalize(const std::string& s) {
  std::string out = AsciiMap(s, [](int c) { return std::tolower(c); });
  if (!out.empty() && static_cast<unsigned char>(out[0]) < 0x80) {
    out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  }
  return out;
}

// Python's str.title(): a cased letter after a non-letter starts a word.
std::string PythonTitle(const std::string& s) {
  std::string out = s;
  bool prev_letter = false;
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    const bool letter = u < 0x80 && std::isalpha(u);
    if (letter) c = static_cast<char>(prev_letter ? std::tolower(u) : std::toupper(u));
    prev_letter = letter || u >= 0x80;
  }
  return out;
}

// Jinja's title filter: words begin after '-', whitespace, '(', '{', '[' or '<'.
std::string JinjaTitle(const std::string& s) {
  std::string out;
  bool word_start = true;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    const bool sep = std::isspace(u) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (sep) {
      out += c;
      word_start = true;
    } else if (u < 0x80) {
      out += static_cast<char>(word_start ? std::toupper(u) : std::tolower(u));
      word_start = false;
    } else {
      out += c;
      word_start = false;
    }
  }
  return out;
}

std::string Replace(const std::string& s, const std::string& old_text, const std::string& new_text,
                    int64_t count) {
  if (old_text.empty()) throw JinjaError("replace() with an empty string is not supported");
  std::string out;
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(old_text, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += new_text;
    CheckStringBudget(out.size());
    pos = hit + old_text.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

Value Split(const std::string& s, const Value& sep, int64_t maxsplit) {
  List parts;
  if (sep.is_undefined() || sep.is_none()) {
    const std::u32string cps = Utf8ToCodePoints(s);
    size_t i = 0;
    while (true) {
      while (i < cps.size() && IsPythonSpace(cps[i])) ++i;
      if (i >= cps.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t end = cps.size();
        while (end > i && IsPythonSpace(cps[end - 1])) --end;
        parts.push_back(
            Value::String(CodePointsToUtf8(std::u32string_view(cps).substr(i, end - i))));
        break;
      }
      size_t j = i;
      while (j < cps.size() && !IsPythonSpace(cps[j])) ++j;
      parts.push_back(Value::String(CodePointsToUtf8(std::u32string_view(cps).substr(i, j - i))));
      i = j;
    }
    return Value::MakeList(std::move(parts));
  }
  const std::string d = RequireString(sep, "split() separator");
  if (d.empty()) throw JinjaError("split(): empty separator");
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    const size_t hit = s.find(d, pos);
    if (hit == std::string::npos) break;
    parts.push_back(Value::String(s.substr(pos, hit - pos)));
    pos = hit + d.size();
  }
  parts.push_back(Value::String(s.substr(pos)));
  return Value::MakeList(std::move(parts));
}

bool StartsOrEnds(const std::string& s, const Value& what, bool starts) {
  List options = what.is_list() ? what.as_list() : List{what};
  for (const Value& o : options) {
    const std::string p = RequireString(o, starts ? "startswith() prefix" : "endswith() suffix");
    if (p.size() > s.size()) continue;
    if (starts ? s.compare(0, p.size(), p) == 0
               : s.compare(s.size() - p.size(), p.size(), p) == 0) {
      return true;
    }
  }
  return false;
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// value.attr for selectattr/map(attribute=...): dict keys, dotted paths.
Value GetAttribute(const Value& v, const std::string& path) {
  Value cur = v;
  size_t pos = 0;
  while (pos <= path.size()) {
    const size_t dot = path.find('.', pos);
    const std::string part =
        path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    if (!cur.is_dict()) return Value::Undefined();
    const Value* next = cur.Find(part);
    if (next == nullptr) return Value::Undefined();
    cur = *next;
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  return cur;
}

// select/reject/selectattr/rejectattr: `test_args` are the test's name and its arguments.
Value FilterByTest(const Value& value, const std::vector<Value>& test_args, bool keep,
                   const std::string* attribute) {
  List out;
  std::string test = "truthy";
  if (!test_args.empty()) test = RequireString(test_args[0], "the test name");
  if (test != "truthy" && !Builtins::IsTest(test)) {
    throw JinjaError("unsupported test '" + test + "'");
  }
  for (const Value& item : Iterate(value, "select")) {
    const Value subject = attribute != nullptr ? GetAttribute(item, *attribute) : item;
    bool passed;
    if (test == "truthy") {
      passed = subject.Truthy();
    } else {
      CallArgs args;
      args.positional.assign(test_args.begin() + 1, test_args.end());
      passed = Builtins::ApplyTest(test, subject, args);
    }
    if (passed == keep) out.push_back(item);
  }
  return Value::MakeList(std::move(out));
}

Value Sorted(List items, bool reverse, const std::string* attribute) {
  auto key = [&](const Value& v) { return attribute ? GetAttribute(v, *attribute) : v; };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    const Value ka = key(a), kb = key(b);
    if (ka.is_string() && kb.is_string()) {  // Jinja sorts strings case-insensitively
      return AsciiMap(ka.as_string(), [](int c) { return std::tolower(c); }) <
             AsciiMap(
                 kb.as_string(), [](int c) { return std::tolower(c); });
    }
    return LessThan(ka, kb);
  });
  if (reverse) std::reverse(items.begin(), items.end());
  return Value::MakeList(std::move(items));
}

Value Number(const Value& v, bool to_float, const Value& fallback) {
  if (v.is_bool()) return to_float ? Value::Float(v.as_int()) : Value::Int(v.as_int());
  if (v.is_int()) return to_float ? Value::Float(static_cast<double>(v.as_int())) : v;
  if (v.is_float()) {
    if (to_float) return v;
    return std::isnan(v.as_double()) ? fallback : Value::Int(FloatToInt(v.as_double()));
  }
  if (v.is_string()) {
    const std::string s = PythonStrip(v.as_string(), true, true);
    try {
      size_t used = 0;
      if (to_float) {
        const double d = std::stod(s, &used);
        if (used == s.size()) return Value::Float(d);
      } else {
        const long long i = std::stoll(s, &used);
        if (used == s.size()) return Value::Int(i);
        const double d = std::stod(s, &used);
        if (used == s.size()) return std::isnan(d) ? fallback : Value::Int(FloatToInt(d));
      }
    } catch (const std::logic_error&) {  // not a number (stoll/stod); FloatToInt's error stays
    }
  }
  return fallback;
}

using FilterFn = Value (*)(const Value& value, CallArgs& args);

#define UC_FILTER(name) Value Filter_##name(const Value& v, CallArgs& a)

UC_FILTER(trim) {
  Params p("trim", a, {"chars"});
  RequireDefined(v, "trim");
  return Value::String(PythonStrip(v.Str(), true, true,
                                   p.has(0) && !p[0].is_none()
                                       ? std::optional<std::string>(RequireString(p[0], "chars"))
                                       : std::nullopt));
}
UC_FILTER(length) {
  Params p("length", a, {});
  return Value::Int(Length(v));
}
UC_FILTER(tojson) {
  Params p("tojson", a, {"indent", "ensure_ascii", "separators", "sort_keys"});
  if (p.has(1) && p[1].Truthy())
    throw JinjaError("unsupported construct 'tojson(ensure_ascii=true)'");
  if (p.has(2) && !p[2].is_none())
    throw JinjaError("unsupported construct 'tojson(separators=...)'");
  const int indent =
      p.has(0) && !p[0].is_none() ? static_cast<int>(RequireInt(p[0], "indent")) : -1;
  return Value::String(v.ToJson(indent, p.has(3) && p[3].Truthy()));
}
UC_FILTER(upper) {
  Params p("upper", a, {});
  return Value::String(AsciiMap(v.Str(), [](int c) { return std::toupper(c); }));
}
UC_FILTER(lower) {
  Params p("lower", a, {});
  return Value::String(AsciiMap(v.Str(), [](int c) { return std::tolower(c); }));
}
UC_FILTER(capitalize) {
  Params p("capitalize", a, {});
  return Value::String(Capitalize(v.Str()));
}
UC_FILTER(title) {
  Params p("title", a, {});
  return Value::String(JinjaTitle(v.Str()));
}
UC_FILTER(default) {
  Params p("default", a, {"default_value", "boolean"});
  const bool use_default = v.is_undefined() || (p.has(1) && p[1].Truthy() && !v.Truthy());
  if (!use_default) return v;
  return p.has(0) ? p[0] : Value::String("");
}
UC_FILTER(items) {
  Params p("items", a, {});
  if (v.is_undefined()) return Value::MakeList({});
  if (!v.is_dict()) throw JinjaError("items: expected a mapping, got " + v.TypeName());
  List out;
  for (const auto& [k, e] : v.as_dict())
    out.push_back(Value::MakeList({Value::String(k), e}, true));
  return Value::MakeList(std::move(out));
}
UC_FILTER(join) {
  Params p("join", a, {"d", "attribute"});
  const std::string sep = p.has(0) ? RequireString(p[0], "join separator") : "";
  std::string out;
  bool first = true;
  for (const Value& item : Iterate(v, "join")) {
    if (!first) out += sep;
    first = false;
    out += p.has(1) ? GetAttribute(item, RequireString(p[1], "attribute")).Str() : item.Str();
    CheckStringBudget(out.size());
  }
  return Value::String(out);
}
UC_FILTER(first) {
  Params p("first", a, {});
  List items = Iterate(v, "first");
  return items.empty() ? Value::Undefined() : items.front();
}
UC_FILTER(last) {
  Params p("last", a, {});
  List items = Iterate(v, "last");
  return items.empty() ? Value::Undefined() : items.back();
}
UC_FILTER(list) {
  Params p("list", a, {});
  return Value::MakeList(Iterate(v, "list"));
}
UC_FILTER(string) {
  Params p("string", a, {});
  return Value::String(v.Str());
}
UC_FILTER(int) {
  Params p("int", a, {"default"});
  return Number(v, false, p.has(0) ? p[0] : Value::Int(0));
}
UC_FILTER(float) {
  Params p("float", a, {"default"});
  return Number(v, true, p.has(0) ? p[0] : Value::Float(0.0));
}
UC_FILTER(abs) {
  Params p("abs", a, {});
  if (v.is_float()) return Value::Float(std::fabs(v.as_double()));
  if (v.is_int() || v.is_bool()) {
    return Value::Int(v.as_int() < 0 ? CheckedSub(0, v.as_int()) : v.as_int());
  }
  throw JinjaError("bad operand type for abs(): '" + v.TypeName() + "'");
}
UC_FILTER(select) { return FilterByTest(v, a.positional, true, nullptr); }
UC_FILTER(reject) { return FilterByTest(v, a.positional, false, nullptr); }
UC_FILTER(selectattr) {
  if (a.positional.empty()) throw JinjaError("selectattr() needs an attribute name");
  const std::string attr = RequireString(a.positional[0], "the attribute name");
  return FilterByTest(v, {a.positional.begin() + 1, a.positional.end()}, true, &attr);
}
UC_FILTER(rejectattr) {
  if (a.positional.empty()) throw JinjaError("rejectattr() needs an attribute name");
  const std::string attr = RequireString(a.positional[0], "the attribute name");
  return FilterByTest(v, {a.positional.begin() + 1, a.positional.end()}, false, &attr);
}
UC_FILTER(map) {
  List out;
  std::string attribute;
  Value fallback;
  for (auto& [k, e] : a.keyword) {
    if (k == "attribute") {
      attribute = RequireString(e, "attribute");
    } else if (k == "default") {
      fallback = e;
    } else {
      throw JinjaError("map() got an unexpected keyword argument '" + k + "'");
    }
  }
  if (!attribute.empty()) {
    for (const Value& item : Iterate(v, "map")) {
      Value got = GetAttribute(item, attribute);
      out.push_back(got.is_undefined() && !fallback.is_undefined() ? fallback : got);
    }
    return Value::MakeList(std::move(out));
  }
  if (a.positional.empty()) throw JinjaError("map() needs a filter name or attribute=");
  const std::string filter = RequireString(a.positional[0], "the filter name");
  if (!Builtins::IsFilter(filter)) throw JinjaError("unsupported filter '" + filter + "'");
  for (const Value& item : Iterate(v, "map")) {
    CallArgs args;
    args.positional.assign(a.positional.begin() + 1, a.positional.end());
    out.push_back(Builtins::ApplyFilter(filter, item, args));
  }
  return Value::MakeList(std::move(out));
}
UC_FILTER(replace) {
  Params p("replace", a, {"old", "new", "count"});
  return Value::String(Replace(v.Str(), RequireString(p[0], "old"), RequireString(p[1], "new"),
                               p.has(2) && !p[2].is_none() ? RequireInt(p[2], "count") : -1));
}
UC_FILTER(safe) {
  Params p("safe", a, {});
  return v;
}
UC_FILTER(escape) {
  Params p("escape", a, {});
  return Value::String(HtmlEscape(v.Str()));
}
UC_FILTER(reverse) {
  Params p("reverse", a, {});
  if (v.is_string()) {
    std::u32string cps = Utf8ToCodePoints(v.as_string());
    std::reverse(cps.begin(), cps.end());
    return Value::String(CodePointsToUtf8(cps));
  }
  List items = Iterate(v, "reverse");
  std::reverse(items.begin(), items.end());
  return Value::MakeList(std::move(items));
}
UC_FILTER(sort) {
  Params p("sort", a, {"reverse", "case_sensitive", "attribute"});
  const std::string attr = p.has(2) ? RequireString(p[2], "attribute") : "";
  return Sorted(Iterate(v, "sort"), p.has(0) && p[0].Truthy(), p.has(2) ? &attr : nullptr);
}
UC_FILTER(unique) {
  Params p("unique", a, {});
  List out;
  for (const Value& item : Iterate(v, "unique")) {
    if (std::none_of(out.begin(), out.end(), [&](const Value& o) { return Equals(o, item); })) {
      out.push_back(item);
    }
  }
  return Value::MakeList(std::move(out));
}
UC_FILTER(sum) {
  Params p("sum", a, {"attribute", "start"});
  Value total = p.has(1) ? p[1] : Value::Int(0);
  for (const Value& item : Iterate(v, "sum")) {
    const Value x = p.has(0) ? GetAttribute(item, RequireString(p[0], "attribute")) : item;
    if (!x.is_number() && !x.is_bool()) throw JinjaError("sum: cannot add " + x.TypeName());
    total = total.is_float() || x.is_float() ? Value::Float(total.as_double() + x.as_double())
                                             : Value::Int(CheckedAdd(total.as_int(), x.as_int()));
  }
  return total;
}
UC_FILTER(min) {
  Params p("min", a, {});
  List items = Iterate(v, "min");
  if (items.empty()) return Value::Undefined();
  return *std::min_element(items.begin(), items.end(), LessThan);
}
UC_FILTER(max) {
  Params p("max", a, {});
  List items = Iterate(v, "max");
  if (items.empty()) return Value::Undefined();
  return *std::max_element(items.begin(), items.end(), LessThan);
}
UC_FILTER(round) {
  Params p("round", a, {"precision", "method"});
  const int64_t precision = p.has(0) ? RequireInt(p[0], "precision") : 0;
  const std::string method = p.has(1) ? RequireString(p[1], "method") : "common";
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_double() * scale;
  const double r = method == "floor"  ? std::floor(x)
                   : method == "ceil" ? std::ceil(x)
                                      : std::round(x);
  return Value::Float(r / scale);
}
UC_FILTER(indent) {
  Params p("indent", a, {"width", "first", "blank"});
  // Python's " " * width: empty for a negative width.
  const int64_t width = p.has(0) && !p[0].is_string() ? RequireInt(p[0], "width") : 4;
  CheckStringBudget(static_cast<size_t>(std::max<int64_t>(width, 0)));
  const std::string pad = p.has(0) && p[0].is_string()
                              ? p[0].as_string()
                              : std::string(static_cast<size_t>(std::max<int64_t>(width, 0)), ' ');
  const std::string s = v.Str();
  std::string out;
  size_t pos = 0;
  bool first_line = true;
  while (pos <= s.size()) {
    const size_t nl = s.find('\n', pos);
    const std::string line = s.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    const bool blank = PythonStrip(line, true, true).empty();
    if ((!first_line || (p.has(1) && p[1].Truthy())) && (!blank || (p.has(2) && p[2].Truthy()))) {
      out += pad;
    }
    out += line;
    CheckStringBudget(out.size());
    first_line = false;
    if (nl == std::string::npos) break;
    out += '\n';
    pos = nl + 1;
  }
  return Value::String(out);
}

#undef UC_FILTER

const std::map<std::string, FilterFn, std::less<>>& Filters() {
  static const std::map<std::string, FilterFn, std::less<>> kFilters = {
      {"trim", Filter_trim},
      {"length", Filter_length},
      {"count", Filter_length},
      {"tojson", Filter_tojson},
      {"upper", Filter_upper},
      {"lower", Filter_lower},
      {"capitalize", Filter_capitalize},
      {"title", Filter_title},
      {"default", Filter_default},
      {"d", Filter_default},
      {"items", Filter_items},
      {"join", Filter_join},
      {"first", Filter_first},
      {"last", Filter_last},
      {"list", Filter_list},
      {"string", Filter_string},
      {"int", Filter_int},
      {"float", Filter_float},
      {"abs", Filter_abs},
      {"select", Filter_select},
      {"reject", Filter_reject},
      {"selectattr", Filter_selectattr},
      {"rejectattr", Filter_rejectattr},
      {"map", Filter_map},
      {"replace", Filter_replace},
      {"safe", Filter_safe},
      {"escape", Filter_escape},
      {"e", Filter_escape},
      {"reverse", Filter_reverse},
      {"sort", Filter_sort},
      {"unique", Filter_unique},
      {"sum", Filter_sum},
      {"min", Filter_min},
      {"max", Filter_max},
      {"round", Filter_round},
      {"indent", Filter_indent},
  };
  return kFilters;
}

// ------------------------------------------------------------------ tests

bool Test(const std::string& name, const Value& v, CallArgs& a) {
  auto arg = [&]() -> const Value& {
    if (a.positional.empty()) throw JinjaError("test '" + name + "' needs an argument");
    return a.positional[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number() || v.is_bool();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (name == "sequence") return v.is_string() || v.is_list() || v.is_dict();
  if (name == "callable") return v.is_callable() || v.is_undefined();  // as Jinja's Undefined
  if (name == "odd" || name == "even") {
    const int64_t i = RequireInt(v, "the tested value");
    return ((i % 2 + 2) % 2 == 1) == (name == "odd");
  }
  if (name == "divisibleby") {
    const int64_t d = RequireInt(arg(), "divisibleby's argument");
    if (d == 0) throw JinjaError("divisibleby 0");
    if (d == -1) return true;  // and the smallest int % -1 would overflow
    return RequireInt(v, "the tested value") % d == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return Equals(v, arg());
  if (name == "ne" || name == "!=") return !Equals(v, arg());
  if (name == "lt" || name == "lessthan" || name == "<") return LessThan(v, arg());
  if (name == "le" || name == "<=") return !LessThan(arg(), v);
  if (name == "gt" || name == "greaterthan" || name == ">") return LessThan(arg(), v);
  if (name == "ge" || name == ">=") return !LessThan(v, arg());
  if (name == "sameas") return Equals(v, arg()) && v.kind() == arg().kind();
  if (name == "lower" || name == "upper") {
    const std::string s = v.Str();
    const bool want_lower = name == "lower";
    bool cased = false;
    for (unsigned char c : s) {
      if (std::isalpha(c)) {
        cased = true;
        if (want_lower ? std::isupper(c) : std::islower(c)) return false;
      }
    }
    return cased;
  }
  if (name == "in") {
    const Value& container = arg();
    if (container.is_string()) return container.as_string().find(v.Str()) != std::string::npos;
    for (const Value& item : Iterate(container, "in")) {
      if (Equals(item, v)) return true;
    }
    return false;
  }
  throw JinjaError("unsupported test '" + name + "'");
}

const std::set<std::string, std::less<>>& TestNames() {
  static const std::set<std::string, std::less<>> kTests = {
      "defined",  "undefined", "none",   "boolean", "true",        "false",
      "integer",  "float",     "number", "string",  "mapping",     "iterable",
      "sequence", "callable",  "odd",    "even",    "divisibleby", "eq",
      "equalto",  "==",        "ne",     "!=",      "lt",          "lessthan",
      "<",        "le",        "<=",     "gt",      "greaterthan", ">",
      "ge",       ">=",        "sameas", "lower",   "upper",       "in"};
  return kTests;
}

// ------------------------------------------------------------------ methods

Value StringMethod(const std::string& s, const std::string& name) {
  auto bind = [&](auto fn) {
    return Value::MakeFunction("str." + name,
                               [s, name, fn](CallArgs& a) { return fn(s, name, a); });
  };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return bind([](const std::string& s, const std::string& name, CallArgs& a) {
      Params p(name, a, {"chars"});
      std::optional<std::string> chars;
      if (p.has(0) && !p[0].is_none()) chars = RequireString(p[0], "chars");
      return Value::String(PythonStrip(s, name != "rstrip", name != "lstrip", chars));
    });
  }
  if (name == "startswith" || name == "endswith") {
    return bind([](const std::string& s, const std::string& name, CallArgs& a) {
      Params p(name, a, {"prefix"});
      return Value::Bool(StartsOrEnds(s, p[0], name == "startswith"));
    });
  }
  if (name == "split") {
    return bind([](const std::string& s, const std::string& name, CallArgs& a) {
      Params p(name, a, {"sep", "maxsplit"});
      return Split(s, p[0], p.has(1) ? RequireInt(p[1], "maxsplit") : -1);
    });
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    return bind([](const std::string& s, const std::string& name, CallArgs& a) {
      Params p(name, a, {});
      if (name == "upper") return Value::String(AsciiMap(s, [](int c) { return std::toupper(c); }));
      if (name == "lower") return Value::String(AsciiMap(s, [](int c) { return std::tolower(c); }));
      if (name == "title") return Value::String(PythonTitle(s));
      return Value::String(Capitalize(s));
    });
  }
  if (name == "replace") {
    return bind([](const std::string& s, const std::string& name, CallArgs& a) {
      Params p(name, a, {"old", "new", "count"});
      return Value::String(Replace(s, RequireString(p[0], "old"), RequireString(p[1], "new"),
                                   p.has(2) ? RequireInt(p[2], "count") : -1));
    });
  }
  if (name == "find" || name == "count") {
    return bind([](const std::string& s, const std::string& name, CallArgs& a) {
      Params p(name, a, {"sub"});
      const std::string sub = RequireString(p[0], "sub");
      if (name == "find") {
        const size_t hit = s.find(sub);
        if (hit == std::string::npos) return Value::Int(-1);
        return Value::Int(static_cast<int64_t>(Utf8ToCodePoints(s.substr(0, hit)).size()));
      }
      if (sub.empty()) return Value::Int(static_cast<int64_t>(Utf8ToCodePoints(s).size()) + 1);
      int64_t n = 0;
      for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size()))
        ++n;
      return Value::Int(n);
    });
  }
  if (name == "join") {
    return bind([](const std::string& s, const std::string& name, CallArgs& a) {
      Params p(name, a, {"iterable"});
      std::string out;
      bool first = true;
      for (const Value& item : Iterate(p[0], "join")) {
        if (!first) out += s;
        first = false;
        out += RequireString(item, "join() item");
        CheckStringBudget(out.size());
      }
      return Value::String(out);
    });
  }
  if (name == "splitlines") {
    return bind([](const std::string& s, const std::string& name, CallArgs& a) {
      Params p(name, a, {});
      List lines;
      size_t pos = 0;
      while (pos < s.size()) {
        const size_t nl = s.find('\n', pos);
        if (nl == std::string::npos) {
          lines.push_back(Value::String(s.substr(pos)));
          break;
        }
        lines.push_back(Value::String(s.substr(pos, nl - pos)));
        pos = nl + 1;
      }
      return Value::MakeList(std::move(lines));
    });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isspace") {
    return bind([](const std::string& s, const std::string& name, CallArgs& a) {
      Params p(name, a, {});
      if (s.empty()) return Value::Bool(false);
      for (char32_t c : Utf8ToCodePoints(s)) {
        const bool ok = name == "isdigit"   ? (c >= '0' && c <= '9')
                        : name == "isalpha" ? ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')
                                            : IsPythonSpace(c);
        if (!ok) return Value::Bool(false);
      }
      return Value::Bool(true);
    });
  }
  return Value::Undefined();
}

Value DictMethod(const Value& dict, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    return Value::MakeFunction("dict." + name, [dict, name](CallArgs& a) {
      Params p(name, a, {});
      List out;
      for (const auto& [k, e] : dict.as_dict()) {
        if (name == "items") {
          out.push_back(Value::MakeList({Value::String(k), e}, true));
        } else {
          out.push_back(name == "keys" ? Value::String(k) : e);
        }
      }
      return Value::MakeList(std::move(out));
    });
  }
  if (name == "get") {
    return Value::MakeFunction("dict.get", [dict](CallArgs& a) {
      Params p("get", a, {"key", "default"});
      if (p[0].is_string()) {
        if (const Value* v = dict.Find(p[0].as_string())) return *v;
      }
      return p.has(1) ? p[1] : Value::None();
    });
  }
  return Value::Undefined();
}

}  // namespace

bool Builtins::IsFilter(std::string_view name) { return Filters().count(name) > 0; }

bool Builtins::IsTest(std::string_view name) { return TestNames().count(name) > 0; }

Value Builtins::ApplyFilter(const std::string& name, const Value& value, CallArgs& args) {
  auto it = Filters().find(name);
  if (it == Filters().end()) throw JinjaError("unsupported filter '" + name + "'");
  return it->second(value, args);
}

bool Builtins::ApplyTest(const std::string& name, const Value& value, CallArgs& args) {
  return Test(name, value, args);
}

Value Builtins::Method(const Value& value, const std::string& name) {
  if (value.is_string()) return StringMethod(value.as_string(), name);
  if (value.is_dict() && !value.is_namespace()) return DictMethod(value, name);
  return Value::Undefined();
}

std::vector<std::pair<std::string, Value>> Builtins::Globals(
    std::chrono::system_clock::time_point now) {
  std::vector<std::pair<std::string, Value>> globals;
  globals.emplace_back("raise_exception", Value::MakeFunction("raise_exception", [](CallArgs& a) {
                         JinjaError e(a.positional.empty() ? "" : a.positional[0].Str(), a.line);
                         e.set_raised();
                         throw e;
                         return Value::None();
                       }));
  globals.emplace_back("strftime_now", Value::MakeFunction("strftime_now", [now](CallArgs& a) {
                         Params p("strftime_now", a, {"format"});
                         const std::string format = RequireString(p[0], "format");
                         const std::time_t t = std::chrono::system_clock::to_time_t(now);
                         std::tm tm{};
                         localtime_r(&t, &tm);
                         char buf[256];
                         const size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &tm);
                         return Value::String(std::string(buf, n));
                       }));
  globals.emplace_back(
      "range", Value::MakeFunction("range", [](CallArgs& a) {
        if (!a.keyword.empty() || a.positional.empty() || a.positional.size() > 3) {
          throw JinjaError("range() takes 1 to 3 integer arguments");
        }
        int64_t start = 0, stop, step = 1;
        if (a.positional.size() == 1) {
          stop = RequireInt(a.positional[0], "range() stop");
        } else {
          start = RequireInt(a.positional[0], "range() start");
          stop = RequireInt(a.positional[1], "range() stop");
          if (a.positional.size() == 3) step = RequireInt(a.positional[2], "step");
        }
        if (step == 0) throw JinjaError("range() step must not be zero");
        List out;
        for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
          if (out.size() > 100000) throw JinjaError("range() too long");
          out.push_back(Value::Int(i));
          if (__builtin_add_overflow(i, step, &i)) break;  // past stop
        }
        return Value::MakeList(std::move(out));
      }));
  auto make_dict = [](CallArgs& a, bool as_namespace) {
    Dict items;
    for (const Value& v : a.positional) {
      if (!v.is_dict()) throw JinjaError("expected a mapping argument, got " + v.TypeName());
      for (const auto& kv : v.as_dict()) items.push_back(kv);
    }
    for (auto& [k, v] : a.keyword) {
      auto it = std::find_if(items.begin(), items.end(),
                             [&k = k](const auto& kv) { return kv.first == k; });
      if (it != items.end()) {
        it->second = v;
      } else {
        items.emplace_back(k, v);
      }
    }
    return as_namespace ? Value::MakeNamespace(std::move(items))
                        : Value::MakeDict(std::move(items));
  };
  globals.emplace_back("namespace", Value::MakeFunction("namespace", [make_dict](CallArgs& a) {
                         return make_dict(a, true);
                       }));
  globals.emplace_back("dict", Value::MakeFunction("dict", [make_dict](CallArgs& a) {
                         return make_dict(a, false);
                       }));
  return globals;
}

}  // namespace uc::chat::jinja
