// File: cpu_kernels.h
// -----------------------------------------------------------------------------
// Raw-pointer CPU kernels behind kernels/ops.h. ops.cc checks shapes and dtypes and then calls
// one of the implementations with the same signature: uc::kernels::cpu (portable C++, any CPU),
// uc::kernels::avx2 (AVX2+FMA+F16C, only called when internal::UseAvx2()) or, for MatMul only,
// uc::kernels::avx512 (AVX-512 F/BW/VL/DQ + VNNI, only called when internal::UseAvx512Vnni();
// MatMulBf16 also needs AVX512_BF16, internal::UseAvx512Bf16()). Rope, AddInPlace and AddBias are
// cheap and have only the portable version.
//
// All pointers are to row-major, densely packed data; F32 unless a DType says otherwise.
// Outputs must not alias inputs unless noted. Functions taking a ThreadPool accept null (run
// inline); the others are single-threaded. All are reentrant: scratch space is thread-local.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "base/thread_pool.h"
#include "kernels/ops.h"
#include "tensor/dtype.h"

namespace uc::kernels {

// y[m, n] = x[m, k] · w[n, k]ᵀ. Weight row j starts at w + j * w_row_bytes.
// REQUIRES: k % DTypeBlockSize(w_dtype) == 0.
struct MatMulArgs {
  const float* x;
  int64_t m;
  int64_t k;
  const std::byte* w;
  DType w_dtype;
  int64_t n;
  int64_t w_row_bytes;
  float* y;
  // avx512::MatMulInt8, avx2::MatMulInt8, avx512::MatMulBf16, avx512::MatMulHalf,
  // avx2::MatMulHalf and the MatMulQuantExact kernels only: w as the matching packer
  // (avx512::PackInt8, ...) wrote it (w still names the stored rows), or null.
  const std::byte* w_packed = nullptr;
};

// The block format activations are quantized into for the integer MatMul
// (MatMulPrecision::kInt8): ggml's vec_dot_type of the weight dtype. kQ8_0 is BlockQ8_0 (Q8_0,
// Q4_0, Q5_0, IQ4_NL, MXFP4 weights), kQ8_1 BlockQ8_1 (Q4_1, Q5_1), kQ8_K BlockQ8_K (the K-quants
// and Q8_K). A quantized row is the row's blocks back to back.
enum class ActivationFormat { kQ8_0, kQ8_1, kQ8_K };
// REQUIRES: DTypeIsQuantized(w_dtype).
ActivationFormat Int8ActivationFormat(DType w_dtype);
// Elements per block (32 or 256) and bytes of a quantized row of k elements.
int64_t ActivationBlockSize(ActivationFormat format);
int64_t ActivationRowBytes(ActivationFormat format, int64_t k);

// Causal attention over a paged KV cache; see PagedAttention in ops.h for the layout. A
// contiguous cache is one block of `capacity` rows shared by every token.
struct AttentionArgs {
  const float* q;            // [m, num_heads * head_dim]
  const float* k_cache;      // [num_blocks * block_size, num_kv_heads * head_dim]
  const float* v_cache;      // same shape as k_cache
  const int32_t* positions;  // [m]
  int64_t m;
  AttentionShape shape;
  float* out;  // [m, num_heads * head_dim]
  int64_t block_size;
  int64_t blocks_per_seq;
  const int32_t* block_tables;  // [num_seqs * blocks_per_seq]
  const int32_t* token_seq;     // [m]; null: every token is in sequence 0

