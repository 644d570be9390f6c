// File: jinja_value.h
// -----------------------------------------------------------------------------
// The values a Jinja template computes with, with Python's semantics as Jinja2 (the engine
// behind Hugging Face chat templates) has them: undefined, none, booleans, 64-bit integers,
// floats, strings (UTF-8; lengths, indices and slices count code points as Python does), lists
// and tuples, dicts (insertion-ordered, string keys), namespaces (the one mutable object) and
// callables (globals, bound methods, macros).
//
// Printing follows Python's str()/repr() (`{{ [1, 'a', None] }}` prints "[1, 'a', None]",
// `{{ 2.0 }}` prints "2.0"); ToJson follows transformers' tojson (json.dumps with
// ensure_ascii=False). Lists and dicts are shared and never modified after construction, so
// copies are cheap. Errors inside the engine are JinjaError exceptions; they never leave the
// chat library (Template::Render turns them into a Status).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace uc::chat::jinja {

// A template error: what went wrong and on which template line (0: unknown yet).
class JinjaError : public std::runtime_error {
 public:
  JinjaError(std::string message, int line = 0)
      : std::runtime_error(message), message_(std::move(message)), line_(line) {}
  const std::string& message() const { return message_; }
  int line() const { return line_; }
  void set_line(int line) { line_ = line; }
  // True for raise_exception(): the template rejected its input on purpose.
  bool raised() const { return raised_; }
  void set_raised() { raised_ = true; }

 private:
  std::string message_;
  int line_;
  bool raised_ = false;
};

// A render budget ran out (RenderLimits): reported as ResourceExhausted, not as a template
// error.
class BudgetError : public JinjaError {
 public:
  using JinjaError::JinjaError;
};

// The longest string the render running on this thread may build (its
// RenderLimits::max_output_bytes; unlimited outside a render). What turns a value into text
// (Str, ToJson) and the builtins whose output can outgrow their inputs many times over (join,
// replace, indent) check it as they build, so a template that would make gigabytes of text from a
// list of one shared string fails before it allocates them: BudgetError.
void CheckStringBudget(size_t bytes);
class ScopedStringBudget {
 public:
  explicit ScopedStringBudget(int64_t max_bytes);
  ~ScopedStringBudget();
  ScopedStringBudget(const ScopedStringBudget&) = delete;
  ScopedStringBudget& operator=(const ScopedStringBudget&) = delete;

 private:
  int64_t saved_;
};

// Template ints are 64-bit where Python's are unbounded: arithmetic whose result does not fit
// fails with JinjaError "integer overflow in A OP B" instead of wrapping (undefined behaviour).
int64_t CheckedAdd(int64_t a, int64_t b);
int64_t CheckedSub(int64_t a, int64_t b);
int64_t CheckedMul(int64_t a, int64_t b);
// A float truncated to an int (int(x), |int); JinjaError when it is infinite or out of range.
// REQUIRES: !isnan(d).
int64_t FloatToInt(double d);

class Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order, unique keys

// Arguments of a call: positional, then keyword.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  int line = 0;
};
using Function = std::function<Value(CallArgs& args)>;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };

  Value() = default;  // undefined
  static Value Undefined(std::string name = "");
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string s);
  static Value MakeList(List items, bool tuple = false);
  static Value MakeDict(Dict items);
  // A namespace(): a dict whose attributes `{% set ns.x = ... %}` may assign.
  static Value MakeNamespace(Dict items);
  static Value MakeFunction(std::string name, Function fn);
  // Converts JSON; objects keep the key order of the JSON type (nlohmann::ordered_json keeps
  // the document's order, nlohmann::json sorts keys).
  template <typename Json>
  static Value FromJson(const Json& json);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float(); }  // booleans excluded, as Jinja's test
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }  // lists and tuples
  bool is_tuple() const { return is_list() && tuple_; }
  bool is_dict() const { return kind_ == Kind::kDict; }  // dicts and namespaces
  bool is_namespace() const { return is_dict() && namespace_; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  // REQUIRES: the matching kind.
  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }
  double as_double() const { return is_float() ? f_ : static_cast<double>(i_); }
  const std::string& as_string() const { return *s_; }
  const List& as_list() const { return *list_; }
  const Dict& as_dict() const { return *dict_; }
  Dict& mutable_namespace() const { return *dict_; }  // REQUIRES: is_namespace()
  const std::string& function_name() const { return fn_->first; }
  Value Call(CallArgs& args) const { return fn_->second(args); }
  // The variable name an undefined value stands for ("" if none), for messages.
  const std::string& undefined_name() const;

  // Dict lookup; nullptr if absent. REQUIRES: is_dict().
  const Value* Find(std::string_view key) const;

  // Python truthiness (undefined is false).
  bool Truthy() const;
  // Python str(): what `{{ value }}` prints. Undefined prints "".
  std::string Str() const;
  // Python repr() (strings quoted), used inside containers.
  std::string Repr() const;
  // json.dumps(value, ensure_ascii=False, indent=indent, sort_keys=sort_keys); indent < 0: none.
  std::string ToJson(int indent = -1, bool sort_keys = false) const;
  // "string", "int", "list", ... as Python names them, for error messages.
  std::string TypeName() const;

 private:
  void AppendJson(std::string& out, int indent, int depth, bool sort_keys) const;

  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool tuple_ = false;
  bool namespace_ = false;
  int64_t i_ = 0;
  double f_ = 0.0;
  std::shared_ptr<const std::string> s_;  // string value, or the undefined name
  std::shared_ptr<const List> list_;
  std::shared_ptr<Dict> dict_;  // mutable only through a namespace
  std::shared_ptr<const std::pair<std::string, Function>> fn_;
};

template <typename Json>
Value Value::FromJson(const Json& json) {
  if (json.is_null()) return None();
  if (json.is_boolean()) return Bool(json.template get<bool>());
  if (json.is_number_unsigned()) return Int(static_cast<int64_t>(json.template get<uint64_t>()));
  if (json.is_number_integer()) return Int(json.template get<int64_t>());
  if (json.is_number_float()) return Float(json.template get<double>());
  if (json.is_string()) return String(json.template get<std::string>());
  if (json.is_array()) {
    List items;
    items.reserve(json.size());
    for (const auto& e : json) items.push_back(FromJson(e));
    return MakeList(std::move(items));
  }
  if (json.is_object()) {
    Dict items;
    items.reserve(json.size());
    for (auto it = json.begin(); it != json.end(); ++it)
      items.emplace_back(it.key(), FromJson(*it));
    return MakeDict(std::move(items));
  }
  return None();
}

// Python ==: numbers by value (1 == 1.0), containers element-wise; undefined equals undefined.
bool Equals(const Value& a, const Value& b);
// Python <: numbers, strings (by code point), lists lexicographically. Throws JinjaError for
// other combinations.
bool LessThan(const Value& a, const Value& b);

// ------------------------------------------------------------------ UTF-8 strings as Python's

// The code points of UTF-8 text (invalid bytes map to U+FFFD).
std::u32string Utf8ToCodePoints(std::string_view text);
std::string CodePointsToUtf8(std::u32string_view code_points);
// Python's str.isspace() for one code point.
bool IsPythonSpace(char32_t c);
// str.strip / lstrip / rstrip with Python's whitespace, or the given characters.
std::string PythonStrip(std::string_view text, bool left, bool right,
                        const std::optional<std::string>& chars = std::nullopt);
// Python's repr of a float ("2.0", "1e-05", "1e+16", "nan", "inf").
std::string PythonFloatRepr(double value);

}  // namespace uc::chat::jinja
