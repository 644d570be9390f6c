#include "tokenizer/text/unicode_nfc.h"

#include <algorithm>
#include <vector>

#include "tokenizer/text/utf8.h"

namespace uc::tokenizer {
namespace {

struct CombiningClassRange {
  uint32_t first;
  uint32_t last;
  uint8_t ccc;
};
struct Decomposition {
  uint32_t cp;
  uint32_t first;
  uint32_t second;  // 0 for a singleton
};
struct Composition {
  uint32_t first;
  uint32_t second;
  uint32_t composite;
};

#include "tokenizer/text/unicode_nfc_tables.inc"

// Hangul syllables (UAX #15, section "Hangul").
constexpr uint32_t kSBase = 0xAC00;
constexpr uint32_t kLBase = 0x1100;
constexpr uint32_t kVBase = 0x1161;
constexpr uint32_t kTBase = 0x11A7;
constexpr uint32_t kLCount = 19;
constexpr uint32_t kVCount = 21;
constexpr uint32_t kTCount = 28;
constexpr uint32_t kNCount = kVCount * kTCount;
constexpr uint32_t kSCount = kLCount * kNCount;

// A byte of invalid UTF-8, kept in the code point sequence: above every code point, so it has
// class 0, no decomposition and no composition.
constexpr uint32_t kRawByteFlag = 0x80000000u;

// Nothing below U+0300 decomposes under NFC, has a non-zero class or composes with what
// precedes it.
constexpr uint32_t kFirstInteresting = 0x300;

const Decomposition* FindDecomposition(uint32_t cp) {
  const auto* end = std::end(kDecompositions);
  const auto* it = std::lower_bound(std::begin(kDecompositions), end, cp,
                                    [](const Decomposition& d, uint32_t c) { return d.cp < c; });
  return it != end && it->cp == cp ? it : nullptr;
}

void Decompose(uint32_t cp, std::vector<uint32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* d = cp >= kFirstInteresting ? FindDecomposition(cp) : nullptr;
  if (d == nullptr) {
    out->push_back(cp);
    return;
  }
  Decompose(d->first, out);
  if (d->second != 0) Decompose(d->second, out);
}

// The primary composite of `first` + `second`, or 0.
uint32_t Compose(uint32_t first, uint32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase &&
      second < kVBase + kVCount) {
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  }
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 &&
      second > kTBase && second < kTBase + kTCount) {
    return first + (second - kTBase);
  }
  const auto before = [](const Composition& a, const Composition& b) {
    return a.first != b.first ? a.first < b.first : a.second < b.second;
  };
  const auto* end = std::end(kCompositions);
  const auto* it =
      std::lower_bound(std::begin(kCompositions), end, Composition{first, second, 0}, before);
  return it != end && it->first == first && it->second == second ? it->composite : 0;
}

// Code points of `text` (invalid bytes flagged with kRawByteFlag), fully decomposed and in
// canonical order.
std::vector<uint32_t> DecomposeAndOrder(std::string_view text) {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Sequence seq = ExamineUtf8(text.substr(pos));
    if (seq.kind != Utf8Sequence::Kind::kValid) {
      out.push_back(kRawByteFlag | static_cast<unsigned char>(text[pos]));
      ++pos;
      continue;
    }
    const size_t first_new = out.size();
    Decompose(DecodeCodepoint(text.substr(pos, seq.length)), &out);
    pos += seq.length;
    // Canonical ordering: move each new mark left past marks of a higher class (stable).
    for (size_t i = first_new; i < out.size(); ++i) {
      const uint8_t ccc = CanonicalCombiningClass(out[i]);
      if (ccc == 0) continue;
      for (size_t j = i; j > 0; --j) {
        const uint8_t prev = CanonicalCombiningClass(out[j - 1]);
        if (prev <= ccc) break;
        std::swap(out[j - 1], out[j]);
      }
    }
  }
  return out;
}

// Canonical composition in place (UAX #15's algorithm).
void ComposeInPlace(std::vector<uint32_t>* cps) {
  std::vector<uint32_t>& s = *cps;
  if (s.empty()) return;
  size_t starter = 0;
  // A leading non-starter has no starter to compose with: 256 blocks everything after it.
  int last_class = CanonicalCombiningClass(s[0]) == 0 ? 0 : 256;
  size_t kept = 1;
  for (size_t i = 1; i < s.size(); ++i) {
    const uint32_t cp = s[i];
    const int cc = CanonicalCombiningClass(cp);
    const uint32_t composite =
        last_class == 256 || (last_class != 0 && last_class >= cc) ? 0 : Compose(s[starter], cp);
    if (composite != 0) {
      s[starter] = composite;
      continue;
    }
    if (cc == 0) starter = kept;
    last_class = cc;
    s[kept++] = cp;
  }
  s.resize(kept);
}

}  // namespace

uint8_t CanonicalCombiningClass(uint32_t cp) {
  if (cp < kFirstInteresting || cp > 0x10FFFF) return 0;
  const auto* end = std::end(kCombiningClassRanges);
  const auto* it =
      std::upper_bound(std::begin(kCombiningClassRanges), end, cp,
                       [](uint32_t c, const CombiningClassRange& r) { return c < r.first; });
  if (it == std::begin(kCombiningClassRanges)) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

std::string_view NfcUnicodeVersion() { return kUnicodeVersion; }

std::string NfcNormalize(std::string_view text) {
  // Fast path: nothing below U+0300 changes (this covers ASCII and Latin-1).
  bool simple = true;
  for (size_t pos = 0; pos < text.size() && simple;) {
    const auto lead = static_cast<unsigned char>(text[pos]);
    if (lead < 0x80) {
      ++pos;
      continue;
    }
    // Two-byte sequences C2..CB xx encode U+0080..U+02FF.
    simple = lead >= 0xC2 && lead <= 0xCB && pos + 1 < text.size() &&
             (static_cast<unsigned char>(text[pos + 1]) & 0xC0) == 0x80;
    pos += 2;
  }
  if (simple) return std::string(text);
  std::vector<uint32_t> cps = DecomposeAndOrder(text);
  ComposeInPlace(&cps);
  std::string out;
  out.reserve(text.size());
  for (const uint32_t cp : cps) {
    if ((cp & kRawByteFlag) != 0) {
      out.push_back(static_cast<char>(cp & 0xFF));
    } else {
      AppendCodepoint(cp, &out);
    }
  }
  return out;
}

}  // namespace uc::tokenizer
