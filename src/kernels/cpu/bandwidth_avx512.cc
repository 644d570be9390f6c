// The bandwidth probe's AVX-512 read loop (kernels/bandwidth.cc takes the best of its loops).
// Everything but SumFloats is local, for the reason matmul_int8_avx512.cc gives.
#if defined(__x86_64__)

// clang-format off
// First, before <immintrin.h> (see the header).
#include "kernels/cpu/avx512_gcc_workaround.h"  // NOLINT(build/include_order)
#include <immintrin.h>
// clang-format on

#include "kernels/cpu/cpu_kernels.h"

namespace uc::kernels::avx512 {

double SumFloats(const float* data, int64_t n) {
  // Sixteen independent 64-byte loads per iteration (1 KiB in flight) and a software prefetch
  // into L2 4 KiB ahead: the widest plain read stream this CPU issues. (Into L1, prefetcht0,
  // read 10-20% slower on a Zen 4 with 2 MiB pages, as it made the packed decode kernels.)
  __m512 acc[16];
#pragma GCC unroll 16
  for (auto& a : acc) a = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 256 <= n; i += 256) {
    _mm_prefetch(reinterpret_cast<const char*>(data + i + 1024), _MM_HINT_T1);
    _mm_prefetch(reinterpret_cast<const char*>(data + i + 1024 + 128), _MM_HINT_T1);
#pragma GCC unroll 16
    for (int v = 0; v < 16; ++v) acc[v] = _mm512_add_ps(acc[v], _mm512_loadu_ps(data + i + 16 * v));
  }
#pragma GCC unroll 16
  for (int v = 1; v < 16; ++v) acc[0] = _mm512_add_ps(acc[0], acc[v]);
  double sum = _mm512_reduce_add_ps(acc[0]);
  for (; i < n; ++i) sum += data[i];
  return sum;
}

}  // namespace uc::kernels::avx512

#endif  // defined(__x86_64__)
