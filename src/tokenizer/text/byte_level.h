// File: byte_level.h
// -----------------------------------------------------------------------------
// GPT-2's reversible byte-to-unicode mapping used by byte-level BPE (GPT-2, Llama 3, Qwen2,
// SmolLM2): each of the 256 byte values is shown as one printable code point, so that any byte
// string is a string of "characters" the BPE vocabulary can hold. Printable Latin-1 bytes
// ('!'..'~', '¡'..'¬', '®'..'ÿ') map to themselves; the other 68 map, in byte order, to
// U+0100..U+0143 (so ' ' is "Ġ" U+0120 and '\n' is "Ċ" U+010A).
//
// Stateless functions over a table built once; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace uc::tokenizer {

// Appends the mapped form of `bytes` to `out`.
void ByteLevelEncode(std::string_view bytes, std::string* out);

// Maps a byte-level vocabulary string back to raw bytes. Characters outside the mapping are
// copied through unchanged (such strings do not occur in well-formed vocabularies).
std::string ByteLevelDecode(std::string_view text);

// The byte whose mapped form is the code point `cp`, or nullopt.
std::optional<uint8_t> ByteFromByteLevelCodepoint(uint32_t cp);

}  // namespace uc::tokenizer
