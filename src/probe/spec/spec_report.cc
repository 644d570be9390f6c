#include "probe/spec/spec_report.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <regex>

#include "probe/spec/spec_util.h"

namespace uc::probe::internal {
namespace {

std::string JoinKeys(const std::vector<std::string_view>& keys) {
  std::string out;
  for (const std::string_view k : keys) out += (out.empty() ? "" : ", ") + std::string(k);
  return out;
}

}  // namespace

std::string UnknownKeyMessage(const MapEntry& e, const std::vector<std::string_view>& valid) {
  const bool is_string =
      e.key_node.IsScalar() && ResolveScalar(e.key_node).kind == ScalarKind::kString;
  return "unknown key " + (is_string ? PyQuote(e.key) : Describe(e.key_node)) + "." +
         (is_string ? DidYouMean(e.key, valid) : "") + " Valid keys: " + JoinKeys(valid) + ".";
}

std::vector<std::string> Reporter::Rendered(std::vector<Item> items) const {
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return (a.line == 0 ? INT_MAX : a.line) < (b.line == 0 ? INT_MAX : b.line);
  });
  std::vector<std::string> out;
  for (const Item& item : items) out.push_back(Render(item));
  return out;
}

std::vector<std::string> Reporter::RenderedStrictWarnings() const {
  std::vector<Item> strict;
  for (const Item& item : warnings_) {
    if (item.strict) strict.push_back(item);
  }
  return Rendered(std::move(strict));
}

std::string Reporter::Render(const Item& item) const {
  std::string prefix;
  if (!source_.empty()) {
    prefix = item.line > 0 ? source_ + ":" + std::to_string(item.line) : source_;
  } else if (item.line > 0) {
    prefix = "line " + std::to_string(item.line);
  }
  std::string out;
  for (const std::string* part :
       std::initializer_list<const std::string*>{&prefix, &item.where, &item.message}) {
    if (part->empty()) continue;
    if (!out.empty()) out += ": ";
    out += *part;
  }
  return out;
}

LaxInt::LaxInt(const YAML::Node& node) : got(Describe(node)) {
  problem = Problem::kType;
  if (!node.IsScalar()) return;
  const Scalar s = ResolveScalar(node);
  switch (s.kind) {
    case ScalarKind::kInt:
      if (s.int_overflow) {
        problem = Problem::kRange;
        return;
      }
      value = s.integer;
      break;
    case ScalarKind::kFloat:
      if (!std::isfinite(s.real)) return;
      if (s.real != std::floor(s.real)) {
        problem = Problem::kFraction;
        return;
      }
      if (std::fabs(s.real) >= 9.2e18) {
        problem = Problem::kRange;
        return;
      }
      value = static_cast<int64_t>(s.real);
      break;
    case ScalarKind::kString: {
      static const std::regex kLaxInt(
          R"([ \t\n\r\f\v]*([+-]?[0-9](?:_?[0-9])*)(?:\.0+)?[ \t\n\r\f\v]*)");
      std::smatch m;
      if (!std::regex_match(s.text, m, kLaxInt)) return;
      std::string digits;
      for (const char c : m[1].str()) {
        if (c != '_' && c != '+') digits += c;
      }
      int64_t v = 0;
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
      if (ec != std::errc() || end != digits.data() + digits.size()) {
        problem = Problem::kRange;
        return;
      }
      value = v;
      break;
    }
    case ScalarKind::kBool:
      problem = Problem::kBool;
      return;
    default:
      return;
  }
  problem = Problem::kNone;
}

std::string LaxInt::Message(std::string_view expected) const {
  std::string out = "expected " + std::string(expected) + " (got " + got;
  if (problem == Problem::kFraction) out += ", which has a fractional part";
  if (problem == Problem::kBool) {
    out += "; YAML reads unquoted yes/no/true/false/on/off as booleans";
  }
  return out + ")";
}

std::string BoundsMessage(const LaxInt& v, std::string_view name, int64_t min) {
  if (v.problem == LaxInt::Problem::kRange || (v.value.has_value() && *v.value > INT_MAX)) {
    return std::string(name) + " must be <= " + std::to_string(INT_MAX) + " (got " + v.got + ")";
  }
  if (v.value.has_value() && *v.value < min) {
    return std::string(name) + " must be >= " + std::to_string(min) + " (got " + v.got + ")";
  }
  return "";
}

}  // namespace uc::probe::internal
