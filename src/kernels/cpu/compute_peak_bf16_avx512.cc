// The compute-roofline probe's vdpbf16ps loop (kernels/compute_peak.cc), built with
// AVX512_BF16 and run only where internal::UseAvx512Bf16(). Registers only.
#if defined(__x86_64__)

// clang-format off
// First, before <immintrin.h> (see the header).
#include "kernels/cpu/avx512_gcc_workaround.h"  // NOLINT(build/include_order)
#include <immintrin.h>
// clang-format on

#include "kernels/cpu/cpu_kernels.h"

namespace uc::kernels::avx512 {

double Dpbf16Chains(int64_t iterations) {
  // Each pair adds 2 * 2^-20 to a lane: after 1e9 iterations a lane holds about 2000, far from
  // overflow, and never subnormal.
  constexpr int kChains = 12;
  const __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0x1p-10f), _mm512_set1_ps(0x1p-10f));
  __m512 acc[kChains];
  for (auto& a : acc) {
    a = _mm512_setzero_ps();
    __asm__("" : "+v"(a));  // so the compiler cannot merge equal chains
  }
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
    for (auto& a : acc) a = _mm512_dpbf16_ps(a, x, x);
  }
  double sum = 0.0;
  for (const auto& a : acc) sum += _mm512_reduce_add_ps(a);
  return sum;
}

}  // namespace uc::kernels::avx512

#endif  // defined(__x86_64__)
