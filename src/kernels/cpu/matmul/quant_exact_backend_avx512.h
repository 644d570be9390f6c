// File: quant_exact_backend_avx512.h
// -----------------------------------------------------------------------------
// The AVX-512 backend of the exact quantized MatMul (quant_exact_kernels.h): 16 F32 lanes, the
// low nibble converted through a table (vpermps reads an index's low four bits: the conversions
// and shifts share one port on Intel, the permute uses the other), partial columns by masks.
// Decode takes a whole pair (64 rows: four chains per x row), prefill panels of 32 rows under a
// 6x32 micro-kernel. Avx512<kVbmi>: kVbmi widens the byte-span codes with AVX512_VBMI's vpermb
// (matmul_quant_exact_avx512_vbmi.cc); both give the same bits.
//
// Include only from matmul_quant_exact_avx512*.cc, after kernels/cpu/avx512_gcc_workaround.h and
// <immintrin.h>: everything is in an anonymous namespace (see quant_exact_layout.h).
#pragma once

#include <cstdint>

#include "kernels/cpu/matmul/e8m0_simd.h"
#include "kernels/cpu/matmul/quant_exact_kernels.h"

namespace uc::kernels::avx512 {
namespace {  // NOLINT(build/namespaces): see the header comment

__mmask16 Lanes(int cols) {
  return cols >= 16  ? static_cast<__mmask16>(0xFFFF)
         : cols <= 0 ? static_cast<__mmask16>(0)
                     : static_cast<__mmask16>((1u << cols) - 1);
}

template <bool kVbmi>
struct Avx512 {
  using F = __m512;
  using I = __m512i;
  static constexpr int kLanes = 16;
  [[gnu::always_inline]] static I WidenU8(const uint8_t* p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  [[gnu::always_inline]] static I WidenI8(const uint8_t* p) {
    return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  [[gnu::always_inline]] static I LoadLanes(const uint8_t* p) { return _mm512_loadu_si512(p); }
  [[gnu::always_inline]] static F F16s(const uint8_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  [[gnu::always_inline]] static F ToF32(I v) { return _mm512_cvtepi32_ps(v); }
  [[gnu::always_inline]] static F LowNibble(I v) {
    const F codes = _mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    return _mm512_permutexvar_ps(v, codes);
  }
  // MXFP4: entry v & 15 of quant_exact::kMxfp4Lookup as F32 (vpermps reads the low four bits).
  [[gnu::always_inline]] static F LookUpF32(I v) {
    constexpr auto& t = quant_exact::kMxfp4Lookup;
    const F table = _mm512_setr_ps(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9],
                                   t[10], t[11], t[12], t[13], t[14], t[15]);
    return _mm512_permutexvar_ps(v, table);
  }
  // E8M0HalfToF32 of the 16 bytes at p.
  [[gnu::always_inline]] static F E8M0s(const uint8_t* p) {
    return simd::E8M0HalfToF32x16(WidenU8(p));
  }
  [[gnu::always_inline]] static I And(I v, int mask) {
    return _mm512_and_si512(v, _mm512_set1_epi32(mask));
  }
  [[gnu::always_inline]] static I Or(I a, I b) { return _mm512_or_si512(a, b); }
  [[gnu::always_inline]] static I Srl(I v, int count) {
    return _mm512_srl_epi32(v, _mm_cvtsi32_si128(count));
  }
  template <int k>
  [[gnu::always_inline]] static I SrlI(I v) {
    return _mm512_srli_epi32(v, k);
  }
  template <int k>
  [[gnu::always_inline]] static I SllI(I v) {
    return _mm512_slli_epi32(v, k);
  }
  // A whole line (64 rows) of byte codes: the types with high bits build theirs here.
  using Bytes = __m512i;
  static constexpr int kByteLanes = 64;
  [[gnu::always_inline]] static Bytes LoadBytes(const uint8_t* p) { return _mm512_loadu_si512(p); }
  [[gnu::always_inline]] static Bytes AndB(Bytes v, int32_t mask) { return And(v, mask); }
  [[gnu::always_inline]] static Bytes OrB(Bytes a, Bytes b) { return Or(a, b); }
  template <int k>
  [[gnu::always_inline]] static Bytes SrlB(Bytes v) {
    return _mm512_srli_epi32(v, k);
  }
  template <int k>
  [[gnu::always_inline]] static Bytes SllB(Bytes v) {
    return _mm512_slli_epi32(v, k);
  }
  // kVbmi: quarters past the first by one byte permute with zeroing (vpermb), not an extract
  // and a widening: both of those are shuffles, which a Zen 4 issues at one zmm a cycle and
  // which bound the byte-span types' decode there (kernels_benchmark BM_MatMulPrecision, decode,
  // weights cold: Q5_0, Q5_K and Q6_K 1.13-1.18x faster per matmul at one thread, 1.10-1.14x
  // at two).
  template <int c>
  [[gnu::always_inline]] static I Chunk(Bytes v) {
    if constexpr (c == 0) {
      return _mm512_cvtepu8_epi32(_mm512_castsi512_si128(v));
    } else if constexpr (kVbmi) {
      // Byte 4 i of the result is byte 16 c + i of v, bytes 4 i + 1 .. 4 i + 3 zero.
      const __m512i index =
          _mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32(16 * c));
      return _mm512_maskz_permutexvar_epi8(0x1111111111111111ULL, index, v);
    } else {
      return _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(v, c));
    }
  }
  [[gnu::always_inline]] static F Zero() { return _mm512_setzero_ps(); }
  [[gnu::always_inline]] static F Set1(float v) { return _mm512_set1_ps(v); }
  [[gnu::always_inline]] static F Mul(F a, F b) { return _mm512_mul_ps(a, b); }
  [[gnu::always_inline]] static F Sub(F a, F b) { return _mm512_sub_ps(a, b); }
  [[gnu::always_inline]] static F Fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  // The broadcast inside the FMA ({1to16} on the memory operand), where GCC would broadcast *p
  // into a register once for its V FMAs: a vbroadcastss takes a vector pipe on a Zen 4 (one a
  // cycle), where the decode step is bound by the issue of its conversions and FMAs, not by
  // loads (kernels_benchmark BM_MatMulPrecision, decode, weights cold, one and two threads: Q4_0,
  // Q4_K and MXFP4 1.07-1.11x faster per matmul, Q4_1 1.06x, the byte-span types 1.02-1.05x).
  [[gnu::always_inline]] static F FmaBroadcast(const float* p, F w, F c) {
    asm("vfmadd231ps %[x]%{1to16%}, %[w], %[c]" : [c] "+v"(c) : [w] "v"(w), [x] "m"(*p));
    return c;
  }
  [[gnu::always_inline]] static bool AnyNotEqual(F a, F b) {
    return _mm512_cmp_ps_mask(a, b, _CMP_NEQ_UQ) != 0;
  }
  [[gnu::always_inline]] static F Load(const float* p) { return _mm512_load_ps(p); }
  [[gnu::always_inline]] static void Store(float* p, F v) { _mm512_store_ps(p, v); }
  [[gnu::always_inline]] static F LoadCols(const float* p, int cols) {
    return _mm512_maskz_loadu_ps(Lanes(cols), p);
  }
  [[gnu::always_inline]] static void StoreCols(float* p, F v, int cols) {
    _mm512_mask_storeu_ps(p, Lanes(cols), v);
  }
  [[gnu::always_inline]] static void Prefetch(const char* p) { _mm_prefetch(p, _MM_HINT_T1); }
  [[gnu::always_inline]] static void PrefetchL1(const char* p) { _mm_prefetch(p, _MM_HINT_T0); }
};

constexpr quant_exact::Tuning kTuning{.decode_rows = 64,
                                      .stream_rows = 2,
                                      .panel_rows = 32,
                                      .panels_per_group = 4,
                                      .panel_mr = 6,
                                      .prefetch_bytes = 4096};

}  // namespace
}  // namespace uc::kernels::avx512
