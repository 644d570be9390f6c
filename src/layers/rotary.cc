#include "layers/rotary.h"

namespace uc::layers {

Rotary::Rotary(std::vector<float> inv_freq, int head_dim, kernels::RopeStyle style)
    : inv_freq_(std::move(inv_freq)), head_dim_(head_dim), style_(style) {
  UC_CHECK(static_cast<int>(inv_freq_.size()) * 2 <= head_dim_, "rotary dim exceeds head_dim");
}

void Rotary::Forward(std::span<const int32_t> positions, int num_heads, Tensor& x,
                     ThreadPool* pool) const {
  kernels::Rope(positions, inv_freq_, num_heads, head_dim_, style_, x, pool);
}

}  // namespace uc::layers
