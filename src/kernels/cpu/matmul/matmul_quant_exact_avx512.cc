// The AVX-512 exact quantized MatMul (quant_exact_backend_avx512.h has the backend): the packer,
// and the kernels for CPUs without AVX512_VBMI (matmul_quant_exact_avx512_vbmi.cc has the others).
#if defined(__x86_64__)

// clang-format off
// First, before <immintrin.h> (see the header).
#include "kernels/cpu/avx512_gcc_workaround.h"  // NOLINT(build/include_order)
#include <immintrin.h>
// clang-format on

#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/matmul/quant_exact_backend_avx512.h"

namespace uc::kernels::avx512 {

int64_t PackedQuantExactBytes(DType dtype, int64_t n, int64_t k) {
  return quant_exact::PackedBytes<Avx512<false>>(dtype, n, k);
}

void PackQuantExact(const MatMulArgs& args, std::byte* out, ThreadPool* pool) {
  quant_exact::Pack<Avx512<false>>(args, out, pool);
}

void MatMulQuantExact(const MatMulArgs& args, ThreadPool* pool) {
  quant_exact::MatMul<Avx512<false>, kTuning>(args, pool);
}

}  // namespace uc::kernels::avx512

#endif  // defined(__x86_64__)
