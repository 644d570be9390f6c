// File: ops.h
// -----------------------------------------------------------------------------
// The CPU math the model needs, on Tensor handles. Each op checks shapes and dtypes (UC_CHECK:
// a mismatch is a programming error) and dispatches to an optimized implementation
// (kernels/cpu/*_avx2.cc when the CPU has AVX2+FMA+F16C, else portable code). Every op has a
// scalar reference in kernels/reference.h that tests compare against.
//
// Conventions: activations are F32, row-major, [num_tokens, features]. Weights keep their stored
// dtype (F32, F16, BF16, or a ggml block type: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K,
// Q4_K, Q5_K, Q6_K, Q8_K, MXFP4) and are converted inside the kernels, never expanded in memory;
// the conversion of the types since Q5_0 is bit-identical to gguf-py's dequantization. `pool` may
// be null (single-threaded). Outputs must be preallocated with the documented shape and must not
// alias inputs unless the op says "in place".
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "base/huge_pages.h"
#include "base/thread_pool.h"
#include "tensor/tensor.h"

namespace uc::kernels {

// How MatMul multiplies quantized and BF16 weights (F32 and F16 weights ignore it: always exact).
//   kExact: weights are converted to F32 and multiplied with the F32 activations; within 1e-5 of
//     reference::MatMul. The oracle path.
//   kInt8: as llama.cpp's CPU backend. Each x row is quantized once per call, per block, to 8
//     bits in the format ggml pairs with the weight type: Q8_0 for Q8_0, Q4_0, Q5_0, IQ4_NL and
//     MXFP4; Q8_1 for Q4_1 and Q5_1; Q8_K for Q2_K..Q6_K and Q8_K (quantizers in
//     tensor/quants.h). Each weight block is dotted with its activation block in exact integer
//     arithmetic, and the block sums are scaled and accumulated in F32 in one fixed order,
//     defined by reference::MatMulInt8. The result is bit-identical on every path (portable, AVX2,
//     AVX-512 VNNI), for every thread count, and for a row of x whatever else is in the batch (no
//     dependence on m). Against kExact it carries the 8-bit activation error: per element of x
//     at most 0.57 d (d = the block's max |x| / 127; 0.5 d for Q8_K), so
//     |y_int8 - y_exact| <= sum_l |w_l| * 0.57 d_l plus F32 rounding, typically ~0.5% of |y|.
//     REQUIRES: x finite and, for the Q8_0 / Q8_1 formats, every |x| < 65504 * 127.
//     BF16 weights on CPUs with AVX512_BF16 where vdpbf16ps outruns F32 FMAs (a fixed table:
//     internal::CpuPrefersBf16Dot(), today AMD Zen 4 and later): each x element rounded to BF16
//     (llama.cpp's vec_dot_type for BF16; relative error at most 2^-9 per element) and
//     multiplied with vdpbf16ps in the fixed order reference::MatMulBf16 defines, bit-identical
//     for every m and thread count, packed or not (twice the F32 FMA rate there: prefill ~1.9x
//     kExact's). Elsewhere BF16 weights ignore kInt8 (kExact: on Intel CPUs with AVX512_BF16
//     the F32 FMA prefill is the faster one). MatMulArithmetic() says which runs.
enum class MatMulPrecision { kExact, kInt8 };

// How MatMul multiplies.
struct MatMulOptions {
  MatMulPrecision precision = MatMulPrecision::kExact;
  // Every row of y is summed in one order whatever m is, so a row's bits never depend on the
  // rows beside it (the other requests of a batch, the prefill chunk it falls in). kInt8 (for
  // quantized w, and BF16 w with AVX512_BF16), F16 and BF16 w on CPUs with AVX2 or AVX-512 VNNI
  // (one FMA chain over k per output at every m, the same bits at both levels), Q8_0 / Q4_0 /
  // Q4_1 / Q4_K / Q5_K / Q6_K w packed at kExact on AVX-512 VNNI (the grouped order), and the
  // portable kernels always are; otherwise with AVX2 kExact costs prefill speed, since the tiled
  // GEMM's order differs from the decode path's (see the README's numbers).
  bool batch_invariant = false;
};

// y[m, n] = x[m, k] · w[n, k]ᵀ.  x, y: F32; w: any weight dtype (k a whole number of blocks).
// kExact: decode (m small) streams each weight row once for all m rows; larger m is tiled so
// each weight tile is converted once and reused across rows. kInt8: each block of eight weight
// rows (sixteen with AVX-512 VNNI) is unpacked once and dotted with up to 64 quantized x rows,
// eight (sixteen) x rows at a time where m allows (the prefill shape). This overload reads the
// weights in their stored layout; a model's layers multiply by a PackedWeight where the kernel
// has a layout of its own (below). Threads split the output columns (weight rows).
void MatMul(const Tensor& x, const Tensor& w, Tensor& y, ThreadPool* pool,
            const MatMulOptions& options);
inline void MatMul(const Tensor& x, const Tensor& w, Tensor& y, ThreadPool* pool,
                   MatMulPrecision precision = MatMulPrecision::kExact) {
  MatMul(x, w, y, pool, MatMulOptions{.precision = precision});
}

// A weight matrix prepared once for repeated MatMuls with fixed options (a model's linear
// layers): where the CPU's kernel for those options reads a layout of its own, a copy of the
// weights in it, so that no call rearranges them again. Today that is kInt8 on AVX-512 VNNI for
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q4_K, Q5_K and Q6_K: tiles of sixteen rows with each
// block's fields interleaved across the rows (decode of the 4-bit types 1.4-1.9x faster than
// from the stored rows, batches of 16 1.0-1.4x; see matmul_int8_avx512.cc); and kInt8 on
// AVX512_BF16 for BF16: tiles of 32 rows with k in pairs, pair p of the 32 rows one 128-byte run
// (matmul_bf16_avx512.cc); and on AVX-512 VNNI, F16 at any precision and BF16 otherwise: tiles of
// 32 rows, element kk of the 32 rows one 64-byte line (matmul_half_avx512.cc; decode streams it
// at the read bandwidth, where the stored rows' dot products lost L1 to F32 x), on AVX2 without
// it panels of 16 rows, element kk of the 16 rows one 32-byte line (matmul_half_avx2.cc); and on
// AVX-512 VNNI, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K and Q6_K at kExact: pairs of 32-row tiles, each
// record's scale fields and then 64-byte lines of the rows' codes (matmul_quant_exact_avx512.cc;
// decode 1.5-2.5x faster than from the stored rows). As many bytes as the stored weights, or a few
// percent more (n rounded up to the tile). Results are bit-identical to MatMul on the stored
// weights, except kExact for those quantized types: their packed kernel sums in the order
// reference::MatMulExactGrouped defines (within 1e-5 of the stored rows' result, and the same for
// every m). Immutable after Pack; safe to share between threads.
class PackedWeight {
 public:
  // A packed copy of w for MatMuls with `options` on this CPU, or null where the kernel reads
  // the stored layout (any other dtype, precision or CPU): multiply by w itself then. Keeps a
  // reference to w's storage (source()). `pool` may be null.
  static std::shared_ptr<const PackedWeight> Pack(const Tensor& w, const MatMulOptions& options,
                                                  ThreadPool* pool = nullptr);

