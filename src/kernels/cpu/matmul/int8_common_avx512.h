// File: int8_common_avx512.h
// -----------------------------------------------------------------------------
// The AVX-512 integer MatMul's (matmul_int8_avx512.cc) shared pieces: the tile and panel sizes,
// loads, lane shuffles and the horizontal sums that turn per-row vectors into one lane per row.
// Include only from matmul_int8_avx512.cc, after kernels/cpu/avx512_gcc_workaround.h: the
// definitions are in an anonymous namespace, so that no AVX-512 copy of an inline function
// can be the one the linker keeps for code that runs on CPUs without AVX-512 (the .cc's
// header says more).
#pragma once

#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "tensor/dtype.h"

namespace uc::kernels::avx512 {
namespace {  // NOLINT(build/namespaces): one translation unit

constexpr int kTileRows = 16;   // weight rows per tile: one per int32 / F32 lane
constexpr int kPanelRows = 16;  // x rows per panel: one per lane

// ---------------------------------------------------------------------------------------------
// Helpers.

__m512i Load(const void* p) { return _mm512_loadu_si512(p); }
__m256i Load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
__m128i Load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
void Store256(void* p, __m256i v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }

float Half(uint16_t h) { return _cvtsh_ss(h); }

uint16_t LoadU16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Sixteen f16 at p, as F32.
__m512 HalvesAt(const std::byte* p) { return _mm512_cvtph_ps(Load256(p)); }

// Interleaves field [offset, offset + bytes) of the sixteen blocks src[j] into dst: four-byte
// groups (bytes % 4 == 0) as vectors, or a one- or two-byte field as an array of sixteen.
void InterleaveField(const std::byte* const* src, size_t offset, size_t bytes, std::byte* dst) {
  const size_t unit = bytes < 4 ? bytes : 4;
  for (size_t i = 0; i < bytes / unit; ++i) {
    for (int j = 0; j < kTileRows; ++j) {
      std::memcpy(dst + (i * kTileRows + j) * unit, src[j] + offset + i * unit, unit);
    }
  }
}

// The four bytes at p in every int32 lane.
__m512i Broadcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi32(v);
}

// acc + dpbusd(w, the four bytes at p in every lane), the bytes as the instruction's embedded
// broadcast ({1to16}): GCC 12 loads them with a separate vpbroadcastd.
[[gnu::always_inline]] inline __m512i DpbusdBroadcast(__m512i acc, __m512i w, const void* p) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*static_cast<const int32_t*>(p)));
  return acc;
}

// The same for dpwssd (int16 pairs).
[[gnu::always_inline]] inline __m512i DpwssdBroadcast(__m512i acc, __m512i w, const void* p) {
  asm("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*static_cast<const int32_t*>(p)));
  return acc;
}

// The 16 bytes at a, b, c, d in 128-bit lanes 0, 1, 2, 3.
__m512i Lanes(const void* a, const void* b, const void* c, const void* d) {
  __m512i v = _mm512_castsi128_si512(Load128(a));
  v = _mm512_inserti32x4(v, Load128(b), 1);
  v = _mm512_inserti32x4(v, Load128(c), 2);
  return _mm512_inserti32x4(v, Load128(d), 3);
}

// The f16 at byte `offset` of each of the sixteen rows, as F32, gathered in registers (sixteen
// 2-byte stores read back by one 32-byte load stall store forwarding: Q4_0 decode 1.3x slower).
[[gnu::always_inline]] inline void GatherF16(const std::byte* const* rows, int64_t offset,
                                             float* out) {
  auto at = [&](int j) { return static_cast<short>(LoadU16(rows[j] + offset)); };
  const __m128i lo = _mm_setr_epi16(at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7));
  const __m128i hi = _mm_setr_epi16(at(8), at(9), at(10), at(11), at(12), at(13), at(14), at(15));
  _mm512_store_ps(out, _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1)));
}

// Per 128-bit lane: [a 0+2, b 0+2, a 1+3, b 1+3] (int32 lanes).
__m512i AddInterleaved(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
}

// Per 128-bit lane: [a 0+1, b 0+1, a 2+3, b 2+3] of int32 pairs, for a, b from AddInterleaved.
__m512i AddInterleaved64(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}

// [a.0 + a.1, a.2 + a.3, b.0 + b.1, b.2 + b.3] of 128-bit lanes.
__m512i AddLanePairs(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Lane 4 L + q = the sum of 128-bit lane L of v[q] (q < 4).
__m512i SumQuads(const __m512i* v) {
  return AddInterleaved64(AddInterleaved(v[0], v[1]), AddInterleaved(v[2], v[3]));
}

// Lane j = the sum of the sixteen int32 lanes of v[j].
__m512i SumEach(const __m512i* v) {
  __m512i u[4];
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    // 128-bit lane L of u[g]: rows 4 g .. 4 g + 3, summed over their lane L.
    u[g] = AddInterleaved64(AddInterleaved(v[4 * g], v[4 * g + 1]),
                            AddInterleaved(v[4 * g + 2], v[4 * g + 3]));
  }
  return AddLanePairs(AddLanePairs(u[0], u[1]), AddLanePairs(u[2], u[3]));
}

// Lane j = the sum of row j's eight int32 lanes, from v[p] = [row 2p's eight | row 2p + 1's].
__m512i SumPairedRows(const __m512i* v) {
  const __m512i a = AddInterleaved64(AddInterleaved(v[0], v[1]), AddInterleaved(v[2], v[3]));
  const __m512i b = AddInterleaved64(AddInterleaved(v[4], v[5]), AddInterleaved(v[6], v[7]));
  // Rows 0, 2, 4, 6 | 1, 3, 5, 7 | 8, 10, 12, 14 | 9, 11, 13, 15.
  const __m512i sums = AddLanePairs(a, b);
  return _mm512_permutexvar_epi32(
      _mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15), sums);
}

// v[i] lane c = v[c] lane i before (a 16x16 transpose in registers): at each stage s = 8, 4,
// 2, 1, rows j and j + s ((j & s) == 0) swap their off-diagonal s x s blocks. Inlined: called,
// it passes v through memory (ToLanes, and so the K-quants at 16 x rows, 1.1-1.2x slower).
[[gnu::always_inline]] inline void Transpose16x16(__m512* v) {
#pragma GCC unroll 4
  for (int s = 8; s >= 1; s /= 2) {
    alignas(64) int32_t lo[16], hi[16];
    for (int l = 0; l < 16; ++l) {
      lo[l] = (l & s) == 0 ? l : 16 + (l - s);
      hi[l] = (l & s) == 0 ? l + s : 16 + l;
    }
    const __m512i idx_lo = _mm512_load_si512(lo), idx_hi = _mm512_load_si512(hi);
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      if ((j & s) != 0) continue;
      const __m512 a = v[j], b = v[j + s];
      v[j] = _mm512_permutex2var_ps(a, idx_lo, b);
      v[j + s] = _mm512_permutex2var_ps(a, idx_hi, b);
    }
  }
}

}  // namespace
}  // namespace uc::kernels::avx512

#endif  // defined(__x86_64__)
