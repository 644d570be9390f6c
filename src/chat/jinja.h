// File: jinja.h
// -----------------------------------------------------------------------------
// A Jinja2 subset: enough of the language to render the chat templates models ship (Llama-2/3,
// Mistral, Qwen2, ChatML, ...) exactly as transformers' apply_chat_template does. The parser
// and the statements and filters it knows are listed in jinja_parser.h and jinja_builtins.h.
//
//   UC_ASSIGN_OR_RETURN(jinja::Template t, jinja::Template::Parse(text));
//   UC_ASSIGN_OR_RETURN(std::string out, t.Render({{"messages", messages}, ...}));
//
// Errors are Status values, never exceptions: InvalidArgument "line N: MESSAGE" for syntax
// errors and unsupported constructs (at Parse) and for failures while rendering; a template
// that calls raise_exception(MSG) gives InvalidArgument whose message is MSG alone, with
// raised_exception() telling the two apart.
//
// A Template is immutable after Parse and may be rendered from many threads at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "chat/jinja_value.h"

namespace uc::chat::jinja {

struct Node;

// What one render may spend. A template comes from a model's files or the command line, and a
// request's messages feed it: an unbounded loop or a string doubled in a loop must fail within
// the budget, never hang the caller or exhaust memory.
struct RenderLimits {
  int64_t max_steps = 5'000'000;        // statements and expressions evaluated
  int64_t max_output_bytes = 16 << 20;  // the rendered text, and any one string value
  int64_t max_list_items = 1'000'000;   // any one list value
};

// The outcome of a failed render, beyond its Status.
struct RenderError {
  Status status;
  bool raised_exception = false;  // the template called raise_exception()
};

class Template {
 public:
  static StatusOr<Template> Parse(std::string_view text);

  // Renders with `variables` (on top of the globals raise_exception, strftime_now, range,
  // namespace, dict); strftime_now() reads `now`. On failure returns the error and, when
  // `error` is not null, fills it in.
  // Past a budget of `limits` the render fails with ResourceExhausted naming the budget.
  StatusOr<std::string> Render(
      const std::vector<std::pair<std::string, Value>>& variables,
      std::chrono::system_clock::time_point now = std::chrono::system_clock::now(),
      RenderError* error = nullptr, const RenderLimits& limits = RenderLimits()) const;

 private:
  std::shared_ptr<const std::vector<std::unique_ptr<Node>>> root_;
};

}  // namespace uc::chat::jinja
