// F16 weights (any precision) and BF16 weights multiplied exactly: avx512::MatMulHalf on CPUs with
// AVX-512 VNNI, avx2::MatMulHalf on those with AVX2 (each level this CPU has is forced in turn),
// packed (PackedWeight, as a model's layers) or from the stored rows. Their bits are defined by a
// scalar oracle here, independent of the kernels: every output is one F32 FMA chain over k in
// order, std::fma(x, w, acc) from zero. Checked exactly for m from 1 to past a k block, odd k,
// partial tiles and panels, one to three threads; rows must not depend on the batch they are in.
// On the portable level the same products are checked against the double reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/matmul_test_util.h"
#include "kernels/ops.h"
#include "kernels/reference.h"

namespace uc::kernels {
namespace {

using testing::ExpectBitExact;
using testing::ExpectChunksGiveTheSameBits;
using testing::ExpectNearReference;
using testing::ExpectPackedBitExact;
using testing::NoteIfUntested;
using testing::RandomX;

// Normal weights with, for F16, some subnormals (|w| < 2^-14) as trained models have.
Tensor RandomHalf(DType dtype, int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  Tensor w = Tensor::Empty({n, k}, dtype);
  for (int64_t j = 0; j < n; ++j) {
    auto* row = reinterpret_cast<uint16_t*>(w.row(j));
    for (int64_t c = 0; c < k; ++c) {
      const float v = (c % 17 == 5) ? dist(rng) * 1e-4f : dist(rng);
      row[c] = dtype == DType::kF16 ? F32ToF16(v) : F32ToBf16(v);
    }
  }
  return w;
}

float WeightAt(const Tensor& w, int64_t j, int64_t c) {
  const uint16_t h = reinterpret_cast<const uint16_t*>(w.row(j))[c];
  return w.dtype() == DType::kF16 ? F16ToF32(h) : Bf16ToF32(h);
}

// The order MatMulHalf promises: y[i, j] = fma chain over c = 0..k-1 of x[i, c] * w[j, c].
Tensor FmaChainOracle(const Tensor& x, const Tensor& w) {
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  Tensor y = Tensor::Empty({m, n}, DType::kF32);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t c = 0; c < k; ++c)
        acc = std::fma(x.data<float>()[i * k + c], WeightAt(w, j, c), acc);
      y.data<float>()[i * n + j] = acc;
    }
  }
  return y;
}

struct Shape {
  int64_t m, n, k;
};
// Single rows, the decode widths (m <= 6 streams AVX2 panels, m <= 12 AVX-512 tile pairs) and
// those past them, past one block of x rows (13), partial tiles and panels and odd tile and panel
// counts (n % 16, n % 64), odd k, k past a 256 block and past an AVX2 decode block (1024), and a
// prefill-sized product.
const Shape kShapes[] = {{1, 1, 1},     {1, 33, 64},   {2, 70, 31},    {3, 96, 257},  {4, 130, 600},
                         {5, 32, 513},  {6, 50, 9},    {7, 81, 100},   {12, 64, 130}, {13, 97, 514},
                         {1, 70, 2051}, {3, 50, 1500}, {40, 65, 1027}, {70, 130, 600}};

constexpr MatMulOptions kExact{};
constexpr MatMulOptions kInt8{.precision = MatMulPrecision::kInt8};

// The options under which `dtype` takes MatMulHalf on this CPU at the forced level (BF16 at kInt8
// takes vdpbf16ps where internal::UseAvx512Bf16()).
std::vector<MatMulOptions> HalfOptions(DType dtype) {
  if (dtype == DType::kF16 || !internal::UseAvx512Bf16()) return {kExact, kInt8};
  return {kExact};
}

// The SIMD levels this CPU has, each of which has a MatMulHalf: AVX-512 VNNI, AVX2.
std::vector<internal::KernelLevel> HalfLevels() {
  std::vector<internal::KernelLevel> levels;
  if (internal::CpuSupportsAvx512Vnni()) levels.push_back(internal::KernelLevel::kAvx512);
  if (internal::CpuSupportsAvx2()) levels.push_back(internal::KernelLevel::kAvx2);
  return levels;
}

