#include "kernels/reference.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "base/check.h"

namespace uc::kernels::reference {
namespace {

std::vector<float> Row(const Tensor& t, int64_t r) {
  std::vector<float> out(static_cast<size_t>(t.dim(-1)));
  DequantizeRow(t.dtype(), t.row(r), out.data(), t.dim(-1));
  return out;
}

}  // namespace

void MatMul(const Tensor& x, const Tensor& w, Tensor& y) {
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  UC_CHECK(w.dim(1) == k && y.dim(0) == m && y.dim(1) == n, "reference::MatMul: bad shapes");
  const float* xs = x.data<float>();
  for (int64_t j = 0; j < n; ++j) {
    const std::vector<float> wj = Row(w, j);
    for (int64_t i = 0; i < m; ++i) {
      double sum = 0.0;
      for (int64_t l = 0; l < k; ++l) sum += double{xs[i * k + l]} * wj[l];
      y.data<float>()[i * n + j] = static_cast<float>(sum);
    }
  }
}

void AddBias(const Tensor& bias, Tensor& y) {
  const std::vector<float> b = bias.ToFloatVector();
  const int64_t n = y.dim(1);
  for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] += b[i % n];
}

void AddInPlace(const Tensor& x, Tensor& y) {
  for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] += x.data<float>()[i];
}

void RmsNorm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) {
  const int64_t m = x.dim(0), h = x.dim(1);
  const std::vector<float> w = weight.ToFloatVector();
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x.data<float>() + i * h;
    double ss = 0.0;
    for (int64_t j = 0; j < h; ++j) ss += double{row[j]} * row[j];
    const double scale = 1.0 / std::sqrt(ss / static_cast<double>(h) + eps);
    for (int64_t j = 0; j < h; ++j) {
      out.data<float>()[i * h + j] = static_cast<float>(row[j] * scale * w[j]);
    }
  }
}

void Rope(std::span<const int32_t> positions, std::span<const float> inv_freq, int num_heads,
          int head_dim, RopeStyle style, Tensor& x) {
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  for (size_t i = 0; i < positions.size(); ++i) {
    for (int h = 0; h < num_heads; ++h) {
      float* head = x.data<float>() + (static_cast<int64_t>(i) * num_heads + h) * head_dim;
      for (int64_t j = 0; j < half; ++j) {
        const float angle = static_cast<float>(positions[i]) * inv_freq[j];
        const double c = std::cos(angle);  // float overloads: cosf, sinf
        const double s = std::sin(angle);
        float& a = style == RopeStyle::kInterleaved ? head[2 * j] : head[j];
        float& b = style == RopeStyle::kInterleaved ? head[2 * j + 1] : head[j + half];
        const double x0 = a, x1 = b;
        a = static_cast<float>(x0 * c - x1 * s);
        b = static_cast<float>(x0 * s + x1 * c);
      }
    }
  }
}

void SiluAndMul(const Tensor& gate, const Tensor& up, Tensor& out) {
  for (int64_t i = 0; i < out.numel(); ++i) {
    const double g = gate.data<float>()[i];
    out.data<float>()[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up.data<float>()[i]);
  }
}

void GeluTanhAndMul(const Tensor& gate, const Tensor& up, Tensor& out) {
  for (int64_t i = 0; i < out.numel(); ++i) {
    const double g = gate.data<float>()[i];
    const double inner = std::sqrt(2.0 / std::numbers::pi) * (g + 0.044715 * g * g * g);
    out.data<float>()[i] =
        static_cast<float>(0.5 * g * (1.0 + std::tanh(inner)) * up.data<float>()[i]);
  }
}

