// The compute-roofline probe's vdpbf16ps loop (kernels/compute_peak.cc), built with
// AVX512_BF16 and run only where internal::UseAvx512Bf16().
#if defined(__x86_64__)

// clang-format off
// First, before <immintrin.h> (see the header).
#include "kernels/cpu/avx512_gcc_workaround.h"  // NOLINT(build/include_order)
#include <immintrin.h>
// clang-format on

#include "kernels/cpu/compute_peak_chains.h"
#include "kernels/cpu/cpu_kernels.h"

namespace uc::kernels::avx512 {

double Dpbf16Chains(int64_t iterations) {
  // Each pair adds 2 * 2^-20 to a lane: after 1e9 iterations a lane holds about 2000, far from
  // overflow, and never subnormal.
  const __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0x1p-10f), _mm512_set1_ps(0x1p-10f));
  return RunPeakChains(
      iterations, _mm512_setzero_ps(), [&](__m512 a) { return _mm512_dpbf16_ps(a, x, x); },
      [](__m512 a) { return static_cast<double>(_mm512_reduce_add_ps(a)); });
}

}  // namespace uc::kernels::avx512

#endif  // defined(__x86_64__)