const char* LevelName(internal::KernelLevel level) {
  return level == internal::KernelLevel::kAvx512 ? "avx512"
         : level == internal::KernelLevel::kAvx2 ? "avx2"
                                                 : "portable";
}

// Bytes of the packed copy at `level`: pairs of 32-row tiles (n rounded up to 64) on AVX-512,
// panels of 16 rows on AVX2, of k 16-bit weights.
int64_t PackedBytes(internal::KernelLevel level, int64_t n, int64_t k) {
  const int64_t rows = level == internal::KernelLevel::kAvx512 ? 64 : 16;
  return (n + rows - 1) / rows * rows * k * 2;
}

// Caps the kernel level for a scope.
class ScopedLevel {
 public:
  explicit ScopedLevel(internal::KernelLevel level) { internal::ForceLevelForTesting(level); }
  ~ScopedLevel() { internal::ForceLevelForTesting(internal::KernelLevel::kAvx512); }
  ScopedLevel(const ScopedLevel&) = delete;
  ScopedLevel& operator=(const ScopedLevel&) = delete;
};

TEST(HalfMatMulTest, MatchesTheFmaChainOnEveryShape) {
  std::vector<internal::KernelLevel> levels = HalfLevels();
  levels.push_back(internal::KernelLevel::kPortable);
  for (internal::KernelLevel level : levels) {
    const ScopedLevel scoped(level);
    for (DType dtype : {DType::kF16, DType::kBF16}) {
      for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        for (const Shape& s : kShapes) {
          const std::string what = std::string(LevelName(level)) + " " +
                                   std::string(DTypeName(dtype)) + " m " + std::to_string(s.m) +
                                   " n " + std::to_string(s.n) + " k " + std::to_string(s.k) +
                                   ", " + std::to_string(threads) + " threads";
          const Tensor x = RandomX(s.m, s.k, 7);
          Tensor w = RandomHalf(dtype, s.n, s.k, 8);
          Tensor got = Tensor::Empty({s.m, s.n}, DType::kF32);
          if (level == internal::KernelLevel::kPortable) {
            MatMul(x, w, got, &pool, kExact);
            ExpectNearReference(got, x, w, 1e-4, what);
            continue;
          }
          const Tensor want = FmaChainOracle(x, w);
          for (const MatMulOptions& options : HalfOptions(dtype)) {
            MatMul(x, w, got, &pool, options);
            ExpectBitExact(got, want, what + ", stored");
            ExpectPackedBitExact(x, w, options, &pool, want, PackedBytes(level, s.n, s.k), false,
                                 what);
          }
        }
      }
    }
  }
  NoteIfUntested(internal::CpuSupportsAvx512Vnni(), "CPU lacks AVX-512 VNNI: avx512::MatMulHalf");
  NoteIfUntested(internal::CpuSupportsAvx2(), "CPU lacks AVX2: avx2::MatMulHalf");
}

// Every m from 1 to 13 and 40 on a shape with a partial last panel and tile (n = 37) and odd k,
// packed (the packed copy alone) and stored, against the oracle: the decode and prefill kernels
// and their edges.
TEST(HalfMatMulTest, MatchesTheFmaChainForEveryM) {
  const int64_t n = 37, k = 301;
  for (internal::KernelLevel level : HalfLevels()) {
    const ScopedLevel scoped(level);
    for (DType dtype : {DType::kF16, DType::kBF16}) {
      Tensor w = RandomHalf(dtype, n, k, 41);
      for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        // Packed from a copy whose stored bytes are then zeroed: only the packed copy is read.
        Tensor copy = w.Clone();
        const auto packed = PackedWeight::Pack(copy, kExact, &pool);
        ASSERT_NE(packed, nullptr);
        std::memset(copy.row(0), 0, static_cast<size_t>(copy.nbytes()));
        for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 40}) {
          const std::string what = std::string(LevelName(level)) + " " +
                                   std::string(DTypeName(dtype)) + " m " + std::to_string(m) +
                                   ", " + std::to_string(threads) + " threads";
          const Tensor x = RandomX(m, k, 42 + static_cast<uint32_t>(m));
          const Tensor want = FmaChainOracle(x, w);
          Tensor got = Tensor::Empty({m, n}, DType::kF32);
          MatMul(x, *packed, got, &pool);
          ExpectBitExact(got, want, what + ", packed");
          MatMul(x, w, got, &pool, kExact);
          ExpectBitExact(got, want, what + ", stored");
        }
      }
    }
  }
}

