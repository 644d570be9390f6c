// The AVX2 backend of the exact quantized MatMul (quant_exact_kernels.h): 8 F32 lanes, partial
// columns by maskload / maskstore. With sixteen vector registers, decode takes 16 rows of a pair
// at a time (the pair's other spans read its lines again, from L2), 32 when x is one row (four
// product chains instead of two and half the passes: 1.3-1.6x on the 4-bit types' decode on a
// Zen EPYC, kernels_benchmark's MatMulPrecision), and prefill panels of 16 rows under a 3x16
// micro-kernel (the accumulators and the group sums share the registers).
#if defined(__x86_64__)

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/matmul/e8m0_simd.h"
#include "kernels/cpu/matmul/quant_exact_kernels.h"

namespace uc::kernels::avx2 {
namespace {

__m256i Lanes(int cols) {
  const int n = cols >= 8 ? 8 : cols <= 0 ? 0 : cols;
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

struct Avx2 {
  using F = __m256;
  using I = __m256i;
  static constexpr int kLanes = 8;
  [[gnu::always_inline]] static I WidenU8(const uint8_t* p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  [[gnu::always_inline]] static I WidenI8(const uint8_t* p) {
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  [[gnu::always_inline]] static I LoadLanes(const uint8_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  [[gnu::always_inline]] static F F16s(const uint8_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  [[gnu::always_inline]] static F ToF32(I v) { return _mm256_cvtepi32_ps(v); }
  [[gnu::always_inline]] static F LowNibble(I v) { return ToF32(And(v, 15)); }
  [[gnu::always_inline]] static I And(I v, int mask) {
    return _mm256_and_si256(v, _mm256_set1_epi32(mask));
  }
  [[gnu::always_inline]] static I Or(I a, I b) { return _mm256_or_si256(a, b); }
  [[gnu::always_inline]] static I Srl(I v, int count) {
    return _mm256_srl_epi32(v, _mm_cvtsi32_si128(count));
  }
  template <int k>
  [[gnu::always_inline]] static I SrlI(I v) {
    return _mm256_srli_epi32(v, k);
  }
  template <int k>
  [[gnu::always_inline]] static I SllI(I v) {
    return _mm256_slli_epi32(v, k);
  }
  // A decode span (16 rows) of byte codes: the types with high bits build theirs here.
  using Bytes = __m128i;
  static constexpr int kByteLanes = 16;
  [[gnu::always_inline]] static Bytes LoadBytes(const uint8_t* p) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  }
  [[gnu::always_inline]] static Bytes AndB(Bytes v, int32_t mask) {
    return _mm_and_si128(v, _mm_set1_epi32(mask));
  }
  [[gnu::always_inline]] static Bytes OrB(Bytes a, Bytes b) { return _mm_or_si128(a, b); }
  template <int k>
  [[gnu::always_inline]] static Bytes SrlB(Bytes v) {
    return _mm_srli_epi32(v, k);
  }
  template <int k>
  [[gnu::always_inline]] static Bytes SllB(Bytes v) {
    return _mm_slli_epi32(v, k);
  }
  template <int c>
  [[gnu::always_inline]] static I Chunk(Bytes v) {
    return _mm256_cvtepu8_epi32(c == 0 ? v : _mm_unpackhi_epi64(v, v));
  }
  [[gnu::always_inline]] static I LookUp(I v) {
    return _mm256_shuffle_epi8(
        _mm256_broadcastsi128_si256(
            _mm_load_si128(reinterpret_cast<const __m128i*>(quant_exact::kMxfp4Lookup.data()))),
        v);
  }
  // E8M0HalfToF32 of the 8 bytes at p.
  [[gnu::always_inline]] static F E8M0s(const uint8_t* p) {
    return simd::E8M0HalfToF32x8(WidenU8(p));
  }
  [[gnu::always_inline]] static F Zero() { return _mm256_setzero_ps(); }
  [[gnu::always_inline]] static F Set1(float v) { return _mm256_set1_ps(v); }
  [[gnu::always_inline]] static F Mul(F a, F b) { return _mm256_mul_ps(a, b); }
  [[gnu::always_inline]] static F Sub(F a, F b) { return _mm256_sub_ps(a, b); }
  [[gnu::always_inline]] static F Fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  [[gnu::always_inline]] static F FmaBroadcast(const float* p, F w, F c) {
    return Fma(Set1(*p), w, c);
  }
  [[gnu::always_inline]] static bool AnyNotEqual(F a, F b) {
    return _mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_NEQ_UQ)) != 0;
  }
  [[gnu::always_inline]] static F Load(const float* p) { return _mm256_load_ps(p); }
  [[gnu::always_inline]] static void Store(float* p, F v) { _mm256_store_ps(p, v); }
  [[gnu::always_inline]] static F LoadCols(const float* p, int cols) {
    return cols >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, Lanes(cols));
  }
  [[gnu::always_inline]] static void StoreCols(float* p, F v, int cols) {
    if (cols >= 8) {
      _mm256_storeu_ps(p, v);
    } else if (cols > 0) {
      _mm256_maskstore_ps(p, Lanes(cols), v);
    }
  }
  [[gnu::always_inline]] static void Prefetch(const char* p) { _mm_prefetch(p, _MM_HINT_T1); }
  [[gnu::always_inline]] static void PrefetchL1(const char* p) { _mm_prefetch(p, _MM_HINT_T0); }
};

constexpr quant_exact::Tuning kTuning{.decode_rows = 16,
                                      .stream_rows = 2,
                                      .panel_rows = 16,
                                      .panels_per_group = 8,
                                      .panel_mr = 3,
                                      .prefetch_bytes = 4096,
                                      .single_decode_rows = 32};

}  // namespace

int64_t PackedQuantExactBytes(DType dtype, int64_t n, int64_t k) {
  return quant_exact::PackedBytes<Avx2>(dtype, n, k);
}

void PackQuantExact(const MatMulArgs& args, std::byte* out, ThreadPool* pool) {
  quant_exact::Pack<Avx2>(args, out, pool);
}

void MatMulQuantExact(const MatMulArgs& args, ThreadPool* pool) {
  quant_exact::MatMul<Avx2, kTuning>(args, pool);
}

}  // namespace uc::kernels::avx2

#endif  // defined(__x86_64__)
