// The AVX-512 backend of the exact quantized MatMul (quant_exact_kernels.h): 16 F32 lanes, the
// low nibble converted through a table (vpermps reads an index's low four bits: the conversions
// and shifts share one port on Intel, the permute uses the other), partial columns by masks.
// Decode takes a whole pair (64 rows: four chains per x row), prefill panels of 32 rows under a
// 6x32 micro-kernel.
#if defined(__x86_64__)

// clang-format off
// First, before <immintrin.h> (see the header).
#include "kernels/cpu/avx512_gcc_workaround.h"  // NOLINT(build/include_order)
#include <immintrin.h>
// clang-format on

#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/matmul/quant_exact_kernels.h"

namespace uc::kernels::avx512 {
namespace {

__mmask16 Lanes(int cols) {
  return cols >= 16  ? static_cast<__mmask16>(0xFFFF)
         : cols <= 0 ? static_cast<__mmask16>(0)
                     : static_cast<__mmask16>((1u << cols) - 1);
}

struct Avx512 {
  using F = __m512;
  using I = __m512i;
  static constexpr int kLanes = 16;
  [[gnu::always_inline]] static I WidenU8(const uint8_t* p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  [[gnu::always_inline]] static I WidenI8(const uint8_t* p) {
    return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  [[gnu::always_inline]] static F F16s(const uint8_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  [[gnu::always_inline]] static F ToF32(I v) { return _mm512_cvtepi32_ps(v); }
  [[gnu::always_inline]] static F LowNibble(I v) {
    const F codes = _mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    return _mm512_permutexvar_ps(v, codes);
  }
  // MXFP4: entry v & 15 of quant_exact::kMxfp4Lookup as F32 (vpermps reads the low four bits).
  [[gnu::always_inline]] static F LookUpF32(I v) {
    constexpr auto& t = quant_exact::kMxfp4Lookup;
    const F table = _mm512_setr_ps(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9],
                                   t[10], t[11], t[12], t[13], t[14], t[15]);
    return _mm512_permutexvar_ps(v, table);
  }
  // E8M0HalfToF32 of the 16 bytes at p: (e - 1) << 23, a normal float, for e >= 2; 0x00200000 <<
  // e, a subnormal, below.
  [[gnu::always_inline]] static F E8M0s(const uint8_t* p) {
    const I e = WidenU8(p);
    const I normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const I subnormal = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    const __mmask16 small = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, normal, subnormal));
  }
  [[gnu::always_inline]] static I And(I v, int mask) {
    return _mm512_and_si512(v, _mm512_set1_epi32(mask));
  }
  [[gnu::always_inline]] static I Or(I a, I b) { return _mm512_or_si512(a, b); }
  [[gnu::always_inline]] static I Srl(I v, int count) {
    return _mm512_srl_epi32(v, _mm_cvtsi32_si128(count));
  }
  template <int k>
  [[gnu::always_inline]] static I SrlI(I v) {
    return _mm512_srli_epi32(v, k);
  }
  template <int k>
  [[gnu::always_inline]] static I SllI(I v) {
    return _mm512_slli_epi32(v, k);
  }
  // A whole line (64 rows) of byte codes: the types with high bits build theirs here.
  using Bytes = __m512i;
  static constexpr int kByteLanes = 64;
  [[gnu::always_inline]] static Bytes LoadBytes(const uint8_t* p) { return _mm512_loadu_si512(p); }
  [[gnu::always_inline]] static Bytes AndB(Bytes v, int32_t mask) { return And(v, mask); }
  [[gnu::always_inline]] static Bytes OrB(Bytes a, Bytes b) { return Or(a, b); }
  template <int k>
  [[gnu::always_inline]] static Bytes SrlB(Bytes v) {
    return _mm512_srli_epi32(v, k);
  }
  template <int k>
  [[gnu::always_inline]] static Bytes SllB(Bytes v) {
    return _mm512_slli_epi32(v, k);
  }
  template <int c>
  [[gnu::always_inline]] static I Chunk(Bytes v) {
    if constexpr (c == 0) {
      return _mm512_cvtepu8_epi32(_mm512_castsi512_si128(v));
    } else {
      return _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(v, c));
    }
  }
  [[gnu::always_inline]] static F Zero() { return _mm512_setzero_ps(); }
  [[gnu::always_inline]] static F Set1(float v) { return _mm512_set1_ps(v); }
  [[gnu::always_inline]] static F Mul(F a, F b) { return _mm512_mul_ps(a, b); }
  [[gnu::always_inline]] static F Sub(F a, F b) { return _mm512_sub_ps(a, b); }
  [[gnu::always_inline]] static F Fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  [[gnu::always_inline]] static F Load(const float* p) { return _mm512_load_ps(p); }
  [[gnu::always_inline]] static void Store(float* p, F v) { _mm512_store_ps(p, v); }
  [[gnu::always_inline]] static F LoadCols(const float* p, int cols) {
    return _mm512_maskz_loadu_ps(Lanes(cols), p);
  }
  [[gnu::always_inline]] static void StoreCols(float* p, F v, int cols) {
    _mm512_mask_storeu_ps(p, Lanes(cols), v);
  }
  [[gnu::always_inline]] static void Prefetch(const char* p) { _mm_prefetch(p, _MM_HINT_T1); }
};

constexpr quant_exact::Tuning kTuning{.decode_rows = 64,
                                      .stream_rows = 2,
                                      .panel_rows = 32,
                                      .panels_per_group = 4,
                                      .panel_mr = 6,
                                      .prefetch_bytes = 4096};

}  // namespace

int64_t PackedQuantExactBytes(DType dtype, int64_t n, int64_t k) {
  return quant_exact::PackedBytes<Avx512>(dtype, n, k);
}

void PackQuantExact(const MatMulArgs& args, std::byte* out, ThreadPool* pool) {
  quant_exact::Pack<Avx512>(args, out, pool);
}

void MatMulQuantExact(const MatMulArgs& args, ThreadPool* pool) {
  quant_exact::MatMul<Avx512, kTuning>(args, pool);
}

}  // namespace uc::kernels::avx512

#endif  // defined(__x86_64__)