// The packed copy is all the kernel reads: with the stored bytes zeroed it gives the original
// product. Each level reads only its own layout (a copy packed at the other level reads as the
// stored rows), and the portable level packs nothing.
TEST(HalfMatMulTest, PackedCopyStandsAlone) {
  const std::vector<internal::KernelLevel> levels = HalfLevels();
  if (levels.empty()) GTEST_SKIP() << "CPU lacks AVX2";
  const Tensor x = RandomX(3, 200, 31);
  for (internal::KernelLevel level : levels) {
    const ScopedLevel scoped(level);
    Tensor w = RandomHalf(DType::kF16, 90, 200, 32);
    const Tensor want = FmaChainOracle(x, w);
    const auto packed = PackedWeight::Pack(w, kExact);
    ASSERT_NE(packed, nullptr);
    EXPECT_EQ(packed->avx512_layout(), level == internal::KernelLevel::kAvx512);
    // Every other level this CPU has reads the stored rows, not this layout.
    for (internal::KernelLevel other : levels) {
      if (other == level) continue;
      internal::ForceLevelForTesting(other);
      Tensor got = Tensor::Empty({3, 90}, DType::kF32);
      MatMul(x, *packed, got, nullptr);
      ExpectBitExact(got, want, std::string(LevelName(level)) + " copy at " + LevelName(other));
      internal::ForceLevelForTesting(level);
    }
    std::memset(w.row(0), 0, static_cast<size_t>(w.nbytes()));
    Tensor got = Tensor::Empty({3, 90}, DType::kF32);
    MatMul(x, *packed, got, nullptr);
    ExpectBitExact(got, want, std::string(LevelName(level)) + " zeroed source");
  }
  const ScopedLevel portable(internal::KernelLevel::kPortable);
  EXPECT_EQ(PackedWeight::Pack(RandomHalf(DType::kF16, 90, 200, 32), kExact), nullptr);
}

// A row's bits do not depend on the rows beside it, the chunk it is in, packing, threads, or
// MatMulOptions::batch_invariant.
TEST(HalfMatMulTest, RowsAreBatchInvariant) {
  const std::vector<internal::KernelLevel> levels = HalfLevels();
  if (levels.empty()) GTEST_SKIP() << "CPU lacks AVX2";
  const int64_t m = 37, n = 100, k = 300;
  const Tensor x = RandomX(m, k, 21);
  for (internal::KernelLevel level : levels) {
    const ScopedLevel scoped(level);
    for (DType dtype : {DType::kF16, DType::kBF16}) {
      const Tensor w = RandomHalf(dtype, n, k, 22);
      ThreadPool pool(2);
      const auto packed = PackedWeight::Pack(w, kExact, &pool);
      ASSERT_NE(packed, nullptr);
      Tensor all = Tensor::Empty({m, n}, DType::kF32);
      MatMul(x, *packed, all, &pool);
      ExpectChunksGiveTheSameBits(
          x, w, *packed, MatMulOptions{.batch_invariant = true}, {1, 2, 3, 4, 5, 6, 7, 12, 13, 25},
          &pool, all, std::string(LevelName(level)) + " " + std::string(DTypeName(dtype)));
    }
  }
}

}  // namespace
}  // namespace uc::kernels
