// The compute-roofline probes' AVX-512 loops (kernels/compute_peak.cc): F32 FMA and vpdpbusd on
// ZMM. Registers only; every chain's result feeds the checksum so no loop is optimized away.
// Everything but the entry points is local, for the reason matmul_int8_avx512.cc gives.
#if defined(__x86_64__)

// clang-format off
// First, before <immintrin.h> (see the header).
#include "kernels/cpu/avx512_gcc_workaround.h"  // NOLINT(build/include_order)
#include <immintrin.h>
// clang-format on

#include "kernels/cpu/cpu_kernels.h"

namespace uc::kernels::avx512 {

constexpr int kChains = 12;

double FmaChains(int64_t iterations) {
  // acc = acc * 1 + 1: every lane counts the iterations (exactly up to 2^24, then it stays).
  // The empty asm hides the multiplier's value, so the compiler cannot drop the multiply.
  __m512 factor = _mm512_set1_ps(1.0f);
  __asm__("" : "+v"(factor));
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 acc[kChains];
  for (auto& a : acc) {
    a = _mm512_setzero_ps();
    __asm__("" : "+v"(a));  // so the compiler cannot merge equal chains
  }
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
    for (auto& a : acc) a = _mm512_fmadd_ps(a, factor, one);
  }
  double sum = 0.0;
  for (const auto& a : acc) sum += _mm512_reduce_add_ps(a);
  return sum;
}

double DpbusdChains(int64_t iterations) {
  // Each vpdpbusd adds 64 products of 1 and 1 to sixteen int32 lanes: they wrap, which is
  // defined for the instruction and harmless for a checksum.
  const __m512i u = _mm512_set1_epi8(1);
  const __m512i s = _mm512_set1_epi8(1);
  __m512i acc[kChains];
  for (auto& a : acc) {
    a = _mm512_setzero_si512();
    __asm__("" : "+v"(a));  // so the compiler cannot merge equal chains
  }
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
    for (auto& a : acc) a = _mm512_dpbusd_epi32(a, u, s);
  }
  double sum = 0.0;
  for (const auto& a : acc) sum += _mm512_reduce_add_epi32(a);
  return sum;
}

}  // namespace uc::kernels::avx512

#endif  // defined(__x86_64__)
