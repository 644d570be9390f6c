// The Jinja subset against Jinja2 itself: tests/testdata/chat_templates/jinja_cases.json holds
// small templates, one language feature each, rendered by transformers' chat-template
// environment (tools/reference/chat_templates.py). Then the errors: every unsupported construct
// and syntax error is named with its template line.
#include "chat/jinja.h"

#include <gtest/gtest.h>

#include <ctime>
#include <fstream>

namespace uc::chat::jinja {
namespace {

// The local time the reference data pinned strftime_now() to ("2024-07-26T12:00:00").
std::chrono::system_clock::time_point LocalTime(const std::string& iso) {
  std::tm tm{};
  std::sscanf(iso.c_str(), "%d-%d-%dT%d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
              &tm.tm_min, &tm.tm_sec);
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  tm.tm_isdst = -1;
  return std::chrono::system_clock::from_time_t(std::mktime(&tm));
}

nlohmann::ordered_json LoadCases() {
  std::ifstream in(std::string(UC_SOURCE_DIR) + "/tests/testdata/chat_templates/jinja_cases.json");
  return nlohmann::ordered_json::parse(in);
}

// Renders `text`; "PARSE ERROR: ..." or "RENDER ERROR: ..." on failure.
std::string Render(const std::string& text, const nlohmann::ordered_json& variables = {}) {
  StatusOr<Template> t = Template::Parse(text);
  if (!t.ok()) return "PARSE ERROR: " + t.status().message();
  std::vector<std::pair<std::string, Value>> vars;
  if (variables.is_object()) {
    for (const auto& [k, v] : variables.items()) vars.emplace_back(k, Value::FromJson(v));
  }
  StatusOr<std::string> out = t->Render(vars, LocalTime("2024-07-26T12:00:00"));
  if (!out.ok()) return "RENDER ERROR: " + out.status().message();
  return *out;
}

TEST(JinjaTest, MatchesJinja2OnEveryFeatureCase) {
  const nlohmann::ordered_json doc = LoadCases();
  ASSERT_GE(doc["cases"].size(), 50u);
  for (const auto& c : doc["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>() + ": " + c["template"].get<std::string>());
    const std::string got = Render(c["template"], c["variables"]);
    if (c.contains("error")) {
      EXPECT_NE(got.find("ERROR: "), std::string::npos) << got;
    } else {
      EXPECT_EQ(got, c["output"].get<std::string>());
    }
  }
}

TEST(JinjaTest, RaiseExceptionIsReportedAsSuch) {
  StatusOr<Template> t =
      Template::Parse("a\n{% if true %}{{ raise_exception('Bad: ' ~ 2) }}{% endif %}");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  RenderError error;
  StatusOr<std::string> out = t->Render({}, std::chrono::system_clock::now(), &error);
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(error.raised_exception);
  EXPECT_EQ(out.status().message(), "Bad: 2");
}

// Ints are 64-bit: a result that does not fit is an error, never a wrapped value (found by
// fuzz_chat_template).
TEST(JinjaTest, IntegerOverflowIsAnError) {
  EXPECT_EQ(Render("{{ 2 ** 62 }} {{ (-2) ** 63 }} {{ (-1) ** 65 }} {{ 1 ** 100 }}"),
            "4611686018427387904 -9223372036854775808 -1 1");
  EXPECT_EQ(Render("{{ 2 ** 100 }}"),
            "RENDER ERROR: line 1: integer overflow in 4611686018427387904 * 2: the result does "
            "not fit in 64 bits");
  EXPECT_EQ(Render("\n{{ 9223372036854775807 + 1 }}"),
            "RENDER ERROR: line 2: integer overflow in 9223372036854775807 + 1: the result does "
            "not fit in 64 bits");
  for (const char* text :
       {"{{ -(-9223372036854775807 - 1) }}", "{{ (-9223372036854775807 - 1) // -1 }}",
        "{{ (-9223372036854775807 - 1) | abs }}", "{{ [9223372036854775807, 1] | sum }}",
        "{{ 4294967296 * 4294967296 }}", "{{ 1e300 | int }}", "{{ '1e300' | int }}"}) {
    EXPECT_NE(Render(text).find("RENDER ERROR: line 1: integer overflow"), std::string::npos)
        << text;
  }
  EXPECT_EQ(Render("{{ (-9223372036854775807 - 1) % -1 }} {{ 5 is divisibleby(-1) }}"), "0 True");
  EXPECT_EQ(Render("{{ range(9223372036854775806, 9223372036854775807, 5) | list }}"),
            "[9223372036854775806]");
  EXPECT_EQ(Render("{{ 'abc'[1::9223372036854775807] }}|{{ 'ab' | indent(-3, true) }}"), "b|ab");
}

// Text built from one shared string (a list of a million references to it) is checked as it
// grows, not after: join, replace, indent, printing and tojson stop at the string budget
// (found by fuzz_chat_template).
TEST(JinjaTest, TextBuiltFromSharedValuesStaysWithinTheBudget) {
  const std::string big = "{% set s = 'xxxxxxxxxx' * 100000 %}{% set l = [s] * 100000 %}";
  for (const char* expr :
       {"{{ l | join }}", "{{ ''.join(l) }}", "{{ l }}", "{{ l | string }}", "{{ l | tojson }}",
        "{{ l | tojson(indent=2) }}", "{{ (s ~ '\\n') | indent(100000000) }}",
        "{{ ('\\n' * 1000000) | indent(1000, true, true) }}",
        "{{ s | replace('x', 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx') }}"}) {
    EXPECT_EQ(Render(big + expr), "RENDER ERROR: line 1: a string grew past its budget of " +
                                      std::to_string(16 << 20) + " bytes")
        << expr;
  }
}

TEST(JinjaTest, UnsupportedConstructsNameTheConstructAndLine) {
  EXPECT_EQ(Render("{% include 'other.jinja' %}"),
            "PARSE ERROR: line 1: unsupported construct '{% include %}'");
  EXPECT_EQ(Render("a\nb\n{% for m in messages %}\n{{ m | wordwrap(10) }}\n{% endfor %}"),
            "PARSE ERROR: line 4: unsupported filter 'wordwrap'");
  EXPECT_EQ(Render("{% if x is prime %}{% endif %}"),
            "PARSE ERROR: line 1: unsupported test 'prime'");
  EXPECT_EQ(Render("\n{% extends 'base' %}"),
            "PARSE ERROR: line 2: unsupported construct '{% extends %}'");
  EXPECT_EQ(Render("{% raw %}x{% endraw %}"),
            "PARSE ERROR: line 1: unsupported construct '{% raw %}'");
  EXPECT_EQ(Render("{% call foo() %}x{% endcall %}"),
            "PARSE ERROR: line 1: unsupported construct '{% call %}'");
  EXPECT_EQ(Render("{% filter upper %}x{% endfilter %}"),
            "PARSE ERROR: line 1: unsupported construct '{% filter %}'");
  EXPECT_EQ(Render("{% for x in xs recursive %}{% endfor %}"),
            "PARSE ERROR: line 1: unsupported construct 'recursive' for loop");
  EXPECT_EQ(Render("{{ f(*args) }}"),
            "PARSE ERROR: line 1: unsupported construct '*args' / '**kwargs' in a call");
  EXPECT_EQ(Render("x\n\n{{ '%s!' % name }}", {{"name", "n"}}),
            "RENDER ERROR: line 3: unsupported construct: string formatting with '%'");
  EXPECT_EQ(Render("{{ xs | tojson(separators=(',', ':')) }}", {{"xs", {1}}}),
            "RENDER ERROR: line 1: unsupported construct 'tojson(separators=...)'");
}

TEST(JinjaTest, SyntaxErrorsNameTheLine) {
  EXPECT_EQ(Render("{% if x %}\nno end"),
            "PARSE ERROR: line 1: '{% if %}' is never closed (missing {% endif %})");
  EXPECT_EQ(Render("ok\n{{ x"), "PARSE ERROR: line 2: unclosed '{{' tag (missing '}}')");
  EXPECT_EQ(Render("{{ 1 + }}"),
            "PARSE ERROR: line 1: expected an expression at the end of the tag");
  EXPECT_EQ(Render("{% for x %}{% endfor %}"),
            "PARSE ERROR: line 1: expected 'in' in the for statement at the end of the tag");
  EXPECT_EQ(Render("{% endfor %}"),
            "PARSE ERROR: line 1: unexpected '{% endfor %}' (nothing to close)");
  EXPECT_EQ(Render("{% frobnicate %}"),
            "PARSE ERROR: line 1: unknown statement '{% frobnicate %}'");
  EXPECT_EQ(Render("{% break %}"), "PARSE ERROR: line 1: 'break' outside a for loop");
  EXPECT_EQ(Render("a\n{% for x in y %}{% if x %}\n{% endfor %}"),
            "PARSE ERROR: line 3: unexpected '{% endfor %}': '{% if %}' on line 2 is still open "
            "(expected {% endif %})");
  EXPECT_EQ(Render("{{ 'abc }}"), "PARSE ERROR: line 1: unclosed '{{' tag (missing '}}')");
}

TEST(JinjaTest, RenderErrorsNameTheLine) {
  EXPECT_EQ(Render("a\n{{ missing_function('x') }}"),
            "RENDER ERROR: line 2: 'missing_function' is undefined");
  EXPECT_EQ(Render("{{ 1 + 'a' }}"),
            "RENDER ERROR: line 1: unsupported operand type(s) for +: 'int' and 'str'");
  EXPECT_EQ(Render("{{ m.content.x }}"), "RENDER ERROR: line 1: 'm' is undefined");
  EXPECT_EQ(Render("{% set x = 1 %}{% set x.y = 2 %}"),
            "RENDER ERROR: line 1: cannot assign attribute 'y' on 'x', which is not a namespace()");
  EXPECT_EQ(Render("{% for x in n %}{% endfor %}", {{"n", nullptr}}),
            "RENDER ERROR: line 1: 'NoneType' object is not iterable");
  EXPECT_EQ(Render("{{ 'a'.strip(1, 2) }}"),
            "RENDER ERROR: line 1: strip() takes at most 1 argument(s) (2 given)");
}

TEST(JinjaTest, HostileTemplatesFailInsteadOfCrashing) {
  EXPECT_EQ(Render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"),
            "RENDER ERROR: line 1: macro 'f' nests deeper than 64 calls (unbounded recursion?)");
  EXPECT_EQ(Render("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}"),
            "PARSE ERROR: line 1: expression nested too deeply");
  EXPECT_EQ(Render("{{ " + std::string(5000, '[') + std::string(5000, ']') + " }}"),
            "PARSE ERROR: line 1: expression nested too deeply");
  EXPECT_EQ(Render("{{ " + std::string(5000, '-') + "1 }}"),
            "PARSE ERROR: line 1: expression too long (over 1000 operators)");
  std::string sum = "1";
  for (int i = 0; i < 5000; ++i) sum += " + 1";
  EXPECT_EQ(Render("{{ " + sum + " }}"),
            "PARSE ERROR: line 1: expression too long (over 1000 operators)");
  std::string nested;
  for (int i = 0; i < 5000; ++i) nested += "{% if true %}";
  EXPECT_EQ(Render(nested), "PARSE ERROR: line 1: statements nested too deeply");
}

TEST(JinjaTest, PythonFloatRepr) {
  EXPECT_EQ(PythonFloatRepr(2.0), "2.0");
  EXPECT_EQ(PythonFloatRepr(0.1), "0.1");
  EXPECT_EQ(PythonFloatRepr(1e16), "1e+16");
  EXPECT_EQ(PythonFloatRepr(1.5e-7), "1.5e-07");
  EXPECT_EQ(PythonFloatRepr(123456789012345.6), "123456789012345.6");
  EXPECT_EQ(PythonFloatRepr(-0.00012), "-0.00012");
}

}  // namespace
}  // namespace uc::chat::jinja

namespace uc::chat::jinja {
namespace {

StatusOr<std::string> RenderWithin(const std::string& text, const RenderLimits& limits) {
  StatusOr<Template> t = Template::Parse(text);
  if (!t.ok()) return t.status();
  return t->Render({}, std::chrono::system_clock::now(), nullptr, limits);
}

// Hostile or runaway templates fail within their budgets (ResourceExhausted, with the line),
// in bounded time and memory: nested loops that would run 10^10 times, a string doubled in a
// loop, repetition of a repetition. Real templates stay far inside the defaults.
TEST(JinjaBudgetTest, RunawayTemplatesFailWithinTheirBudgets) {
  const auto started = std::chrono::steady_clock::now();
  struct Case {
    std::string text;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
       "line 1: the template ran past its budget of 5000000 steps"},
      {"{% set ns = namespace(s='x') %}\n{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}"
       "{% endfor %}{{ ns.s }}",
       "line 2: a string grew past its budget of 16777216 bytes"},
      {"{{ ('x' * 100000) * 100000 }}", "a string repeated would grow past its budget"},
      {"{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}",
       "the rendered text grew past its budget of 16777216 bytes"},
      {"{% set l = [1] * 100000 %}{{ (l * 100) | length }}",
       "a list repeated would grow past its budget of 1000000 items"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    const StatusOr<std::string> out = RenderWithin(c.text, RenderLimits());
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.status().code(), StatusCode::kResourceExhausted) << out.status().message();
    EXPECT_NE(out.status().message().find(c.message), std::string::npos) << out.status().message();
  }
  // Without the budgets the first case alone would run 10^10 iterations (hours); with them all
  // of them take seconds, or about a minute under AddressSanitizer and UBSan at -O0.
#if defined(__SANITIZE_ADDRESS__)
  constexpr auto kBound = std::chrono::seconds(240);
#else
  constexpr auto kBound = std::chrono::seconds(60);
#endif
  EXPECT_LT(std::chrono::steady_clock::now() - started, kBound);
  // Small budgets bound ordinary templates too; within them the output is unchanged.
  RenderLimits tight;
  tight.max_steps = 40;
  EXPECT_EQ(RenderWithin("{% for i in range(3) %}{{ i }}{% endfor %}", tight).value(), "012");
  EXPECT_EQ(RenderWithin("{% for i in range(30) %}{{ i }}{% endfor %}", tight).status().code(),
            StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace uc::chat::jinja
