// The AVX-512 exact quantized MatMul on CPUs with AVX512_VBMI (Ice Lake, Zen 4 and later): the
// backend of quant_exact_backend_avx512.h with vpermb widening the byte-span codes; the layout
// (avx512::PackQuantExact) and the bits are those of avx512::MatMulQuantExact.
#if defined(__x86_64__)

// clang-format off
// First, before <immintrin.h> (see the header).
#include "kernels/cpu/avx512_gcc_workaround.h"  // NOLINT(build/include_order)
#include <immintrin.h>
// clang-format on

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/matmul/quant_exact_backend_avx512.h"

namespace uc::kernels::avx512 {

void MatMulQuantExactVbmi(const MatMulArgs& args, ThreadPool* pool) {
  quant_exact::MatMul<Avx512<true>, kTuning>(args, pool);
}

}  // namespace uc::kernels::avx512

#endif  // defined(__x86_64__)