  // Block table of token i's sequence.
  const int32_t* TableOf(int64_t i) const {
    return token_seq == nullptr ? block_tables : block_tables + token_seq[i] * blocks_per_seq;
  }
};

// Runs fn over [0, n) on `pool`, or inline when pool is null.
inline void ParallelFor(ThreadPool* pool, int64_t n,
                        const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk) {
  if (n <= 0) return;
  if (pool != nullptr) {
    pool->ParallelFor(n, fn, min_chunk);
  } else {
    fn(0, n);
  }
}

// Chunks a thread for ForEachStrided's lanes.
inline constexpr int64_t kChunksPerThread = 4;

// ThreadPool::ParallelForGuided (chunks of at least min_chunk items, shrinking toward the end):
// for work whose results do not depend on how it is split. Equal chunks, four a thread, left
// one thread idle for up to a chunk at the end of every call: 5-6% of F16 decode's samples at
// 2 threads were the pool's waits (perf, Zen 4).
inline void ParallelForDynamic(ThreadPool* pool, int64_t n,
                               const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk) {
  if (n <= 0) return;
  if (pool == nullptr || pool->num_threads() == 1) {
    fn(0, n);
    return;
  }
  pool->ParallelForGuided(n, fn, std::max<int64_t>(1, min_chunk));
}

// Calls fn(i) for every i in [0, count), item i on lane i % lanes, kChunksPerThread lanes per pool
// thread taken dynamically. Striding instead of contiguous chunks balances work that grows with i
// (causal attention).
inline void ForEachStrided(ThreadPool* pool, int64_t count,
                           const std::function<void(int64_t)>& fn) {
  const int64_t threads = pool != nullptr ? pool->num_threads() : 1;
  const int64_t lanes = std::min<int64_t>(threads == 1 ? 1 : threads * kChunksPerThread, count);
  auto run_lanes = [&](int64_t begin, int64_t end) {
    for (int64_t lane = begin; lane < end; ++lane) {
      for (int64_t i = lane; i < count; i += lanes) fn(i);
    }
  };
  ParallelForDynamic(pool, lanes, run_lanes, 1);
}

// Output rows per ParallelFor chunk so that each chunk does at least ~64K multiply-adds.
inline int64_t MinRowsPerChunk(int64_t work_per_row) {
  return std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, work_per_row));
}

namespace cpu {

// Every x row is summed in the same order whatever m is (batch invariant).
void MatMul(const MatMulArgs& args, ThreadPool* pool);
inline void MatMulBatchInvariant(const MatMulArgs& args, ThreadPool* pool) { MatMul(args, pool); }
// The integer MatMul: every x row quantized with QuantizeActivations, then the integer dot
// products and F32 accumulation of reference::MatMulInt8, bit for bit. REQUIRES: w_dtype
// quantized. The AVX2 version gives the same bits.
void MatMulInt8(const MatMulArgs& args, ThreadPool* pool);
// dst = x[0, k) quantized into `format` (the scalar reference quantizers of tensor/quants.h).
// dst holds ActivationRowBytes(format, k) bytes, 4-byte aligned. REQUIRES: k a whole number of
// blocks.
void QuantizeActivations(ActivationFormat format, const float* x, int64_t k, std::byte* dst);
void CausalAttention(const AttentionArgs& args, ThreadPool* pool);
// out = x / sqrt(mean(x²) + eps) * weight, rows of length h. `out` may alias `x`.
void RmsNorm(const float* x, const void* weight, DType weight_dtype, int64_t m, int64_t h,
             float eps, float* out);
void SiluAndMul(const float* gate, const float* up, int64_t count, float* out);
// out = gelu_tanh(gate) * up (PyTorch's tanh approximation), elementwise.
void GeluTanhAndMul(const float* gate, const float* up, int64_t count, float* out);
// x = gelu_tanh(x) (PyTorch's tanh approximation, GPT-2's MLP), elementwise, in place.
void GeluTanh(float* x, int64_t count);
// Softmax over each of the m rows of length n, in place.
void Softmax(float* x, int64_t m, int64_t n);
// dst[0, n) = src converted to F32. REQUIRES: n % DTypeBlockSize(dtype) == 0.
void ConvertRow(DType dtype, const void* src, float* dst, int64_t n);
// Sum of n floats (the bandwidth probe's read loop).
double SumFloats(const float* data, int64_t n);

void Rope(const int32_t* positions, int64_t m, const float* inv_freq, int64_t num_freqs,
          int num_heads, int head_dim, RopeStyle style, float* x);
void AddInPlace(const float* x, int64_t count, float* y);
// y[m, n] += bias[n].
void AddBias(const void* bias, DType bias_dtype, int64_t m, int64_t n, float* y);

}  // namespace cpu

