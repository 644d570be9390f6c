// File: fingerprint.h
// -----------------------------------------------------------------------------
// 64-bit FNV-1a over bytes: a fingerprint that ties an artifact (a dataset, a probe, a prompts
// file) to its inputs, not a cryptographic hash. Hex64 writes it as 16 lowercase hex digits.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace uc {

inline uint64_t Fnv1a64(std::string_view bytes, uint64_t h = 14695981039346656037ull) {
  for (const unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}

inline std::string Hex64(uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(v));
  return text;
}

}  // namespace uc
