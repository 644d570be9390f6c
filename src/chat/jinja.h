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
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "chat/jinja_value.h"

namespace uc::chat::jinja {

struct Node;

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
  StatusOr<std::string> Render(
      const std::vector<std::pair<std::string, Value>>& variables,
      std::chrono::system_clock::time_point now = std::chrono::system_clock::now(),
      RenderError* error = nullptr) const;

 private:
  std::shared_ptr<const std::vector<std::unique_ptr<Node>>> root_;
};

}  // namespace uc::chat::jinja