  const Tensor& source() const { return source_; }
  const MatMulOptions& options() const { return options_; }
  int64_t packed_bytes() const { return static_cast<int64_t>(data_.size()); }
  const std::byte* packed() const { return data_.data(); }
  // Whether packed() is in a layout of the AVX-512 kernels. F16 and BF16 are packed differently
  // below that level (avx2::PackHalf); a MatMul at the other level reads the stored rows. Q8_0
  // and MXFP4 at kInt8 below AVX-512 are packed for avx2::MatMulInt8.
  bool avx512_layout() const { return avx512_layout_; }

 private:
  PackedWeight(Tensor source, const MatMulOptions& options, int64_t bytes, bool avx512_layout);

  Tensor source_;
  MatMulOptions options_;
  bool avx512_layout_;
  HugePageBuffer data_;  // decode streams it: 2 MiB pages where the OS grants them
};

// MatMul(x, w.source(), y, pool, w.options()), reading the packed copy where the kernel in use
// is the one it was packed for (a test may force a lower kernel level: then the stored rows).
void MatMul(const Tensor& x, const PackedWeight& w, Tensor& y, ThreadPool* pool);

// One MatMul of x by each of several weights (a layer's q, k and v projections, or gate and up):
// *y = x · wᵀ with `options`, reading `packed` (a PackedWeight::Pack(*w, options), or null: the
// stored rows) where its kernel is in use.
struct MatMulOperand {
  const Tensor* w;
  const PackedWeight* packed;
  MatMulOptions options;
  Tensor* y;
};
// Bit-identical to MatMul per operand. Where the kernel prepares x (kInt8 on AVX-512 VNNI: the
// quantized rows and their panels) and the operands share the dtype, that is done once and one
// parallel loop covers every operand's rows: fewer passes over x and one synchronization.
void MatMulMany(const Tensor& x, std::span<const MatMulOperand> operands, ThreadPool* pool);

// y[m, n] += bias[n] (bias: F32, F16 or BF16). In place.
void AddBias(const Tensor& bias, Tensor& y);

// The row-wise and elementwise ops below take an optional pool: given one, a call over enough
// elements (kParallelRowOpElements per thread at least) splits its rows among the pool's
// threads. Every row (element) is computed as alone, so the results are the same bits either
// way.
inline constexpr int64_t kParallelRowOpElements = 16384;

// y += x, elementwise over equal shapes (F32). In place on y.
void AddInPlace(const Tensor& x, Tensor& y, ThreadPool* pool = nullptr);

// out[m, h] = x / sqrt(mean(x²) + eps) * weight.  x, out: F32 [m, h]; weight: [h] any float
// dtype. `out` may alias `x`.
void RmsNorm(const Tensor& x, const Tensor& weight, float eps, Tensor& out,
             ThreadPool* pool = nullptr);

// out[m, h] = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias, per row (LayerNorm; the
// variance is the biased one, as torch.nn.LayerNorm). x, out: F32 [m, h]; weight, bias: F32 [h].
// `out` may alias `x`. Sums are taken in double, so the result is within float rounding of the
// exact value whatever the row's offset.
void LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out,
               ThreadPool* pool = nullptr);