void CausalAttention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     std::span<const int32_t> positions, const AttentionShape& shape, Tensor& out) {
  const int hd = shape.head_dim;
  const int group = shape.num_heads / shape.num_kv_heads;
  const int64_t kv_stride = int64_t{shape.num_kv_heads} * hd;
  for (size_t i = 0; i < positions.size(); ++i) {
    for (int h = 0; h < shape.num_heads; ++h) {
      const int64_t q_offset = (static_cast<int64_t>(i) * shape.num_heads + h) * hd;
      const float* qh = q.data<float>() + q_offset;
      const int64_t kv_offset = int64_t{h / group} * hd;
      // Scores of positions first..positions[i]; masked positions take no part.
      const int64_t first = shape.FirstPosition(positions[i]);
      std::vector<double> scores(static_cast<size_t>(positions[i] - first) + 1);
      for (size_t t = 0; t < scores.size(); ++t) {
        const float* key = k_cache.data<float>() + (first + t) * kv_stride + kv_offset;
        double dot = 0.0;
        for (int d = 0; d < hd; ++d) dot += double{qh[d]} * key[d];
        scores[t] = dot * shape.scale;
        if (shape.softcap > 0.0f) scores[t] = shape.softcap * std::tanh(scores[t] / shape.softcap);
      }
      const double max_score = *std::max_element(scores.begin(), scores.end());
      double sum = 0.0;
      for (double& s : scores) sum += (s = std::exp(s - max_score));
      for (int d = 0; d < hd; ++d) {
        double acc = 0.0;
        for (size_t t = 0; t < scores.size(); ++t) {
          acc += scores[t] * v_cache.data<float>()[(first + t) * kv_stride + kv_offset + d];
        }
        out.data<float>()[q_offset + d] = static_cast<float>(acc / sum);
      }
    }
  }
}

void PagedAttention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                    const PagedKvLayout& layout, std::span<const int32_t> positions,
                    const AttentionShape& shape, Tensor& out) {
  const int64_t width = k_cache.dim(1);
  const int64_t q_width = q.dim(1);
  for (size_t i = 0; i < positions.size(); ++i) {
    const int64_t len = int64_t{positions[i]} + 1;
    Tensor k = Tensor::Empty({len, width}, DType::kF32);
    Tensor v = Tensor::Empty({len, width}, DType::kF32);
    const int32_t* table = layout.block_tables.data() + layout.token_seq[i] * layout.blocks_per_seq;
    for (int64_t t = 0; t < len; ++t) {
      const int64_t row =
          int64_t{table[t / layout.block_size]} * layout.block_size + t % layout.block_size;
      std::copy_n(k_cache.data<float>() + row * width, width, k.data<float>() + t * width);
      std::copy_n(v_cache.data<float>() + row * width, width, v.data<float>() + t * width);
    }
    Tensor qi = Tensor::Empty({1, q_width}, DType::kF32);
    std::copy_n(q.data<float>() + static_cast<int64_t>(i) * q_width, q_width, qi.data<float>());
    Tensor oi = Tensor::Empty({1, q_width}, DType::kF32);
    const int32_t pos[1] = {positions[i]};
    CausalAttention(qi, k, v, pos, shape, oi);
    std::copy_n(oi.data<float>(), q_width, out.data<float>() + static_cast<int64_t>(i) * q_width);
  }
}

void EmbeddingLookup(const Tensor& table, std::span<const int32_t> ids, Tensor& out) {
  const int64_t h = table.dim(1);
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::vector<float> row = Row(table, ids[i]);
    std::copy(row.begin(), row.end(), out.data<float>() + static_cast<int64_t>(i) * h);
  }
}

void Softmax(Tensor& x) {
  const int64_t n = x.dim(-1);
  for (int64_t r = 0; r < x.num_rows(); ++r) {
    float* row = x.data<float>() + r * n;
    const double max_value = *std::max_element(row, row + n);
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j) sum += std::exp(row[j] - max_value);
    for (int64_t j = 0; j < n; ++j) row[j] = static_cast<float>(std::exp(row[j] - max_value) / sum);
  }
}

}  // namespace uc::kernels::reference
