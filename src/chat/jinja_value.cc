#include "chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

namespace uc::chat::jinja {

Value Value::Undefined(std::string name) {
  Value v;
  v.s_ = std::make_shared<const std::string>(std::move(name));
  return v;
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  v.i_ = b ? 1 : 0;
  return v;
}

Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}

Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}

Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::MakeList(List items, bool tuple) {
  Value v;
  v.kind_ = Kind::kList;
  v.tuple_ = tuple;
  v.list_ = std::make_shared<const List>(std::move(items));
  return v;
}

Value Value::MakeDict(Dict items) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<Dict>(std::move(items));
  return v;
}

Value Value::MakeNamespace(Dict items) {
  Value v = MakeDict(std::move(items));
  v.namespace_ = true;
  return v;
}

Value Value::MakeFunction(std::string name, Function fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.fn_ = std::make_shared<const std::pair<std::string, Function>>(std::move(name), std::move(fn));
  return v;
}

const std::string& Value::undefined_name() const {
  static const std::string kEmpty;
  return kind_ == Kind::kUndefined && s_ != nullptr ? *s_ : kEmpty;
}

const Value* Value::Find(std::string_view key) const {
  for (const auto& [k, v] : *dict_) {
    if (k == key) return &v;
  }
  return nullptr;
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0.0;
    case Kind::kString:
      return !s_->empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return namespace_ || !dict_->empty();
    case Kind::kCallable:
      return true;
  }
  return false;
}

namespace {

void AppendUtf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

void AppendHex(std::string& out, const char* prefix, unsigned value, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%s%0*x", prefix, digits, value);
  out += buf;
}

// Python's repr of a string: single quotes unless the text has ' and no ".
std::string StringRepr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : Utf8ToCodePoints(s)) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == static_cast<char32_t>(quote)) {
      out += '\\';
      out += quote;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) {
      AppendHex(out, "\\x", static_cast<unsigned>(c), 2);
    } else if (c == 0x2028 || c == 0x2029) {
      AppendHex(out, "\\u", static_cast<unsigned>(c), 4);
    } else {
      AppendUtf8(out, c);
    }
  }
  out += quote;
  return out;
}

void AppendJsonString(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          AppendHex(out, "\\u", c, 4);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void AppendNewlineIndent(std::string& out, int indent, int depth) {
  const size_t pad = static_cast<size_t>(indent) * static_cast<size_t>(depth);
  CheckStringBudget(out.size() + 1 + pad);
  out += '\n';
  out.append(pad, ' ');
}

}  // namespace

std::string Value::Repr() const {
  if (kind_ == Kind::kString) return StringRepr(*s_);
  return Str();
}

std::string Value::Str() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return b_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(i_);
    case Kind::kFloat:
      return PythonFloatRepr(f_);
    case Kind::kString:
      return *s_;
    case Kind::kList: {
      std::string out = tuple_ ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i > 0) out += ", ";
        out += (*list_)[i].Repr();
        CheckStringBudget(out.size());
      }
      if (tuple_ && list_->size() == 1) out += ",";
      out += tuple_ ? ")" : "]";
      return out;
    }
    case Kind::kDict: {
      std::string out = "{";
      for (size_t i = 0; i < dict_->size(); ++i) {
        if (i > 0) out += ", ";
        out += StringRepr((*dict_)[i].first) + ": " + (*dict_)[i].second.Repr();
        CheckStringBudget(out.size());
      }
      out += "}";
      return namespace_ ? "<Namespace " + out + ">" : out;
    }
    case Kind::kCallable:
      return "<function " + fn_->first + ">";
  }
  return "";
}

std::string Value::ToJson(int indent, bool sort_keys) const {
  std::string out;
  AppendJson(out, indent, 0, sort_keys);
  return out;
}

void Value::AppendJson(std::string& out, int indent, int depth, bool sort_keys) const {
  switch (kind_) {
    case Kind::kUndefined:
      throw JinjaError("tojson: the value is undefined");
    case Kind::kNone:
      out += "null";
      return;
    case Kind::kBool:
      out += b_ ? "true" : "false";
      return;
    case Kind::kInt:
      out += std::to_string(i_);
      return;
    case Kind::kFloat:
      if (std::isnan(f_)) {
        out += "NaN";
      } else if (std::isinf(f_)) {
        out += f_ > 0 ? "Infinity" : "-Infinity";
      } else {
        out += PythonFloatRepr(f_);
      }
      return;
    case Kind::kString:
      AppendJsonString(out, *s_);
      CheckStringBudget(out.size());
      return;
    case Kind::kList: {
      if (list_->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i > 0) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) AppendNewlineIndent(out, indent, depth + 1);
        (*list_)[i].AppendJson(out, indent, depth + 1, sort_keys);
        CheckStringBudget(out.size());
      }
      if (indent >= 0) AppendNewlineIndent(out, indent, depth);
      out += ']';
      return;
    }
    case Kind::kDict: {
      if (dict_->empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& item : *dict_) items.push_back(&item);
      if (sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) AppendNewlineIndent(out, indent, depth + 1);
        AppendJsonString(out, items[i]->first);
        out += ": ";
        items[i]->second.AppendJson(out, indent, depth + 1, sort_keys);
        CheckStringBudget(out.size());
      }
      if (indent >= 0) AppendNewlineIndent(out, indent, depth);
      out += '}';
      return;
    }
    case Kind::kCallable:
      throw JinjaError("tojson: a function is not JSON serializable");
  }
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return tuple_ ? "tuple" : "list";
    case Kind::kDict:
      return namespace_ ? "Namespace" : "dict";
    case Kind::kCallable:
      return "function";
  }
  return "?";
}

