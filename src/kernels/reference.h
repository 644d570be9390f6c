// File: reference.h
// -----------------------------------------------------------------------------
// Scalar reference implementations of every op in kernels/ops.h: the oracle the optimized
// kernels are tested against. Plain loops, weights dequantized with DequantizeRow (tensor/
// tensor.h; the scalar dequantizers of the ggml block types are in tensor/quants.h, checked bit
// for bit against gguf-py by quant_kernels_test), sums in double; nothing here is fast. Same shapes
// and contracts as ops.h (minus the thread pool); shapes are checked only lightly, since callers
// are tests.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/ops.h"
#include "tensor/tensor.h"

namespace uc::kernels::reference {

void MatMul(const Tensor& x, const Tensor& w, Tensor& y);
void AddBias(const Tensor& bias, Tensor& y);
void AddInPlace(const Tensor& x, Tensor& y);
void RmsNorm(const Tensor& x, const Tensor& weight, float eps, Tensor& out);
// Angles are float(position) * inv_freq[j] in float, then cosf / sinf (as the model oracle).
void Rope(std::span<const int32_t> positions, std::span<const float> inv_freq, int num_heads,
          int head_dim, RopeStyle style, Tensor& x);
void SiluAndMul(const Tensor& gate, const Tensor& up, Tensor& out);
void GeluTanhAndMul(const Tensor& gate, const Tensor& up, Tensor& out);
void CausalAttention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     std::span<const int32_t> positions, const AttentionShape& shape, Tensor& out);
// Gathers each token's sequence into a contiguous cache and runs CausalAttention on it.
void PagedAttention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                    const PagedKvLayout& layout, std::span<const int32_t> positions,
                    const AttentionShape& shape, Tensor& out);
void EmbeddingLookup(const Tensor& table, std::span<const int32_t> ids, Tensor& out);
void Softmax(Tensor& x);

}  // namespace uc::kernels::reference
