// The compute-roofline probes' AVX2 loops (kernels/compute_peak.cc): F32 FMA on YMM, and the
// AVX2 int8 dot-product idiom the integer MatMul uses (maddubs, then madd by ones, then add).
#if defined(__x86_64__)

#include <immintrin.h>

#include "kernels/cpu/compute_peak_chains.h"
#include "kernels/cpu/cpu_kernels.h"

namespace uc::kernels::avx2 {
namespace {

double LaneSum(__m256 v) {
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, v);
  double sum = 0.0;
  for (float f : lanes) sum += f;
  return sum;
}

double LaneSum(__m256i v) {
  alignas(32) int32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), v);
  double sum = 0.0;
  for (int32_t i : lanes) sum += i;
  return sum;
}

}  // namespace

double FmaChains(int64_t iterations) {
  // acc = acc * 1 + 1: every lane counts the iterations (exactly up to 2^24, then it stays).
  // The empty asm hides the multiplier's value, so the compiler cannot drop the multiply.
  __m256 factor = _mm256_set1_ps(1.0f);
  __asm__("" : "+x"(factor));
  const __m256 one = _mm256_set1_ps(1.0f);
  return RunPeakChains(
      iterations, _mm256_setzero_ps(), [&](__m256 a) { return _mm256_fmadd_ps(a, factor, one); },
      [](__m256 a) { return LaneSum(a); });
}

double MaddubsChains(int64_t iterations) {
  // Six chains: with their six unsigned operands and two constants they fill 14 of the 16 YMM
  // registers. The empty asm makes each operand opaque every iteration, so the products cannot
  // be hoisted out of the loop; it emits no instruction.
  constexpr int kChains = 6;
  const __m256i s = _mm256_set1_epi8(3);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i u[kChains];
  __m256i acc[kChains];
  for (int c = 0; c < kChains; ++c) {
    u[c] = _mm256_set1_epi8(static_cast<char>(c + 1));
    acc[c] = _mm256_setzero_si256();
  }
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 6
    for (int c = 0; c < kChains; ++c) {
      __asm__ volatile("" : "+x"(u[c]));
      acc[c] = _mm256_add_epi32(acc[c], _mm256_madd_epi16(_mm256_maddubs_epi16(u[c], s), ones));
    }
  }
  double sum = 0.0;
  for (const auto& a : acc) sum += LaneSum(a);
  return sum;
}

}  // namespace uc::kernels::avx2

#endif  // defined(__x86_64__)
