// Rotary position embedding (one implementation: it is a small fraction of a step). The angles
// are computed once per token in float, as position * inv_freq then cosf / sinf, matching the
// model oracle bit for bit before the rotation.
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"

namespace uc::kernels::cpu {
namespace {

void RotateHead(const float* cos_t, const float* sin_t, int64_t num_freqs, RopeStyle style,
                float* head) {
  // Pair j is (2j, 2j + 1) when interleaved, (j, j + num_freqs) for rotate_half.
  const int64_t step = style == RopeStyle::kInterleaved ? 2 : 1;
  const int64_t partner = style == RopeStyle::kInterleaved ? 1 : num_freqs;
  for (int64_t j = 0; j < num_freqs; ++j) {
    float* a = head + j * step;
    float* b = a + partner;
    const float x0 = *a;
    const float x1 = *b;
    *a = x0 * cos_t[j] - x1 * sin_t[j];
    *b = x0 * sin_t[j] + x1 * cos_t[j];
  }
}

}  // namespace

void Rope(const int32_t* positions, int64_t m, const float* inv_freq, int64_t num_freqs,
          int num_heads, int head_dim, RopeStyle style, float* x) {
  thread_local std::vector<float> table;
  table.resize(static_cast<size_t>(2 * num_freqs));
  float* cos_t = table.data();
  float* sin_t = table.data() + num_freqs;
  const int64_t width = int64_t{num_heads} * head_dim;
  for (int64_t i = 0; i < m; ++i) {
    const float position = static_cast<float>(positions[i]);
    for (int64_t j = 0; j < num_freqs; ++j) {
      const float angle = position * inv_freq[j];
      cos_t[j] = std::cos(angle);
      sin_t[j] = std::sin(angle);
    }
    for (int h = 0; h < num_heads; ++h) {
      RotateHead(cos_t, sin_t, num_freqs, style, x + i * width + int64_t{h} * head_dim);
    }
  }
}

}  // namespace uc::kernels::cpu
