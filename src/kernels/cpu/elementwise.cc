// Portable row-wise and elementwise kernels.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "tensor/tensor.h"

namespace uc::kernels::cpu {
namespace {

// Returns `src` as F32: the pointer itself for F32, else a thread-local converted copy.
const float* AsF32(const void* src, DType dtype, int64_t n) {
  if (dtype == DType::kF32) return static_cast<const float*>(src);
  thread_local std::vector<float> buffer;
  buffer.resize(static_cast<size_t>(n));
  DequantizeRow(dtype, src, buffer.data(), n);
  return buffer.data();
}

float SumOfSquares(const float* x, int64_t n) {
  float partial[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) partial[j] += x[i + j] * x[i + j];
  }
  float sum = 0.0f;
  for (; i < n; ++i) sum += x[i] * x[i];
  for (float p : partial) sum += p;
  return sum;
}

// e^(a - b) with the rounding error of the float subtraction folded back in (TwoSum), so
// logits far below the maximum keep full relative precision.
float ExpOfDifference(float a, float b) {
  const float d = a - b;
  const float b_part = d - a;
  const float err = (a - (d - b_part)) + (-b - b_part);
  const float e = std::exp(d);
  return std::isfinite(err) ? e + e * err : e;  // err is NaN when a is -inf: e is 0
}

}  // namespace

void RmsNorm(const float* x, const void* weight, DType weight_dtype, int64_t m, int64_t h,
             float eps, float* out) {
  const float* w = AsF32(weight, weight_dtype, h);
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x + i * h;
    const float mean = SumOfSquares(row, h) / static_cast<float>(h);
    const float scale = 1.0f / std::sqrt(mean + eps);
    float* dst = out + i * h;
    for (int64_t j = 0; j < h; ++j) dst[j] = row[j] * scale * w[j];
  }
}

void GeluTanhAndMul(const float* gate, const float* up, int64_t count, float* out) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < count; ++i) {
    const float z = gate[i];
    const float inner = kSqrt2OverPi * (z + 0.044715f * z * z * z);
    out[i] = 0.5f * z * (1.0f + std::tanh(inner)) * up[i];
  }
}

void GeluTanh(float* x, int64_t count) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < count; ++i) {
    const float z = x[i];
    x[i] = 0.5f * z * (1.0f + std::tanh(kSqrt2OverPi * (z + 0.044715f * z * z * z)));
  }
}

void SiluAndMul(const float* gate, const float* up, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) {
    out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  }
}

void Softmax(float* x, int64_t m, int64_t n) {
  for (int64_t i = 0; i < m; ++i) {
    float* row = x + i * n;
    const float max_value = *std::max_element(row, row + n);
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      row[j] = ExpOfDifference(row[j], max_value);
      sum += row[j];
    }
    const float inv_sum = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j < n; ++j) row[j] *= inv_sum;
  }
}

void ConvertRow(DType dtype, const void* src, float* dst, int64_t n) {
  DequantizeRow(dtype, src, dst, n);
}

double SumFloats(const float* data, int64_t n) {
  float partial[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) partial[j] += data[i + j];
  }
  double sum = 0.0;
  for (; i < n; ++i) sum += data[i];
  for (float p : partial) sum += p;
  return sum;
}

void AddInPlace(const float* x, int64_t count, float* y) {
  for (int64_t i = 0; i < count; ++i) y[i] += x[i];
}

void AddBias(const void* bias, DType bias_dtype, int64_t m, int64_t n, float* y) {
  const float* b = AsF32(bias, bias_dtype, n);
  for (int64_t i = 0; i < m; ++i) {
    float* row = y + i * n;
    for (int64_t j = 0; j < n; ++j) row[j] += b[j];
  }
}

}  // namespace uc::kernels::cpu