// Rotary position embedding, in place on x [m, num_heads * head_dim] (F32). Token i is at
// position positions[i]. For pair j (j < rotary_dim / 2) the angle is
// positions[i] * inv_freq[j]. kInterleaved rotates adjacent pairs (2j, 2j+1) (llama2.c, GGUF
// "normal"); kHalf rotates (j, j + rotary_dim/2) (Hugging Face rotate_half, GGUF "neox").
// Dimensions past rotary_dim are left unchanged.
enum class RopeStyle { kInterleaved, kHalf };
void Rope(std::span<const int32_t> positions, std::span<const float> inv_freq, int num_heads,
          int head_dim, RopeStyle style, Tensor& x, ThreadPool* pool = nullptr);

// out[m, i] = silu(gate[m, i]) * up[m, i], silu(z) = z / (1 + exp(-z)). All F32.
void SiluAndMul(const Tensor& gate, const Tensor& up, Tensor& out, ThreadPool* pool = nullptr);

// out[m, i] = gelu_tanh(gate[m, i]) * up[m, i] with PyTorch's tanh approximation
// gelu_tanh(z) = 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z³))) (Gemma). All F32.
void GeluTanhAndMul(const Tensor& gate, const Tensor& up, Tensor& out, ThreadPool* pool = nullptr);

// x = gelu_tanh(x) (above) or x = gelu(x) = 0.5 x (1 + erf(x / sqrt(2))) (the exact GELU), in
// place on F32 x: the activation of an ungated MLP (GPT-2's "gelu_new", GPT-NeoX's "gelu").
void GeluTanh(Tensor& x, ThreadPool* pool = nullptr);
void Gelu(Tensor& x, ThreadPool* pool = nullptr);

// x = cap * tanh(x / cap), elementwise, in place (F32; Gemma 2's logit soft-capping).
// REQUIRES: cap > 0.
void SoftCap(float cap, Tensor& x);

