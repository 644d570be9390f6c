// Micro-benchmarks for the CPU kernels. Decode MatMul is reported in weight bytes/s next to the
// machine's read bandwidth measured in the same process (the roofline); prefill MatMul in
// FLOP/s. Decode weights rotate through enough copies to overflow the last-level cache, so the
// numbers are DRAM numbers, as in a real model whose weights are far larger than the cache.
//
//   kernels_benchmark --benchmark_filter=Decode
//   kernels_benchmark --benchmark_filter=MatMulPrecision --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true     (kExact against kInt8, one line)
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "kernels/bandwidth.h"
#include "kernels/dispatch.h"
#include "kernels/ops.h"
#include "kernels/reference.h"

namespace uc::kernels {
namespace {

constexpr DType kDTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                             DType::kQ4_1, DType::kQ5_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
constexpr int64_t kHidden = 2048;                   // TinyLlama-1.1B hidden size
constexpr int64_t kIntermediate = 5632;             // and MLP width
constexpr int64_t kColdBytes = int64_t{160} << 20;  // well past a 32 MiB L3
constexpr int64_t kRooflineBytes = int64_t{1} << 30;

ThreadPool* Pool(int threads) {
  static std::map<int, std::unique_ptr<ThreadPool>> pools;
  auto& pool = pools[threads];
  if (!pool) pool = std::make_unique<ThreadPool>(threads);
  return pool.get();
}

// Read bandwidth for `threads` threads, measured once per process.
double Roofline(int threads) {
  static std::map<int, double> cache;
  auto it = cache.find(threads);
  if (it == cache.end()) {
    it = cache.emplace(threads, MeasureReadBandwidth(Pool(threads), kRooflineBytes, 7)).first;
  }
  return it->second;
}

Tensor RandomF32(Shape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Tensor t = Tensor::Empty(std::move(shape), DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

// Sets the f16 scale fields of a block to 0.01 (the block's other bytes are random codes).
void SetScales(DType dtype, std::byte* block) {
  const uint16_t d = F32ToF16(0.01f);
  auto put = [&](size_t offset) { std::memcpy(block + offset, &d, 2); };
  switch (dtype) {
    case DType::kQ4_1:
    case DType::kQ5_1:
      put(offsetof(BlockQ5_1, m));
      put(0);
      break;
    case DType::kQ2_K:
      put(offsetof(BlockQ2_K, d));
      put(offsetof(BlockQ2_K, dmin));
      break;
    case DType::kQ3_K:
      put(offsetof(BlockQ3_K, d));
      break;
    case DType::kQ4_K:
    case DType::kQ5_K:
      put(offsetof(BlockQ4_K, d));
      put(offsetof(BlockQ4_K, dmin));
      break;
    case DType::kQ6_K:
      put(offsetof(BlockQ6_K, d));
      break;
    case DType::kQ8_K: {
      const float f = 0.01f;
      std::memcpy(block, &f, 4);
      break;
    }
    default:  // Q8_0, Q4_0, Q5_0, IQ4_NL: d first
      put(0);
  }
}

// [n, k] weights of `dtype`: 64 distinct random rows, repeated (values do not affect speed).
Tensor BenchWeights(int64_t n, int64_t k, DType dtype, uint32_t seed) {
  constexpr int64_t kDistinct = 64;
  const Tensor source = RandomF32({kDistinct, k}, seed);
  Tensor w = Tensor::Empty({n, k}, dtype);
  std::vector<uint8_t> row(static_cast<size_t>(w.row_bytes()));
  for (int64_t r = 0; r < kDistinct && r < n; ++r) {
    const float* x = source.data<float>() + r * k;
    for (int64_t b = 0; b < k; b += DTypeBlockSize(dtype)) {
      std::byte* out = w.row(r) + DTypeRowBytes(dtype, b);
      switch (dtype) {
        case DType::kF32:
          std::memcpy(out, x + b, 4);
          break;
        case DType::kF16: {
          const uint16_t h = F32ToF16(x[b]);
          std::memcpy(out, &h, 2);
          break;
        }
        case DType::kBF16: {
          const uint16_t h = F32ToBf16(x[b]);
          std::memcpy(out, &h, 2);
          break;
        }
        default:  // quantized: random codes and plausible scales
          for (int64_t i = 0; i < DTypeBlockBytes(dtype); ++i) {
            out[i] = static_cast<std::byte>(static_cast<int>(std::fabs(x[b + i % 32]) * 97));
          }
          SetScales(dtype, out);
      }
    }
  }
  for (int64_t r = kDistinct; r < n; ++r)
    std::memcpy(w.row(r), w.row(r % kDistinct), w.row_bytes());
  return w;
}

void SetPath(bool portable, benchmark::State& state) {
  internal::ForcePortableForTesting(portable);
  if (!portable && !HasAvx2()) state.SkipWithError("CPU lacks AVX2");
}

// The weights MatMul(x, w, ...) reads with MatMulPrecision::kExact: w's packed copy where
// PackedWeight::Pack makes one for this CPU and `pack`, else w itself (null).
std::shared_ptr<const PackedWeight> ExactPacked(const Tensor& w, bool pack) {
  return pack ? PackedWeight::Pack(w, MatMulOptions{}) : nullptr;
}

void MatMulMaybePacked(const Tensor& x, const Tensor& w, const PackedWeight* packed, Tensor& y,
                       ThreadPool* pool) {
  if (packed != nullptr) {
    MatMul(x, *packed, y, pool);
  } else {
    MatMul(x, w, y, pool);
  }
}

// Args: dtype index, threads, portable (0/1), pack (0/1: PackedWeight, as a model's layers).
void BM_MatMulDecode(benchmark::State& state) {
  const DType dtype = kDTypes[state.range(0)];
  const int threads = static_cast<int>(state.range(1));
  SetPath(state.range(2) != 0, state);
  std::vector<Tensor> copies;
  std::vector<std::shared_ptr<const PackedWeight>> packed;
  const Tensor first = BenchWeights(kIntermediate, kHidden, dtype, 1);
  const int64_t copies_needed = std::max<int64_t>(2, kColdBytes / first.nbytes() + 1);
  for (int64_t c = 0; c < copies_needed; ++c) {
    copies.push_back(first.Clone());
    packed.push_back(ExactPacked(copies.back(), state.range(3) != 0));
  }
  const Tensor x = RandomF32({1, kHidden}, 2);
  Tensor y = Tensor::Empty({1, kIntermediate}, DType::kF32);
  const double roofline = Roofline(threads);
  size_t next = 0;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    MatMulMaybePacked(x, copies[next], packed[next].get(), y, Pool(threads));
    next = (next + 1) % copies.size();
    benchmark::DoNotOptimize(y.raw());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double bytes = static_cast<double>(first.nbytes()) * state.iterations();
  state.counters["weight_B/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsRate);
  state.counters["roofline_B/s"] = roofline;
  state.counters["of_roofline"] = bytes / seconds / roofline;
  state.SetLabel(std::string(DTypeName(dtype)) + (packed[0] != nullptr ? " packed" : ""));
  internal::ForcePortableForTesting(false);
}

// Args: dtype index, threads, portable (0/1), pack (0/1). m = 64 tokens of prefill.
void BM_MatMulPrefill(benchmark::State& state) {
  const DType dtype = kDTypes[state.range(0)];
  const int threads = static_cast<int>(state.range(1));
  SetPath(state.range(2) != 0, state);
  constexpr int64_t kTokens = 64;
  const Tensor w = BenchWeights(kIntermediate, kHidden, dtype, 1);
  const std::shared_ptr<const PackedWeight> packed = ExactPacked(w, state.range(3) != 0);
  const Tensor x = RandomF32({kTokens, kHidden}, 2);
  Tensor y = Tensor::Empty({kTokens, kIntermediate}, DType::kF32);
  for (auto _ : state) {
    MatMulMaybePacked(x, w, packed.get(), y, Pool(threads));
    benchmark::DoNotOptimize(y.raw());
  }
  state.counters["FLOP/s"] = benchmark::Counter(
      2.0 * kTokens * kIntermediate * kHidden * state.iterations(), benchmark::Counter::kIsRate);
  state.SetLabel(std::string(DTypeName(dtype)) + (packed != nullptr ? " packed" : ""));
  internal::ForcePortableForTesting(false);
}

void MatMulArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"dtype", "threads", "portable", "pack"});
  for (int64_t d = 0; d < static_cast<int64_t>(std::size(kDTypes)); ++d) {
    for (int64_t threads : {1, 2}) b->Args({d, threads, 0, 0});
  }
  // F16, BF16 and the quantized types with the packed exact layout as a model's layers read
  // them: packed where the CPU has a layout for them.
  for (int64_t d = 1; d < static_cast<int64_t>(std::size(kDTypes)); ++d) {
    if (d > 2 && !reference::HasExactGrouped(kDTypes[d])) continue;
    for (int64_t threads : {1, 2}) b->Args({d, threads, 0, 1});
  }
  b->Args({2, 2, 1, 0});  // BF16 on the portable path, for comparison
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_MatMulDecode)->Apply(MatMulArgs);
BENCHMARK(BM_MatMulPrefill)->Apply(MatMulArgs);

// MatMul with MatMulOptions::batch_invariant (a model's default) as its layers run it: w packed
// where PackedWeight::Pack has a layout for those options on this CPU, else the stored rows.
// Args: dtype index, tokens (1: decode, the weights cold as in BM_MatMulDecode; more: prefill,
// the weights warm), threads.
void BM_MatMulInvariant(benchmark::State& state) {
  const DType dtype = kDTypes[state.range(0)];
  const int64_t tokens = state.range(1);
  const int threads = static_cast<int>(state.range(2));
  SetPath(false, state);
  const MatMulOptions options{.batch_invariant = true};
  std::vector<Tensor> copies = {BenchWeights(kIntermediate, kHidden, dtype, 1)};
  const int64_t copies_needed =
      tokens == 1 ? std::max<int64_t>(2, kColdBytes / copies[0].nbytes() + 1) : 1;
  while (static_cast<int64_t>(copies.size()) < copies_needed) copies.push_back(copies[0].Clone());
  std::vector<std::shared_ptr<const PackedWeight>> packed;
  for (const Tensor& w : copies) packed.push_back(PackedWeight::Pack(w, options, Pool(threads)));
  const Tensor x = RandomF32({tokens, kHidden}, 2);
  Tensor y = Tensor::Empty({tokens, kIntermediate}, DType::kF32);
  size_t next = 0;
  for (auto _ : state) {
    if (packed[next] != nullptr) {
      MatMul(x, *packed[next], y, Pool(threads));
    } else {
      MatMul(x, copies[next], y, Pool(threads), options);
    }
    next = (next + 1) % copies.size();
    benchmark::DoNotOptimize(y.raw());
  }
  state.counters["weight_B/s"] = benchmark::Counter(
      static_cast<double>(copies[0].nbytes()) * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["FLOP/s"] = benchmark::Counter(
      2.0 * tokens * kIntermediate * kHidden * state.iterations(), benchmark::Counter::kIsRate);
  state.SetLabel(std::string(DTypeName(dtype)) + (packed[0] != nullptr ? " packed" : ""));
}
// F32, F16 and BF16 at one token (decode), 64 (BM_MatMulPrefill's) and 512.
BENCHMARK(BM_MatMulInvariant)
    ->ArgNames({"dtype", "tokens", "threads"})
    ->ArgsProduct({{0, 1, 2}, {1, 64, 512}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// kExact against kInt8 on TinyLlama's MLP shape (w: [5632, 2048]). Args: dtype (index into
// kPrecisionDTypes), tokens (1: decode; 16: the batched decode of sixteen sequences; both with the
// weights cold as in BM_MatMulDecode; 128: prefill, weights warm), precision (0: kExact, 1: kInt8),
// threads, level (the highest kernel level allowed: 1 AVX2, 2 AVX-512 VNNI; only the integer MatMul
// has an AVX-512 version; 3: AVX-512 VNNI with the weights packed, PackedWeight: kInt8, and kExact
// for the dtypes with the packed exact layout; 4: AVX2 with the weights packed: kExact, and Q8_0's
// and MXFP4's tiles at kInt8; 5: as 3 at kExact without the AVX512_VBMI kernel). BF16 at kInt8
// is the vdpbf16ps MatMul at levels 2 and 3 (AVX512_BF16), whatever the CPU table prefers.
constexpr DType kPrecisionDTypes[] = {DType::kQ4_0, DType::kQ4_K,  DType::kQ6_K,  DType::kQ8_0,
                                      DType::kQ5_K, DType::kQ4_1,  DType::kQ5_0,  DType::kQ3_K,
                                      DType::kBF16, DType::kMXFP4, DType::kIQ4_NL};
void BM_MatMulPrecision(benchmark::State& state) {
  const DType dtype = kPrecisionDTypes[state.range(0)];
  const int64_t tokens = state.range(1);
  const auto precision = state.range(2) != 0 ? MatMulPrecision::kInt8 : MatMulPrecision::kExact;
  const int threads = static_cast<int>(state.range(3));
  const bool avx512 = state.range(4) == 2 || state.range(4) == 3 || state.range(4) == 5;
  const bool pack = state.range(4) >= 3;
  const bool no_vbmi = state.range(4) == 5;
  SetPath(false, state);
  if (avx512 && !internal::CpuSupportsAvx512Vnni()) {
    state.SkipWithError("CPU lacks AVX-512 VNNI");
  }
  if (avx512 && dtype == DType::kBF16 && !internal::CpuSupportsAvx512Bf16()) {
    state.SkipWithError("CPU lacks AVX512_BF16");
  }
  internal::ForceLevelForTesting(avx512 ? internal::KernelLevel::kAvx512
                                        : internal::KernelLevel::kAvx2);
  // BF16 at levels 2 and 3 measures vdpbf16ps also where the CPU table prefers F32 FMAs.
  internal::ForceBf16DotForTesting(true);
  internal::ForceNoVbmiForTesting(no_vbmi);
  std::vector<Tensor> copies = {BenchWeights(kIntermediate, kHidden, dtype, 1)};
  const int64_t copies_needed =
      tokens <= 16 ? std::max<int64_t>(2, kColdBytes / copies[0].nbytes() + 1) : 1;
  while (static_cast<int64_t>(copies.size()) < copies_needed) copies.push_back(copies[0].Clone());
  std::vector<std::shared_ptr<const PackedWeight>> packed;
  if (pack) {
    for (const Tensor& w : copies) {
      packed.push_back(PackedWeight::Pack(w, {.precision = precision}, Pool(threads)));
      if (packed.back() == nullptr) state.SkipWithError("no packed layout for this dtype");
    }
  }
  const Tensor x = RandomF32({tokens, kHidden}, 2);
  Tensor y = Tensor::Empty({tokens, kIntermediate}, DType::kF32);
  size_t next = 0;
  for (auto _ : state) {
    if (pack) {
      MatMul(x, *packed[next], y, Pool(threads));
    } else {
      MatMul(x, copies[next], y, Pool(threads), precision);
    }
    next = (next + 1) % copies.size();
    benchmark::DoNotOptimize(y.raw());
  }
  const double bytes = static_cast<double>(copies[0].nbytes()) * state.iterations();
  state.counters["weight_B/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsRate);
  state.counters["FLOP/s"] = benchmark::Counter(
      2.0 * tokens * kIntermediate * kHidden * state.iterations(), benchmark::Counter::kIsRate);
  state.SetLabel(std::string(DTypeName(dtype)) +
                 (precision == MatMulPrecision::kExact
                      ? (pack ? (avx512 ? (no_vbmi ? " exact packed no-vbmi" : " exact packed")
                                        : " exact avx2 packed")
                              : " exact")
                  : pack   ? (avx512 ? " int8 avx512 packed" : " int8 avx2 packed")
                  : avx512 ? " int8 avx512"
                           : " int8 avx2"));
  internal::ForceLevelForTesting(internal::KernelLevel::kAvx512);
  internal::ForceBf16DotForTesting(false);
  internal::ForceNoVbmiForTesting(false);
}

// Per dtype, shape and thread count: kExact, kInt8 on AVX2 and kInt8 on AVX-512 VNNI.
void PrecisionArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"dtype", "tokens", "int8", "threads", "level"});
  for (int64_t d = 0; d < static_cast<int64_t>(std::size(kPrecisionDTypes)); ++d) {
    for (int64_t tokens : {1, 16, 128}) {
      for (int64_t threads : {1, 2}) {
        b->Args({d, tokens, 0, threads, 2});
        if (reference::HasExactGrouped(kPrecisionDTypes[d])) {  // the packed exact layout
          b->Args({d, tokens, 0, threads, 3});
          b->Args({d, tokens, 0, threads, 4});
          b->Args({d, tokens, 0, threads, 5});
        }
        b->Args({d, tokens, 1, threads, 1});
        b->Args({d, tokens, 1, threads, 2});
        const DType dtype = kPrecisionDTypes[d];
        if (dtype != DType::kQ3_K) {  // the types with a packed layout
          b->Args({d, tokens, 1, threads, 3});
        }
        if (dtype == DType::kMXFP4 || dtype == DType::kQ8_0) {  // AVX2's own tiles
          b->Args({d, tokens, 1, threads, 4});
        }
      }
    }
  }
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_MatMulPrecision)->Apply(PrecisionArgs);

// Args: tokens (1 = decode at position `context - 1`, else prefill of the last tokens), context,
// threads. TinyLlama attention: 32 heads, 4 KV heads, head_dim 64.
void BM_Attention(benchmark::State& state) {
  const int64_t m = state.range(0);
  const int64_t context = state.range(1);
  const int threads = static_cast<int>(state.range(2));
  const AttentionShape shape{32, 4, 64, 0.125f};
  const Tensor q = RandomF32({m, 32 * 64}, 1);
  const Tensor k = RandomF32({context, 4 * 64}, 2);
  const Tensor v = RandomF32({context, 4 * 64}, 3);
  std::vector<int32_t> positions;
  for (int64_t i = 0; i < m; ++i) positions.push_back(static_cast<int32_t>(context - m + i));
  Tensor out = Tensor::Empty({m, 32 * 64}, DType::kF32);
  for (auto _ : state) {
    CausalAttention(q, k, v, positions, shape, out, Pool(threads));
    benchmark::DoNotOptimize(out.raw());
  }
  double pairs = 0;  // (query, key) pairs per head
  for (int32_t p : positions) pairs += p + 1;
  state.counters["FLOP/s"] =
      benchmark::Counter(4.0 * pairs * 64 * 32 * state.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Attention)
    ->ArgNames({"tokens", "context", "threads"})
    ->Args({1, 2048, 1})
    ->Args({1, 2048, 2})
    ->Args({256, 256, 2})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// One decode token's attention over a cache that memory, not the caches, holds: 48 caches of
// `context` positions (at 576, 110 MiB: more than an L3) taken in turn, as a model's layers are
// between the weights streaming past. paged 1: PagedAttention over blocks of 16 (as the engine
// runs), 0: CausalAttention over one contiguous cache. Either way a KV head's keys are a quarter
// of each cache row (4 KV heads), read 1 KiB apart: 5-7.5 GB/s at one thread on a Zen 4 and a
// Zen 5 where the weights stream at 24-33, paged or not, until the passes asked for the next
// block's columns ahead of use (attention_avx2.cc: 12 GB/s at one thread, 19-20 at two, on the
// Zen 5; docs/benchmarks.md has the layouts tried before).
void BM_AttentionDecodeCold(benchmark::State& state) {
  const int64_t context = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  const bool paged = state.range(2) != 0;
  constexpr int kCaches = 48, kBlock = 16;
  const AttentionShape shape{32, 4, 64, 0.125f};
  const int64_t rows = (context + kBlock - 1) / kBlock * kBlock;
  const Tensor q = RandomF32({1, 32 * 64}, 1);
  std::vector<Tensor> k, v;
  for (int i = 0; i < kCaches; ++i) {
    k.push_back(RandomF32({rows, 4 * 64}, 2 + 2 * i));
    v.push_back(RandomF32({rows, 4 * 64}, 3 + 2 * i));
  }
  const std::vector<int32_t> positions{static_cast<int32_t>(context - 1)};
  std::vector<int32_t> table(static_cast<size_t>(rows / kBlock));
  for (size_t b = 0; b < table.size(); ++b) table[b] = static_cast<int32_t>(b);
  const std::vector<int32_t> token_seq{0};
  const PagedKvLayout layout{kBlock, static_cast<int>(table.size()), table, token_seq};
  Tensor out = Tensor::Empty({1, 32 * 64}, DType::kF32);
  int i = 0;
  for (auto _ : state) {
    if (paged) {
      PagedAttention(q, k[i], v[i], layout, positions, shape, out, Pool(threads));
    } else {
      CausalAttention(q, k[i], v[i], positions, shape, out, Pool(threads));
    }
    benchmark::DoNotOptimize(out.raw());
    i = (i + 1) % kCaches;
  }
  state.counters["kv_B/s"] = benchmark::Counter(2.0 * context * 4 * 64 * 4 * state.iterations(),
                                                benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AttentionDecodeCold)
    ->ArgNames({"context", "threads", "paged"})
    ->ArgsProduct({{576, 4096}, {1, 2}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

void BM_ReadBandwidth(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  double bytes_per_second = 0;
  for (auto _ : state) bytes_per_second = MeasureReadBandwidth(Pool(threads), kRooflineBytes, 7);
  state.counters["read_B/s"] = bytes_per_second;
}
BENCHMARK(BM_ReadBandwidth)->ArgName("threads")->Arg(1)->Arg(2)->Iterations(1)->UseRealTime();

}  // namespace
}  // namespace uc::kernels
