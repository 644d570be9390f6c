// File: unicode_nfc.h
// -----------------------------------------------------------------------------
// Unicode Normalization Form C (UAX #15: full canonical decomposition, canonical ordering of
// combining marks, canonical composition, Hangul done algorithmically), for tokenizers whose
// tokenizer.json normalizer is "NFC" (Qwen2, Qwen2.5, Qwen3): "e" + U+0301 becomes "é" before
// BPE, so both spellings give the same ids.
//
//   std::string text = NfcNormalize("Cafe\u0301");  // "Café"
//
// The data (combining classes, canonical decompositions, primary composites) is generated from
// Python's unicodedata by tools/reference/make_nfc_tables.py into unicode_nfc_tables.inc;
// NfcUnicodeVersion() names the Unicode version. Results equal unicodedata.normalize("NFC", s)
// for that version. (Hugging Face tokenizers' own NFC uses older data and orders some marks
// added in recent Unicode versions differently.)
//
// Bytes that are not valid UTF-8 are copied unchanged and act as starters that nothing
// composes with. Stateless functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace uc::tokenizer {

// `text` in Normalization Form C. Text that is already NFC (in particular all ASCII) comes back
// unchanged.
std::string NfcNormalize(std::string_view text);

// Canonical combining class of code point `cp` (0 for starters and unassigned code points).
uint8_t CanonicalCombiningClass(uint32_t cp);

// The Unicode version of the tables, e.g. "14.0.0".
std::string_view NfcUnicodeVersion();

}  // namespace uc::tokenizer
