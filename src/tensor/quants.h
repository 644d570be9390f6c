// File: quants.h
// -----------------------------------------------------------------------------
// Scalar dequantization of the ggml block types added with the K-quants (layouts in dtype.h):
// one function per type that converts `num_blocks` consecutive blocks to F32. Each result is
// bit-identical to gguf-py's `gguf.quants.dequantize` (the same F32 multiplies and subtractions
// in the same order, never fused), which tests/testdata/quant checks. DequantizeRow
// (tensor.h) calls these; the optimized kernels (kernels/cpu) are tested against them.
//
// Also the weight quantizers `undercurrent quantize` writes with (QuantizeRow dispatches), and
// the scalar reference quantizers of activations for the integer MatMul
// (kernels::MatMulPrecision::kInt8), which the optimized quantizers must match bit for bit.
//
// Stateless and thread-safe. dst receives num_blocks * block size floats (or blocks).
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace uc {

void DequantizeQ5_0(const BlockQ5_0* blocks, int64_t num_blocks, float* dst);
void DequantizeQ5_1(const BlockQ5_1* blocks, int64_t num_blocks, float* dst);
void DequantizeIQ4_NL(const BlockIQ4_NL* blocks, int64_t num_blocks, float* dst);
void DequantizeQ2_K(const BlockQ2_K* blocks, int64_t num_blocks, float* dst);
void DequantizeQ3_K(const BlockQ3_K* blocks, int64_t num_blocks, float* dst);
void DequantizeQ4_K(const BlockQ4_K* blocks, int64_t num_blocks, float* dst);
void DequantizeQ5_K(const BlockQ5_K* blocks, int64_t num_blocks, float* dst);
void DequantizeQ6_K(const BlockQ6_K* blocks, int64_t num_blocks, float* dst);
void DequantizeQ8_K(const BlockQ8_K* blocks, int64_t num_blocks, float* dst);
void DequantizeMXFP4(const BlockMXFP4* blocks, int64_t num_blocks, float* dst);

// Activation quantizers: x[0, 32 * num_blocks) (or 256 * num_blocks for Q8_K) into blocks, as
// ggml's quantize_row_q8_0_ref / q8_1_ref / q8_K_ref do it. Per block, with amax = max |x|:
//   Q8_0: d = amax / 127 (F32), id = d != 0 ? 1 / d : 0, q = roundf(x * id) (ties away from
//         zero), stored d = f16(d).
//   Q8_1: as Q8_0, and s = f16(float(sum of q) * d) with the F32 d.
//   Q8_K: max = the first x with |x| == amax; amax == 0 gives d = 0 and zero quants; else
//         iscale = -127 / max, q = min(127, round-half-even(iscale * x)), d = 1 / iscale (F32),
//         bsums[i] = sum of q[16 i, 16 i + 16).
// One departure from ggml: a block with amax < kActivationTinyMax quantizes to zeros with d = 0
// (where ggml's 1 / d or -127 / max overflows to infinity). For Q8_0 / Q8_1 that changes no
// product: their f16 d is 0 below amax ~ 3.8e-6 anyway.
// Every quant is in [-127, 127] (never -128, which the integer dot products rely on).
// REQUIRES: x finite; for Q8_0 / Q8_1 also amax / 127 < 65520 (else the f16 d overflows).
inline constexpr float kActivationTinyMax = 1e-30f;
void QuantizeActivationsQ8_0(const float* x, int64_t num_blocks, BlockQ8_0* dst);
void QuantizeActivationsQ8_1(const float* x, int64_t num_blocks, BlockQ8_1* dst);
void QuantizeActivationsQ8_K(const float* x, int64_t num_blocks, BlockQ8_K* dst);

// Weight quantizers: x[0, 32 * num_blocks) (256 * num_blocks for the K types) into blocks,
// byte for byte what ggml's reference quantizers write without an importance matrix
// (quantize_row_<type>_ref, which ggml_quantize_chunk and llama.cpp's llama-quantize use when
// given no imatrix): the same F32 operations in the same order, never fused, and ggml's
// round-half-to-even nearest_int. tests/testdata/quant/quantize holds ggml's bytes.
//   Q5_0 / Q5_1: as Q4_0 / Q4_1 with 5-bit quants (d = max / -16; d = (max - min) / 31).
//   Q4_K / Q5_K: per 32 values, a (scale, min) fit by make_qkx2_quants (weights
//         sqrt(mean x^2) + |x|); both quantized to 6 bits against the super-block's largest,
//         then every value requantized against the stored f16 d * scale and dmin * min.
//   Q6_K: per 16 values a signed scale by make_qx_quants (rmse_type 1), quantized to int8
//         against the largest, values requantized against f16 d * scale.
// REQUIRES: x finite.
void QuantizeQ5_0(const float* x, int64_t num_blocks, BlockQ5_0* dst);
void QuantizeQ5_1(const float* x, int64_t num_blocks, BlockQ5_1* dst);
void QuantizeQ4_K(const float* x, int64_t num_blocks, BlockQ4_K* dst);
void QuantizeQ5_K(const float* x, int64_t num_blocks, BlockQ5_K* dst);
void QuantizeQ6_K(const float* x, int64_t num_blocks, BlockQ6_K* dst);

}  // namespace uc
