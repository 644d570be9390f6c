// The compute-roofline probes' AVX-512 loops (kernels/compute_peak.cc): F32 FMA and vpdpbusd on
// ZMM.
#if defined(__x86_64__)

// clang-format off
// First, before <immintrin.h> (see the header).
#include "kernels/cpu/avx512_gcc_workaround.h"  // NOLINT(build/include_order)
#include <immintrin.h>
// clang-format on

#include "kernels/cpu/compute_peak_chains.h"
#include "kernels/cpu/cpu_kernels.h"

namespace uc::kernels::avx512 {

double FmaChains(int64_t iterations) {
  // acc = acc * 1 + 1: every lane counts the iterations (exactly up to 2^24, then it stays).
  // The empty asm hides the multiplier's value, so the compiler cannot drop the multiply.
  __m512 factor = _mm512_set1_ps(1.0f);
  __asm__("" : "+v"(factor));
  const __m512 one = _mm512_set1_ps(1.0f);
  return RunPeakChains(
      iterations, _mm512_setzero_ps(), [&](__m512 a) { return _mm512_fmadd_ps(a, factor, one); },
      [](__m512 a) { return static_cast<double>(_mm512_reduce_add_ps(a)); });
}

double DpbusdChains(int64_t iterations) {
  // Each vpdpbusd adds 64 products of 1 and 1 to sixteen int32 lanes: they wrap, which is
  // defined for the instruction and harmless for a checksum.
  const __m512i ones = _mm512_set1_epi8(1);
  return RunPeakChains(
      iterations, _mm512_setzero_si512(),
      [&](__m512i a) { return _mm512_dpbusd_epi32(a, ones, ones); },
      [](__m512i a) { return static_cast<double>(_mm512_reduce_add_epi32(a)); });
}

}  // namespace uc::kernels::avx512

#endif  // defined(__x86_64__)
