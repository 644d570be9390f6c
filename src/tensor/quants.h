// File: quants.h
// -----------------------------------------------------------------------------
// Scalar dequantization of the ggml block types added with the K-quants (layouts in dtype.h):
// one function per type that converts `num_blocks` consecutive blocks to F32. Each result is
// bit-identical to gguf-py's `gguf.quants.dequantize` (the same F32 multiplies and subtractions
// in the same order, never fused), which tests/testdata/quant checks. DequantizeRow
// (tensor.h) calls these; the optimized kernels (kernels/cpu) are tested against them.
// Stateless and thread-safe. dst receives num_blocks * block size floats.
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

}  // namespace uc
