#include "tokenizer/text/normalizer.h"

#include "tokenizer/text/unicode_nfc.h"

namespace uc::tokenizer {
namespace {

std::string RemoveExtraWhitespaces(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool pending_space = false;
  for (const char c : text) {
    if (c == ' ') {
      pending_space = !out.empty();  // leading spaces are dropped
      continue;
    }
    if (pending_space) out.push_back(' ');
    pending_space = false;
    out.push_back(c);
  }
  return out;  // a trailing run is never flushed
}

}  // namespace

std::string Normalize(std::string_view fragment, const NormalizerOptions& options,
                      bool at_text_start) {
  std::string nfc;
  if (options.nfc) {
    nfc = NfcNormalize(fragment);
    fragment = nfc;
  }
  std::string text =
      options.remove_extra_whitespaces ? RemoveExtraWhitespaces(fragment) : std::string(fragment);
  if (text.empty()) return text;
  const bool prefix = options.add_dummy_prefix &&
                      (options.prefix_scheme == PrefixScheme::kAlways || at_text_start) &&
                      !(options.prefix_unless_leading_space && text[0] == ' ');
  if (!options.escape_whitespaces) return prefix ? " " + text : text;
  std::string out;
  out.reserve(text.size() + 3 * 8);
  if (prefix) out.append(kSpaceMarker);
  for (const char c : text) {
    if (c == ' ') {
      out.append(kSpaceMarker);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace uc::tokenizer
