// F16 weights (any precision) and BF16 weights multiplied exactly, on CPUs with AVX-512 VNNI:
// avx512::MatMulHalf, packed (PackedWeight, as a model's layers) or from the stored rows. Its bits
// are defined by a scalar oracle here, independent of the kernels: every output is one F32 FMA
// chain over k in order, std::fma(x, w, acc) from zero. Checked exactly for m from 1 to past a k
// block, odd k, partial tiles, one to three threads; rows must not depend on the batch they are
// in. Elsewhere (AVX2, portable) the same products are checked against the double reference.
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
// Single rows, the decode widths that pair tiles (m <= 4) and those that do not (5..12), past
// one block of x rows (13), partial tiles and odd tile counts (n % 64), odd k, k past a 256
// block, and a prefill-sized product.
const Shape kShapes[] = {{1, 1, 1},      {1, 33, 64},   {2, 70, 31},   {3, 96, 257},
                         {4, 130, 600},  {5, 32, 513},  {12, 64, 130}, {13, 97, 514},
                         {40, 65, 1027}, {70, 130, 600}};

constexpr MatMulOptions kExact{};
constexpr MatMulOptions kInt8{.precision = MatMulPrecision::kInt8};

// The options under which `dtype` takes MatMulHalf on this CPU (BF16 at kInt8 takes vdpbf16ps
// where internal::UseAvx512Bf16()).
std::vector<MatMulOptions> HalfOptions(DType dtype) {
  if (dtype == DType::kF16 || !internal::UseAvx512Bf16()) return {kExact, kInt8};
  return {kExact};
}

TEST(HalfMatMulTest, MatchesTheFmaChainOnEveryShape) {
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      for (const Shape& s : kShapes) {
        const std::string what = std::string(DTypeName(dtype)) + " m " + std::to_string(s.m) +
                                 " n " + std::to_string(s.n) + " k " + std::to_string(s.k) + ", " +
                                 std::to_string(threads) + " threads";
        const Tensor x = RandomX(s.m, s.k, 7);
        Tensor w = RandomHalf(dtype, s.n, s.k, 8);
        Tensor got = Tensor::Empty({s.m, s.n}, DType::kF32);
        if (!internal::UseAvx512Vnni()) {
          MatMul(x, w, got, &pool, kExact);
          ExpectNearReference(got, x, w, 1e-4, what);
          continue;
        }
        const Tensor want = FmaChainOracle(x, w);
        for (const MatMulOptions& options : HalfOptions(dtype)) {
          MatMul(x, w, got, &pool, options);
          ExpectBitExact(got, want, what + ", stored");
          // Pairs of 32-row tiles: n rounded up to 64 rows of k 16-bit weights.
          ExpectPackedBitExact(x, w, options, &pool, want, (s.n + 63) / 64 * 64 * s.k * 2, false,
                               what);
        }
      }
    }
  }
  NoteIfUntested(internal::UseAvx512Vnni(),
                 "CPU lacks AVX-512 VNNI: F16 and BF16 take the AVX2 kernels here; "
                 "avx512::MatMulHalf");
}

// The packed copy is all the kernel reads: with the stored bytes zeroed it gives the original
// product, and below the AVX-512 level nothing is packed.
TEST(HalfMatMulTest, PackedCopyStandsAlone) {
  if (!internal::UseAvx512Vnni()) GTEST_SKIP() << "CPU lacks AVX-512 VNNI";
  const Tensor x = RandomX(3, 200, 31);
  Tensor w = RandomHalf(DType::kF16, 90, 200, 32);
  const Tensor want = FmaChainOracle(x, w);
  const auto packed = PackedWeight::Pack(w, kExact);
  ASSERT_NE(packed, nullptr);
  std::memset(w.row(0), 0, static_cast<size_t>(w.nbytes()));
  Tensor got = Tensor::Empty({3, 90}, DType::kF32);
  MatMul(x, *packed, got, nullptr);
  ExpectBitExact(got, want, "zeroed source");

  internal::ForceLevelForTesting(internal::KernelLevel::kAvx2);
  EXPECT_EQ(PackedWeight::Pack(w, kExact), nullptr);
  internal::ForceLevelForTesting(internal::KernelLevel::kAvx512);
}

// A row's bits do not depend on the rows beside it, the chunk it is in, packing, threads, or
// MatMulOptions::batch_invariant.
TEST(HalfMatMulTest, RowsAreBatchInvariant) {
  if (!internal::UseAvx512Vnni()) GTEST_SKIP() << "CPU lacks AVX-512 VNNI";
  const int64_t m = 37, n = 100, k = 300;
  const Tensor x = RandomX(m, k, 21);
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    const Tensor w = RandomHalf(dtype, n, k, 22);
    ThreadPool pool(2);
    const auto packed = PackedWeight::Pack(w, kExact, &pool);
    ASSERT_NE(packed, nullptr);
    Tensor all = Tensor::Empty({m, n}, DType::kF32);
    MatMul(x, *packed, all, &pool);
    ExpectChunksGiveTheSameBits(x, w, *packed, MatMulOptions{.batch_invariant = true},
                                {1, 2, 3, 4, 5, 12, 13, 25}, &pool, all,
                                std::string(DTypeName(dtype)));
  }
}

}  // namespace
}  // namespace uc::kernels