namespace avx2 {

// Picks MatMulStreaming for m <= kStreamingMaxRows, else MatMulTiled. Up to 8 rows, decoding
// each weight row twice from L1 is cheaper than packing tiles (measured on Zen 3).
void MatMul(const MatMulArgs& args, ThreadPool* pool);
inline constexpr int64_t kStreamingMaxRows = 8;
// Decode path: each weight row is decoded in registers and dotted with every x row (in groups
// of four) while it is hot in L1, so weights are streamed from memory exactly once.
void MatMulStreaming(const MatMulArgs& args, ThreadPool* pool);
// Prefill path: tiles of weight rows are decoded once into a thread-local F32 panel and reused
// by a 6x16 register-blocked FMA micro-kernel across all x rows.
void MatMulTiled(const MatMulArgs& args, ThreadPool* pool);
// Every output row in one summation order whatever m is (that of MatMulStreaming with m = 1),
// so a row's bits never depend on the rows beside it: weight rows decoded in registers against
// blocks of 16 x rows, two at a time. Slower than MatMulTiled for large m.
void MatMulBatchInvariant(const MatMulArgs& args, ThreadPool* pool);
// Integer MatMul, bit-identical to cpu::MatMulInt8 for every m: tiles of eight weight rows
// against panels of eight interleaved x rows (prefill) or single x rows (decode, the m % 8
// left over, and the types without a panel kernel). Reads args.w_packed (PackInt8's layout) when
// set, else the stored rows; the same bits either way. See matmul_int8_avx2.cc.
void MatMulInt8(const MatMulArgs& args, ThreadPool* pool);
// Bytes of w[n, k] of `dtype` in this MatMulInt8's packed layout, or 0 for a dtype without one.
// Q8_0 and MXFP4 (the types where it beats the stored rows below AVX-512) have one: tiles of
// eight rows (n rounded up, rows past n zero), each the eight rows' scale fields of every block
// side by side (f16 d, E8M0 e), then every block's codes, row after row (int8::PackedTile); as
// many bytes a block of eight rows as the stored ones, plus at most 24 bytes of padding a tile.
int64_t PackedInt8Bytes(DType dtype, int64_t n, int64_t k);
// Writes args' weights (w, w_dtype, n, k, w_row_bytes) in that layout to out (PackedInt8Bytes
// bytes, 32-byte aligned). REQUIRES: PackedInt8Bytes(...) > 0.
void PackInt8(const MatMulArgs& args, std::byte* out, ThreadPool* pool);
// Bit-identical to cpu::QuantizeActivations.
void QuantizeActivations(ActivationFormat format, const float* x, int64_t k, std::byte* dst);
// Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K weights multiplied exactly
// (MatMulPrecision::kExact), from PackQuantExact's layout (args.w_packed, required): the F32 codes
// of each scale group dotted with x, then the group's scale and offset applied with one FMA each,
// in the order reference::MatMulExactGrouped defines, bit for bit, for every m and thread count
// (batch invariant); avx512::MatMulQuantExact gives the same bits. Decode streams the layout at
// near the read bandwidth. See quant_exact_kernels.h.
void MatMulQuantExact(const MatMulArgs& args, ThreadPool* pool);
// Bytes of w[n, k] of `dtype` in MatMulQuantExact's layout, or 0 for a dtype without one: pairs
// of 32-row tiles (n rounded up to 64), each a run of records (256 elements for the K-quants, 32
// for the others) of the 64 rows' scale fields and 64-byte lines of their codes, one byte a row
// (quant_exact_layout.h). About the stored size (Q4_K 4.625 bits a weight against 4.5).
int64_t PackedQuantExactBytes(DType dtype, int64_t n, int64_t k);
// Writes args' weights (w, w_dtype, n, k, w_row_bytes) in that layout to out
// (PackedQuantExactBytes bytes, 64-byte aligned). REQUIRES: PackedQuantExactBytes(...) > 0. The
// avx512:: version writes the same bytes.
void PackQuantExact(const MatMulArgs& args, std::byte* out, ThreadPool* pool);
// F16 weights (any precision) and BF16 weights (any precision: no AVX512_BF16 at this level) on
// CPUs without the AVX-512 kernels: every output one F32 FMA chain over k in order from zero,
// MatMulTiled's order, so the bits are MatMulTiled's (and avx512::MatMulHalf's) for every m and
// thread count (batch invariant), packed or not. Reads args.w_packed (PackHalf's layout) when
// set: a 6x16 micro-kernel for prefill, decode streams the panels at the read bandwidth; else
// MatMulTiled. See matmul_half_avx2.cc.
void MatMulHalf(const MatMulArgs& args, ThreadPool* pool);
// Bytes of F16 or BF16 w[n, k] in MatMulHalf's packed layout: panels of 16 rows (n rounded up to
// 16), element kk of a panel's rows one 32-byte line, lines in k order, panels back to back. Not
// avx512::PackHalf's layout.
int64_t PackedHalfBytes(int64_t n, int64_t k);
// Writes args' weights (w, w_dtype, n, k, w_row_bytes) in that layout to out (PackedHalfBytes
// bytes, 32-byte aligned).
void PackHalf(const MatMulArgs& args, std::byte* out, ThreadPool* pool);
void CausalAttention(const AttentionArgs& args, ThreadPool* pool);
// The inner loops of CausalAttention for one token and the `heads` query heads of one KV head
// (q and out: heads rows of hd floats; keys / values: `rows` cache rows `stride` floats apart):
//   scores: scores[h * ld + j] = scale * q_h · key_j for h < heads, j < rows;
//   values: out_h[0, hd) += Σ_j p[h * ld + j] * value_j for h < heads.
// Each must compute a row of one query the same way whatever else the call holds (the rows are
// then batch invariant).
struct AttentionKernels {
  void (*scores)(const float* q, int heads, int hd, const float* keys, int64_t stride, int64_t rows,
                 float scale, float* scores, int64_t ld);
  void (*values)(const float* p, int64_t ld, int heads, int64_t rows, const float* values,
                 int64_t stride, int hd, float* out);
};
// CausalAttention's passes (AVX2 softmax) around other inner loops (avx512::CausalAttention).
void CausalAttentionWith(const AttentionArgs& args, ThreadPool* pool,
                         const AttentionKernels& kernels);
void RmsNorm(const float* x, const void* weight, DType weight_dtype, int64_t m, int64_t h,
             float eps, float* out);
void SiluAndMul(const float* gate, const float* up, int64_t count, float* out);
// As z * sigmoid(2 v) (= 0.5 z (1 + tanh v)), with the vectorized Exp: no libm tanh per element
// (it was a quarter of Gemma 3 270M's prefill time), no cancellation where tanh v nears -1.
void GeluTanhAndMul(const float* gate, const float* up, int64_t count, float* out);
// The same form without the product (libm's tanh was a third of GPT-2 small's prefill time).
void GeluTanh(float* x, int64_t count);
void Softmax(float* x, int64_t m, int64_t n);
void ConvertRow(DType dtype, const void* src, float* dst, int64_t n);
double SumFloats(const float* data, int64_t n);
// The compute-roofline probes (kernels/compute_peak.cc). Each returns the sum of its
// accumulators' lanes, which tells how much work it did: FmaChains 96 * iterations (while
// iterations <= 2^24), MaddubsChains 2016 * iterations (while no int32 lane wraps).
// `iterations` x 12 F32 FMAs on YMM: 192 flops per iteration.
double FmaChains(int64_t iterations);
// `iterations` x 6 (maddubs, madd by ones, add) on YMM: 32 byte products each, 384 ops per
// iteration.
double MaddubsChains(int64_t iterations);

// The tiled MatMul's packing, for the AVX-512 GEMM (decoders are AVX2 code): decodes weight rows
// [j0, j0 + cols) x [k0, k0 + kc) of `a` into packed[kk * nr + c] (columns past `cols` zero).
// `scratch` holds nr * kPackKc floats. REQUIRES: nr % 8 == 0, kc <= kPackKc, k0 and kc
// multiples of the dtype's block size (or k0 + kc == k).
inline constexpr int64_t kPackKc = 256;
void PackTileF32(const MatMulArgs& a, int64_t j0, int cols, int64_t k0, int64_t kc, int nr,
                 float* scratch, float* packed);
// Asks for the weights a tiled MatMul packs after block (tile group g of `tiles` tiles, k0) to be
// brought into L2: the next k block of the same group, or the first block of the next group
// (groups of tiles_per_group tiles of nr rows; tiles end at t_end). Packing walks each row in
// short k blocks, a pattern the hardware prefetcher does not follow.
void PrefetchNextPackBlock(const MatMulArgs& a, int64_t g, int64_t tiles, int64_t k0, int64_t t_end,
                           int nr, int64_t tiles_per_group);

}  // namespace avx2

