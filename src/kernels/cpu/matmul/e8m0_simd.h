// File: e8m0_simd.h
// -----------------------------------------------------------------------------
// MXFP4's E8M0 block scales as F32, a vector of int32 lanes at a time: E8M0HalfToF32 (the value
// the dequantizer gives, half the E8M0 value) lane by lane, for the integer and the exact
// MatMul kernels of one instruction set. Each function exists where its instruction set is
// enabled for the including translation unit (__AVX2__, __AVX512F__).
//
// Include only from kernel translation units (or headers only they include), after
// <immintrin.h>: the definitions are in an anonymous namespace, so that no AVX-512 copy of an
// inline function can be the one the linker keeps for an AVX2 unit.
#pragma once

#if defined(__x86_64__)

#include <immintrin.h>

namespace uc::kernels::simd {
namespace {  // NOLINT(build/namespaces): see the header comment

// Each lane e (an E8M0 byte, 0 .. 255): e >= 2 gives the normal float (e - 1) << 23, e < 2 the
// subnormal 0x00200000 << e.
#if defined(__AVX2__)
[[gnu::always_inline]] inline __m256 E8M0HalfToF32x8(__m256i e) {
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
  const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
  const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, subnormal, small));
}
#endif

#if defined(__AVX512F__)
[[gnu::always_inline]] inline __m512 E8M0HalfToF32x16(__m512i e) {
  const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
  const __m512i subnormal = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
  const __mmask16 small = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, normal, subnormal));
}
#endif

}  // namespace
}  // namespace uc::kernels::simd

#endif  // defined(__x86_64__)
