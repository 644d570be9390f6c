// AVX2 row-wise and elementwise kernels: RmsNorm, SiluAndMul, GeluTanhAndMul, GeluTanh, Softmax,
// row conversion and the streaming sum used to measure read bandwidth.
#if defined(__x86_64__)

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/check.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_avx2.h"

namespace uc::kernels::avx2 {
namespace {

// Returns `src` as F32: the pointer itself for F32, else a thread-local converted copy.
const float* AsF32(const void* src, DType dtype, int64_t n) {
  if (dtype == DType::kF32) return static_cast<const float*>(src);
  thread_local std::vector<float> buffer;
  buffer.resize(static_cast<size_t>(n));
  ConvertRow(dtype, src, buffer.data(), n);
  return buffer.data();
}

float SumOfSquares(const float* x, int64_t n) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
#pragma GCC unroll 16
    for (int v = 0; v < 4; ++v) {
      const __m256 xv = _mm256_loadu_ps(x + i + 8 * v);
      acc[v] = _mm256_fmadd_ps(xv, xv, acc[v]);
    }
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 xv = _mm256_loadu_ps(x + i);
    acc[0] = _mm256_fmadd_ps(xv, xv, acc[0]);
  }
  if (i < n) {
    const __m256 xv = _mm256_maskload_ps(x + i, TailMask(n - i));
    acc[1] = _mm256_fmadd_ps(xv, xv, acc[1]);
  }
  return HorizontalSum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

// out = x * scale * w, elementwise over n.
void ScaleRow(const float* x, const float* w, float scale, int64_t n, float* out) {
  const __m256 vscale = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 xv = _mm256_mul_ps(_mm256_loadu_ps(x + i), vscale);
    _mm256_storeu_ps(out + i, _mm256_mul_ps(xv, _mm256_loadu_ps(w + i)));
  }
  for (; i < n; ++i) out[i] = x[i] * scale * w[i];
}

__m256 SiluTimes(__m256 g, __m256 u) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 denom = _mm256_add_ps(one, Exp(_mm256_sub_ps(_mm256_setzero_ps(), g)));
  return _mm256_mul_ps(_mm256_div_ps(g, denom), u);
}

// gelu_tanh(z) * u = z * sigmoid(2 v) * u, v = sqrt(2 / pi) (z + 0.044715 z^3).
__m256 GeluTanhTimes(__m256 z, __m256 u) {
  const __m256 cube = _mm256_mul_ps(_mm256_mul_ps(z, z), z);
  const __m256 v = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f),
                                 _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), cube, z));
  const __m256 minus_two_v = _mm256_mul_ps(_mm256_set1_ps(-2.0f), v);
  const __m256 denom = _mm256_add_ps(_mm256_set1_ps(1.0f), Exp(minus_two_v));
  return _mm256_mul_ps(_mm256_div_ps(z, denom), u);
}

// out[i] = fn(gate[i], up[i]) for i < count, eight lanes at a time (the tail masked).
template <typename Fn>
void GatedMap(const float* gate, const float* up, int64_t count, float* out, Fn fn) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    _mm256_storeu_ps(out + i, fn(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  }
  if (i < count) {
    const __m256i mask = TailMask(count - i);
    const __m256 r = fn(_mm256_maskload_ps(gate + i, mask), _mm256_maskload_ps(up + i, mask));
    _mm256_maskstore_ps(out + i, mask, r);
  }
}

