// File: tile_avx512.h
// -----------------------------------------------------------------------------
// The accumulator tile the AVX-512 GEMM micro-kernels share (gemm_avx512.cc for F32 FMA,
// matmul_bf16_avx512.cc for vdpbf16ps): MR rows of y by up to 32 columns, two 16-lane vectors a
// row, loaded from y (or zeroed) before a k block and stored back after it. Columns past `cols`
// are masked off both ways.
//
// Include only from translation units compiled for AVX-512 (after avx512_gcc_workaround.h and
// <immintrin.h>). Everything is forced inline, so no out-of-line copy compiled with one unit's
// flags can stand in for another's.
#pragma once

#include <cstdint>

namespace uc::kernels::avx512 {

// Lanes of the tile's two vectors that hold columns < cols (cols in 1..32).
struct TileMasks {
  __mmask16 lo;
  __mmask16 hi;
};

[[gnu::always_inline]] inline TileMasks MasksForColumns(int cols) {
  return {static_cast<__mmask16>(cols >= 16 ? 0xFFFF : (1u << cols) - 1),
          static_cast<__mmask16>(cols >= 32   ? 0xFFFF
                                 : cols <= 16 ? 0
                                              : (1u << (cols - 16)) - 1)};
}

// acc[r] = y row r (columns in `m`, zero elsewhere) when `accumulate`, else zero; r < MR.
template <int MR>
[[gnu::always_inline]] inline void LoadTile(__m512 (&acc)[MR][2], const float* y, int64_t ldy,
                                            TileMasks m, bool accumulate) {
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    if (accumulate) {
      acc[r][0] = _mm512_maskz_loadu_ps(m.lo, y + r * ldy);
      acc[r][1] = _mm512_maskz_loadu_ps(m.hi, y + r * ldy + 16);
    } else {
      acc[r][0] = _mm512_setzero_ps();
      acc[r][1] = _mm512_setzero_ps();
    }
  }
}

// y row r (columns in `m`) = acc[r]; r < MR.
template <int MR>
[[gnu::always_inline]] inline void StoreTile(const __m512 (&acc)[MR][2], float* y, int64_t ldy,
                                             TileMasks m) {
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    _mm512_mask_storeu_ps(y + r * ldy, m.lo, acc[r][0]);
    _mm512_mask_storeu_ps(y + r * ldy + 16, m.hi, acc[r][1]);
  }
}

}  // namespace uc::kernels::avx512