namespace avx512 {

// The prefill MatMul (MatMulPrecision::kExact, m > kStreamingMaxRows) with 512-bit FMAs: tiles
// of 32 output columns, a 12x32 micro-kernel, the same k blocks of kPackKc as avx2::MatMulTiled
// and the same per-element order, so its results equal avx2::MatMulTiled's bit for bit.
void MatMulTiled(const MatMulArgs& args, ThreadPool* pool);

// Integer MatMul, bit-identical to cpu::MatMulInt8 for every m: tiles of sixteen weight rows
// against panels of sixteen interleaved x rows (prefill) or single x rows (decode and the m % 16
// left over), with VNNI dot products. See matmul_int8_avx512.cc.
void MatMulInt8(const MatMulArgs& args, ThreadPool* pool);
// MatMulInt8 of one x by up to kMaxMatMulSegments weights of one dtype (segments differ only in
// w, n, w_row_bytes, y and w_packed): x is quantized (and its panels built) once, and one
// ParallelFor covers every segment's tiles. Each y gets MatMulInt8's bits.
inline constexpr int kMaxMatMulSegments = 8;
void MatMulInt8Many(std::span<const MatMulArgs> segments, ThreadPool* pool);

// Bytes of w[n, k] of `dtype` in MatMulInt8's packed layout (MatMulArgs::w_packed), or 0 for a
// dtype without one. Every quantized type but Q2_K, Q3_K and Q8_K has one: each tile of sixteen
// weight rows with every block's fields interleaved across the rows (the weight rows as lanes,
// as the kernel otherwise builds them for every call); as many bytes as the stored rows (n
// rounded up to 16).
int64_t PackedInt8Bytes(DType dtype, int64_t n, int64_t k);
// Writes args' weights (w, w_dtype, n, k, w_row_bytes) in the packed layout to out
// (PackedInt8Bytes bytes, 64-byte aligned). REQUIRES: PackedInt8Bytes(...) > 0.
void PackInt8(const MatMulArgs& args, std::byte* out, ThreadPool* pool);

// BF16 weights at MatMulPrecision::kInt8 on CPUs with AVX512_BF16 (internal::UseAvx512Bf16()):
// each x row rounded to BF16 (round to nearest even, zero past k), then for every output one F32
// lane takes the weight row's element pairs (2p, 2p + 1) in order, p = 0, 1, ..., one vdpbf16ps
// each (two exact products added to the lane). That order holds for every m, tile and thread
// count, so results are bit-identical whatever the batch (batch invariant), packed or not. Reads
// args.w_packed (PackBf16's layout) when set, else the stored rows. See matmul_bf16_avx512.cc.
void MatMulBf16(const MatMulArgs& args, ThreadPool* pool);
// Bytes of BF16 w[n, k] in MatMulBf16's packed layout: tiles of 32 rows (n rounded up), each
// tile's k in pairs, pair p of the 32 rows as 32 dwords (128 bytes).
int64_t PackedBf16Bytes(int64_t n, int64_t k);
// Writes args' BF16 weights (w, n, k, w_row_bytes) in that layout to out (PackedBf16Bytes bytes,
// 64-byte aligned).
void PackBf16(const MatMulArgs& args, std::byte* out, ThreadPool* pool);

// F16 weights (any precision) and BF16 weights multiplied exactly (kExact, or kInt8 without
// AVX512_BF16): every output one F32 FMA chain over k in order from zero, MatMulTiled's order, so
// the bits are MatMulTiled's for every m (batch invariant), packed or not. Reads args.w_packed
// (PackHalf's layout) when set: decode streams it at the read bandwidth; else MatMulTiled.
// See matmul_half_avx512.cc.
void MatMulHalf(const MatMulArgs& args, ThreadPool* pool);
// Bytes of F16 or BF16 w[n, k] in MatMulHalf's packed layout: pairs of 32-row tiles (n rounded
// up to 64), element kk of a pair's 64 rows one 128-byte line, lines in k order.
int64_t PackedHalfBytes(int64_t n, int64_t k);
// Writes args' weights (w, w_dtype, n, k, w_row_bytes) in that layout to out (PackedHalfBytes
// bytes, 64-byte aligned).
void PackHalf(const MatMulArgs& args, std::byte* out, ThreadPool* pool);

// The exact quantized MatMul with 16 lanes (quant_exact_kernels.h; avx2:: has the contract).
void MatMulQuantExact(const MatMulArgs& args, ThreadPool* pool);
int64_t PackedQuantExactBytes(DType dtype, int64_t n, int64_t k);
void PackQuantExact(const MatMulArgs& args, std::byte* out, ThreadPool* pool);
// MatMulQuantExact's bits from the same layout, for CPUs with AVX512_VBMI as well
// (internal::CpuSupportsAvx512Vbmi()): vpermb widens the codes of Q5_0, Q5_1, Q5_K and Q6_K.
void MatMulQuantExactVbmi(const MatMulArgs& args, ThreadPool* pool);

// CausalAttention with 512-bit score and value loops (all of a KV head's query heads share each
// key and value load) inside avx2::CausalAttentionWith.
void CausalAttention(const AttentionArgs& args, ThreadPool* pool);

// Sum of n floats: the bandwidth probe's widest read loop (16 ZMM loads in flight, prefetch).
double SumFloats(const float* data, int64_t n);

// The compute-roofline probes (kernels/compute_peak.cc). Each returns the sum of its
// accumulators' lanes, which tells how much work it did: FmaChains 192 * iterations (while
// iterations <= 2^24), DpbusdChains 768 * iterations (while no int32 lane wraps), Dpbf16Chains
// 192 * 2^-19 * iterations (while iterations <= 2^24).
// `iterations` x 12 F32 FMAs on ZMM: 384 flops per iteration.
double FmaChains(int64_t iterations);
// `iterations` x 12 vpdpbusd on ZMM (64 byte products each): 1536 ops per iteration.
double DpbusdChains(int64_t iterations);
// `iterations` x 12 vdpbf16ps on ZMM (32 BF16 pairs each): 768 flops per iteration. Needs
// AVX512_BF16 (internal::UseAvx512Bf16()).
double Dpbf16Chains(int64_t iterations);

}  // namespace avx512

}  // namespace uc::kernels
