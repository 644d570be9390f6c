// File: builtin_templates.h
// -----------------------------------------------------------------------------
// Chat templates built into the binary, for GGUF files that do not carry their own: the Gemma 3
// 270M GGUF of scripts/fetch-gemma3.sh has no tokenizer.chat_template, while Gemma 3 models on
// the Hugging Face hub ship one template in their tokenizer_config.json.
//
//   std::string_view text = BuiltinChatTemplate("gemma3");  // "" when there is none
//
// Each text is byte-identical to the model's tokenizer_config.json "chat_template" and to the
// copy under tests/testdata/chat_templates/ that the reference renders were made with
// (gemma-3-it.jinja). Stateless; thread-safe.
#pragma once

#include <string_view>

namespace uc::chat {

// The template for GGUF `general.architecture` `architecture` ("gemma3"), or "" if none is
// built in.
std::string_view BuiltinChatTemplate(std::string_view architecture);

}  // namespace uc::chat
