// File: jinja_builtins.h
// -----------------------------------------------------------------------------
// Jinja's built-in filters and tests, the Python methods templates call on strings, lists and
// dicts (`content.strip()`, `d.items()`, ...), and the globals transformers provides
// (raise_exception, strftime_now, range, namespace, dict). Internal to the chat library; errors
// are JinjaError.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja_value.h"

namespace uc::chat::jinja {

// Calls a filter or test that may itself call a test (select, reject, ...).
class Builtins {
 public:
  static bool IsFilter(std::string_view name);
  static bool IsTest(std::string_view name);

  // value | name(args)
  static Value ApplyFilter(const std::string& name, const Value& value, CallArgs& args);
  // value is name(args)
  static bool ApplyTest(const std::string& name, const Value& value, CallArgs& args);
  // value.name, for strings, lists and dicts: a bound method, or undefined when there is none.
  static Value Method(const Value& value, const std::string& name);
  // The global functions, with strftime_now reading `now`.
  static std::vector<std::pair<std::string, Value>> Globals(
      std::chrono::system_clock::time_point now);
};

}  // namespace uc::chat::jinja