bool Equals(const Value& a, const Value& b) {
  using Kind = Value::Kind;
  const bool a_num = a.is_number() || a.is_bool();
  const bool b_num = b.is_number() || b.is_bool();
  if (a_num && b_num) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return a.as_string() == b.as_string();
    case Kind::kList: {
      if (a.is_tuple() != b.is_tuple()) return false;
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!Equals(x[i], y[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      if (a.is_namespace() || b.is_namespace()) return &a.as_dict() == &b.as_dict();
      const Dict& x = a.as_dict();
      if (x.size() != b.as_dict().size()) return false;
      for (const auto& [k, v] : x) {
        const Value* other = b.Find(k);
        if (other == nullptr || !Equals(v, *other)) return false;
      }
      return true;
    }
    case Kind::kCallable:
      return a.function_name() == b.function_name();
    default:
      return false;
  }
}

bool LessThan(const Value& a, const Value& b) {
  const bool a_num = a.is_number() || a.is_bool();
  const bool b_num = b.is_number() || b.is_bool();
  if (a_num && b_num) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list() && b.is_list()) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (LessThan(x[i], y[i])) return true;
      if (LessThan(y[i], x[i])) return false;
    }
    return x.size() < y.size();
  }
  throw JinjaError("'<' not supported between instances of '" + a.TypeName() + "' and '" +
                   b.TypeName() + "'");
}

std::u32string Utf8ToCodePoints(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > text.size()) {
      out += U'\uFFFD';
      ++i;
      continue;
    }
    char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    bool ok = true;
    for (int k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      if ((cc & 0xC0) != 0x80) {
        ok = false;
        break;
      }
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) {
      out += U'\uFFFD';
      ++i;
      continue;
    }
    out += cp;
    i += len;
  }
  return out;
}

std::string CodePointsToUtf8(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (char32_t c : code_points) AppendUtf8(out, c);
  return out;
}

bool IsPythonSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

std::string PythonStrip(std::string_view text, bool left, bool right,
                        const std::optional<std::string>& chars) {
  const std::u32string cps = Utf8ToCodePoints(text);
  const std::u32string set = chars.has_value() ? Utf8ToCodePoints(*chars) : std::u32string();
  auto strip = [&](char32_t c) {
    return chars.has_value() ? set.find(c) != std::u32string::npos : IsPythonSpace(c);
  };
  size_t begin = 0, end = cps.size();
  if (left) {
    while (begin < end && strip(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strip(cps[end - 1])) --end;
  }
  // Fast path keeps the original bytes when nothing changed.
  if (begin == 0 && end == cps.size()) return std::string(text);
  return CodePointsToUtf8(std::u32string_view(cps).substr(begin, end - begin));
}

std::string PythonFloatRepr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (value == 0.0) return std::signbit(value) ? "-0.0" : "0.0";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  const std::string sci(buf, res.ptr);  // "-d.ddde+XX", shortest round-trip digits
  const size_t e = sci.find('e');
  const bool negative = sci[0] == '-';
  std::string digits;
  for (size_t i = negative ? 1 : 0; i < e; ++i) {
    if (sci[i] != '.') digits += sci[i];
  }
  const int exponent = std::stoi(sci.substr(e + 1));
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exponent + 1) {
      out += digits + std::string(static_cast<size_t>(exponent + 1) - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp_buf;
}

namespace {

thread_local int64_t g_string_budget = std::numeric_limits<int64_t>::max();

}  // namespace

void CheckStringBudget(size_t bytes) {
  if (bytes > static_cast<uint64_t>(g_string_budget)) {
    throw BudgetError("a string grew past its budget of " + std::to_string(g_string_budget) +
                      " bytes");
  }
}

ScopedStringBudget::ScopedStringBudget(int64_t max_bytes) : saved_(g_string_budget) {
  g_string_budget = std::max<int64_t>(max_bytes, 0);
}

ScopedStringBudget::~ScopedStringBudget() { g_string_budget = saved_; }

namespace {

[[noreturn]] void ThrowOverflow(int64_t a, const char* op, int64_t b) {
  throw JinjaError("integer overflow in " + std::to_string(a) + " " + op + " " + std::to_string(b) +
                   ": the result does not fit in 64 bits");
}

}  // namespace

int64_t CheckedAdd(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) ThrowOverflow(a, "+", b);
  return r;
}

int64_t CheckedSub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) ThrowOverflow(a, "-", b);
  return r;
}

int64_t CheckedMul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) ThrowOverflow(a, "*", b);
  return r;
}

int64_t FloatToInt(double d) {
  // [-2^63, 2^63): both bounds are exact doubles.
  if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) {
    char text[32];
    std::snprintf(text, sizeof(text), "%g", d);
    throw JinjaError(std::string("integer overflow: ") + text + " does not fit in 64 bits");
  }
  return static_cast<int64_t>(d);
}

}  // namespace uc::chat::jinja