// Adds the eight lanes of v to *sum in double (softmax sums tens of thousands of terms).
void AccumulateDouble(__m256 v, __m256d* sum) {
  *sum = _mm256_add_pd(*sum, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
  *sum = _mm256_add_pd(*sum, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

// e^(a - b) with the rounding error of the float subtraction folded back in (TwoSum), so
// logits far below the maximum keep full relative precision.
__m256 ExpOfDifference(__m256 a, __m256 b) {
  const __m256 neg_b = _mm256_sub_ps(_mm256_setzero_ps(), b);
  const __m256 d = _mm256_add_ps(a, neg_b);
  const __m256 b_part = _mm256_sub_ps(d, a);
  const __m256 a_part = _mm256_sub_ps(d, b_part);
  const __m256 err = _mm256_add_ps(_mm256_sub_ps(a, a_part), _mm256_sub_ps(neg_b, b_part));
  const __m256 e = Exp(d);
  // err is NaN when a is -inf (a masked logit); e is then 0 and stays 0.
  const __m256 finite_err = _mm256_and_ps(err, _mm256_cmp_ps(err, err, _CMP_ORD_Q));
  return _mm256_fmadd_ps(e, finite_err, e);
}

float ExpOfDifference(float a, float b) {
  const float d = a - b;
  const float b_part = d - a;
  const float err = (a - (d - b_part)) + (-b - b_part);
  const float e = std::exp(d);
  return std::isfinite(err) ? e + e * err : e;  // err is NaN when a is -inf: e is 0
}

void SoftmaxRow(float* row, int64_t n) {
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(row + j));
  float max_value = HorizontalMax(vmax);
  for (; j < n; ++j) max_value = std::max(max_value, row[j]);

  const __m256 shift = _mm256_set1_ps(max_value);
  __m256d vsum = _mm256_setzero_pd();
  for (j = 0; j + 8 <= n; j += 8) {
    const __m256 e = ExpOfDifference(_mm256_loadu_ps(row + j), shift);
    _mm256_storeu_ps(row + j, e);
    AccumulateDouble(e, &vsum);
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, vsum);
  double sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; j < n; ++j) {
    row[j] = ExpOfDifference(row[j], max_value);
    sum += row[j];
  }
  const float inv_sum = static_cast<float>(1.0 / sum);
  const __m256 vinv = _mm256_set1_ps(inv_sum);
  for (j = 0; j + 8 <= n; j += 8) {
    _mm256_storeu_ps(row + j, _mm256_mul_ps(_mm256_loadu_ps(row + j), vinv));
  }
  for (; j < n; ++j) row[j] *= inv_sum;
}

}  // namespace

void RmsNorm(const float* x, const void* weight, DType weight_dtype, int64_t m, int64_t h,
             float eps, float* out) {
  const float* w = AsF32(weight, weight_dtype, h);
  for (int64_t i = 0; i < m; ++i) {
    const float mean = SumOfSquares(x + i * h, h) / static_cast<float>(h);
    ScaleRow(x + i * h, w, 1.0f / std::sqrt(mean + eps), h, out + i * h);
  }
}

void GeluTanhAndMul(const float* gate, const float* up, int64_t count, float* out) {
  GatedMap(gate, up, count, out, GeluTanhTimes);
}

void SiluAndMul(const float* gate, const float* up, int64_t count, float* out) {
  GatedMap(gate, up, count, out, SiluTimes);
}

void GeluTanh(float* x, int64_t count) {
  GatedMap(x, x, count, x, [](__m256 z, __m256) { return GeluTanhTimes(z, _mm256_set1_ps(1.0f)); });
}

void Softmax(float* x, int64_t m, int64_t n) {
  for (int64_t i = 0; i < m; ++i) SoftmaxRow(x + i * n, n);
}

void ConvertRow(DType dtype, const void* src, float* dst, int64_t n) {
  const bool known = VisitDecoder(dtype, [&](auto decoder) {
    DecodeRow<decltype(decoder)>(static_cast<const std::byte*>(src), n, dst);
  });
  UC_CHECK(known, "ConvertRow: %s is not a weight dtype", DTypeName(dtype).data());
}

double SumFloats(const float* data, int64_t n) {
  // Eight independent adds per iteration: 256 bytes in flight, enough to stay load-bound.
  __m256 acc[8];
#pragma GCC unroll 16
  for (auto& a : acc) a = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
#pragma GCC unroll 16
    for (int v = 0; v < 8; ++v) acc[v] = _mm256_add_ps(acc[v], _mm256_loadu_ps(data + i + 8 * v));
  }
#pragma GCC unroll 16
  for (int v = 1; v < 8; ++v) acc[0] = _mm256_add_ps(acc[0], acc[v]);
  double sum = HorizontalSum(acc[0]);
  for (; i < n; ++i) sum += data[i];
  return sum;
}

}  // namespace uc::kernels::avx2

#endif  // defined(__x86_64__)
