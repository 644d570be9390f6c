// File: jinja_parser.h
// -----------------------------------------------------------------------------
// Lexes and parses Jinja template text into a syntax tree (jinja_ast.h), with the environment
// settings transformers uses for chat templates: trim_blocks, lstrip_blocks, loop controls
// (break/continue), no trailing newline kept, and its `{% generation %}` block.
//
// Supported statements: if/elif/else, for (tuple targets, `if` filter, else), set (name,
// tuple, namespace attribute, block form), macro, break, continue, generation. Anything else
// (include, import, extends, block, call, filter, with, raw, ...), an unknown filter or test, or
// a syntax error throws JinjaError naming the construct and the template line.
#pragma once

#include <string_view>

#include "chat/jinja_ast.h"

namespace uc::chat::jinja {

Body ParseTemplate(std::string_view text);

}  // namespace uc::chat::jinja
