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
// MatMul(..., MatMulPrecision::kInt8) for a quantized w, and the definition of its bits. Each
// x row is quantized with the tensor/quants.h quantizer of the weight's activation format (Q8_0
// for Q8_0, Q4_0, Q5_0, IQ4_NL, MXFP4; Q8_1 for Q4_1, Q5_1; Q8_K for Q2_K..Q6_K, Q8_K). Then, for
// each output, with block b of the weight row and of the x row (every operation an F32 operation,
// rounded, in the order written; sums of integers are exact int32):
//   32-element blocks: sumi = sum of qw * qx over the block, qw the element's integer value
//     (Q4_0: nibble - 8, Q5_0: q - 16, Q4_1 / Q5_1: the unsigned q, IQ4_NL / MXFP4: the table
//     value); term = (dw * dx) * float(sumi) (MXFP4's dw: E8M0HalfToF32(e)), plus (mw * sx) for
//     Q4_1 / Q5_1 (sx: the Q8_1 s).
//   Super-blocks: with sc_i, m_i the integer scale and min of 16-element sub-block i (a 32-element
//     group's pair repeated for Q4_K / Q5_K; m_i = 0 where there is none, sc_i = 1 for Q8_K),
//     qw signed (Q3_K: q in [-4, 3], Q6_K: q - 32) and bsum_i the Q8_K block's bsums:
//     sumi = sum_i sc_i * sum(qw * qy over sub-block i), summin = sum_i m_i * bsum_i;
//     term = (dy * d) * float(sumi), minus (dy * dmin) * float(summin) for Q2_K, Q4_K, Q5_K.
//   y = (((0 + term_0) + term_1) + ...) over the blocks in order.
// Every MatMulInt8 path gives exactly these bits.
void MatMulInt8(const Tensor& x, const Tensor& w, Tensor& y);
// MatMul(..., MatMulPrecision::kInt8) for a BF16 w on CPUs with AVX512_BF16, and the definition
// of its bits: each x element is rounded to BF16 (F32ToBf16, round to nearest even), then for
// each output acc = 0 and, for the pairs p = 0, 1, ... of the row (an element past k counts 0),
// acc = (acc + x[2p + 1] * w[2p + 1]) + x[2p] * w[2p] in F32, the products exact: vdpbf16ps's
// definition, which the instruction meets for operands and sums of normal range (it flushes
// denormals to zero).
void MatMulBf16(const Tensor& x, const Tensor& w, Tensor& y);
// True for the weight dtypes MatMulExactGrouped defines: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K,
// Q6_K, MXFP4.
bool HasExactGrouped(DType dtype);
// MatMul(..., MatMulPrecision::kExact) for those dtypes on CPUs with AVX2, packed
// (PackedWeight), and the definition of its bits. A weight of group g (the elements sharing a
// scale: 32, or 16 for Q6_K) is q dl - ml, q its unsigned integer code (Q8_0: the signed one;
// Q6_K: the stored 6 bits), dl and ml the dequantizer's F32 scale and offset (Q4_0: d and 8 d,
// Q5_0: d and 16 d, Q4_1 / Q5_1: d and -m, Q4_K / Q5_K: d * scale and dmin * min, Q6_K: d * scale
// and 32 dl, Q8_0: d, 0; MXFP4: q = kMxfp4Values[code] + 12 (twice the FP4 value, made
// unsigned), E8M0HalfToF32(e) and 12 dl). With nml = -ml computed as (0 - dmin) * min (Q4_K, Q5_K),
// dl * -8 (Q4_0), dl * -16 (Q5_0), m (Q4_1, Q5_1), dl * -32 (Q6_K) or dl * -12 (MXFP4), and S_g the
// sum of x over the group from 0 in element order, each output is
//   acc = 0; for each group g in order: P = 0; for each element l of g in order:
//   P = fma(x_l, q_l, P); then acc = fma(dl_g, P, acc) and acc = fma(nml_g, S_g, acc) (nml 0 for
//   Q8_0) -- every fma one rounding. Within 1e-5 of MatMul (the same sum, rounded otherwise).
void MatMulExactGrouped(const Tensor& x, const Tensor& w, Tensor& y);
void AddBias(const Tensor& bias, Tensor& y);
void AddInPlace(const Tensor& x, Tensor& y);
void RmsNorm(const Tensor& x, const Tensor& weight, float eps, Tensor& out);
// Mean and variance in double (the two-pass definition), the result rounded once.
void LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out);
// In place, in double.
void GeluTanh(Tensor& x);
void Gelu(Tensor& x);
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
