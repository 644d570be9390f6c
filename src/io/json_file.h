// File: json_file.h
// -----------------------------------------------------------------------------
// JSON documents (config.json, tokenizer.json, safetensors headers, index files) parsed with
// nlohmann::json into a Status instead of an exception. Parse errors name the source and the
// line and column of the offending character:
//
//   ".../config.json: JSON parse error at line 3, column 17 (byte 41): syntax error ..."
//
// Nesting deeper than kMaxJsonDepth is rejected before parsing, so hostile input cannot
// exhaust the stack. Stateless functions; thread-safe.
#pragma once

#include <cstddef>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>

#include "base/status.h"

namespace uc::io {

// JSON nests at most this deep (every document and request body we take needs fewer than 10).
inline constexpr int kMaxJsonDepth = 256;

// The byte offset at which `text` first nests arrays and objects deeper than `max_depth`, or
// npos when it never does. A linear scan that allocates nothing (strings and escapes are
// skipped), run before the JSON parser so that a deeply nested body costs time in proportion
// to the bytes read up to that point and no memory. Malformed JSON is left to the parser.
size_t JsonDepthExceededAt(std::string_view text, int max_depth = kMaxJsonDepth);

// Parses `text`; `source` (a file name, "FILE: safetensors header") prefixes every error.
StatusOr<nlohmann::json> ParseJson(std::string_view text, std::string_view source);

// Reads and parses the file at `path`. NotFound if it does not exist.
StatusOr<nlohmann::json> ReadJsonFile(const std::filesystem::path& path);

}  // namespace uc::io
