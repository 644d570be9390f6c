// File: normalizer.h
// -----------------------------------------------------------------------------
// SentencePiece-style text normalization applied before a text fragment is split into
// symbols: optional Unicode NFC (unicode_nfc.h), optional whitespace cleanup, a dummy-prefix
// space, and escaping spaces as U+2581 ("▁"). The same options express Hugging Face's NFC,
// Prepend("▁") and Replace(" ", "▁") normalizers and the Metaspace pre-tokenizer, so llama2.c,
// tokenizer.model, GGUF and tokenizer.json models share one implementation.
//
// Only the ASCII space counts as whitespace here, as in SentencePiece (tabs and newlines are
// ordinary characters). Stateless; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace uc::tokenizer {

inline constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581 "▁"

// Which fragments of a text receive the dummy prefix. A text is cut into fragments at special
// tokens (when those are parsed).
enum class PrefixScheme {
  kAlways,  // every fragment: SentencePiece, llama.cpp, HF Prepend and Metaspace "always"
  kFirst,   // only a fragment at the very start of the text: HF Metaspace "first"
};

struct NormalizerOptions {
  // Unicode Normalization Form C first (Hugging Face "NFC" normalizer: Qwen2/2.5/3).
  bool nfc = false;
  bool add_dummy_prefix = false;
  PrefixScheme prefix_scheme = PrefixScheme::kAlways;
  // HF Metaspace: no dummy prefix when the fragment already starts with a space.
  bool prefix_unless_leading_space = false;
  // Drop leading and trailing spaces and collapse inner runs of spaces into one.
  bool remove_extra_whitespaces = false;
  // Replace every ' ' (including the dummy prefix) with U+2581.
  bool escape_whitespaces = false;
};

// Normalizes one fragment. `at_text_start` says whether the fragment begins the text (used by
// PrefixScheme::kFirst). Empty input, or input that whitespace removal empties, stays empty
// (no dummy prefix), as SentencePiece does.
std::string Normalize(std::string_view fragment, const NormalizerOptions& options,
                      bool at_text_start);

}  // namespace uc::tokenizer