// x *= factor, elementwise, in place (F32).
void Scale(float factor, Tensor& x);

// Causal grouped-query attention of new tokens against one sequence's contiguous KV cache.
//   q:        [m, num_heads * head_dim]      (F32, RoPE already applied)
//   k_cache:  [capacity, num_kv_heads * head_dim] (F32), rows 0..max(positions) filled
//   v_cache:  same shape as k_cache
//   out:      [m, num_heads * head_dim]
// Token i attends to cache rows 0..positions[i] inclusive. Query head h uses KV head
// h / (num_heads / num_kv_heads). Scores are scaled by `scale` (normally 1/sqrt(head_dim)).
// REQUIRES: num_heads % num_kv_heads == 0; positions[i] < capacity.
// window > 0 limits each token to the last `window` positions (itself included: keys at
// positions[i] - window < t <= positions[i]), the sliding window of Mistral and Gemma; 0 attends
// to the whole prefix. softcap > 0 squashes each scaled score s to softcap * tanh(s / softcap)
// before the softmax (Gemma 2). sinks non-null (gpt-oss): head h's softmax denominator gets one
// more term, exp(sinks[h]), a learned logit with no value (the weights then sum to below 1).
struct AttentionShape {
  int num_heads;
  int num_kv_heads;
  int head_dim;
  float scale;
  int window = 0;
  float softcap = 0.0f;
  const float* sinks = nullptr;  // [num_heads] (this rank's heads) or null
  // First position token at `position` attends to.
  int64_t FirstPosition(int64_t position) const {
    return window > 0 && position >= window ? position - window + 1 : 0;
  }
};
void CausalAttention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     std::span<const int32_t> positions, const AttentionShape& shape, Tensor& out,
                     ThreadPool* pool);

// Where each token's keys and values live in a paged KV cache (vLLM's PagedAttention layout).
// The cache is [num_blocks * block_size, num_kv_heads * head_dim]: block b holds rows
// [b * block_size, (b + 1) * block_size). Token i belongs to sequence token_seq[i], whose block
// table is block_tables[token_seq[i] * blocks_per_seq, ... + blocks_per_seq); its key at
// sequence position t sits in row table[t / block_size] * block_size + t % block_size.
struct PagedKvLayout {
  int block_size = 0;
  int blocks_per_seq = 0;                 // row length of block_tables
  std::span<const int32_t> block_tables;  // [num_seqs * blocks_per_seq]
  std::span<const int32_t> token_seq;     // [m]: the sequence of each token
};

// Causal grouped-query attention of a batch of tokens from many sequences against the paged
// KV cache: token i attends to positions FirstPosition(positions[i])..positions[i] of its own
// sequence. Shapes and head mapping as CausalAttention; k_cache/v_cache: [num_blocks *
// block_size, num_kv_heads * head_dim]. REQUIRES: every block a token reaches is a valid block
// id and its rows are filled (table entries before a token's window are never read).
// Each token's result depends only on its own q row and its sequence's cache rows, never on the
// rest of the batch.
void PagedAttention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                    const PagedKvLayout& layout, std::span<const int32_t> positions,
                    const AttentionShape& shape, Tensor& out, ThreadPool* pool);

// out[i, :] = table[ids[i], :] converted to F32.  table: [vocab, h] any weight dtype;
// out: [ids.size(), h] F32. REQUIRES: 0 <= ids[i] < vocab.
void EmbeddingLookup(const Tensor& table, std::span<const int32_t> ids, Tensor& out);

// In-place softmax over the last dimension of x [m, n] (F32), numerically stable.
void Softmax(Tensor& x);

// True when the optimized AVX2 path is in use (for logs and benchmarks).
bool HasAvx2();

// The multiply-add MatMul runs on for weights of `dtype` at `precision` on this CPU, named as
// ComputePeak::kind (kernels/compute_peak.h) names it: "f32" (F32 FMA), "bf16" (vdpbf16ps) or
// "int8" (integer dot products). Benchmarks divide prefill by that instruction's peak.
std::string_view MatMulArithmetic(DType dtype, MatMulPrecision precision);

}  // namespace uc::kernels
