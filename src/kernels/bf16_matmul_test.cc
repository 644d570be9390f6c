// BF16 weights at MatMulPrecision::kInt8. Where internal::UseAvx512Bf16() that is
// avx512::MatMulBf16, whose bits reference::MatMulBf16 defines (x rounded to BF16, vdpbf16ps's
// order): every check against it is exact, for m from 1 to past a k block, odd k, partial tiles,
// packed and stored weights, one to three threads. Rows must not depend on the batch they are in.
// Elsewhere kInt8 on BF16 is the exact F32 MatMul, checked here against the double-precision
// reference. Every test runs the vdpbf16ps kernel on each CPU that has it, also where the CPU
// table (internal::CpuPrefersBf16Dot()) gives BF16 to the F32 kernel.
#include <gtest/gtest.h>

#include <cmath>
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

constexpr MatMulOptions kInt8{.precision = MatMulPrecision::kInt8};

Tensor RandomBf16(int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  Tensor w = Tensor::Empty({n, k}, DType::kBF16);
  for (int64_t j = 0; j < n; ++j) {
    auto* row = reinterpret_cast<uint16_t*>(w.row(j));
    for (int64_t c = 0; c < k; ++c) row[c] = F32ToBf16(dist(rng));
  }
  return w;
}

struct Shape {
  int64_t m, n, k;
};
// Single rows, decode widths, one x block and past it (12 rows), partial tiles (n % 32), odd k,
// k one pair past a 512-element block, and a prefill-sized product.
const Shape kShapes[] = {{1, 1, 1},     {1, 33, 64},   {2, 70, 31},    {5, 32, 513},
                         {12, 64, 130}, {13, 97, 514}, {40, 65, 1026}, {70, 130, 600}};

// ForceBf16DotForTesting(force) for a scope.
class ScopedBf16Dot {
 public:
  explicit ScopedBf16Dot(bool force) { internal::ForceBf16DotForTesting(force); }
  ~ScopedBf16Dot() { internal::ForceBf16DotForTesting(false); }
  ScopedBf16Dot(const ScopedBf16Dot&) = delete;
  ScopedBf16Dot& operator=(const ScopedBf16Dot&) = delete;
};

// Param: vdpbf16ps forced wherever the CPU has it (true), or the CPU table's choice (false).
class Bf16MatMulTest : public ::testing::TestWithParam<bool> {};

TEST_P(Bf16MatMulTest, MatchesTheReferenceOnEveryShape) {
  ScopedBf16Dot scoped(GetParam());
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (const Shape& s : kShapes) {
      const std::string what = "m " + std::to_string(s.m) + " n " + std::to_string(s.n) + " k " +
                               std::to_string(s.k) + ", " + std::to_string(threads) + " threads";
      const Tensor x = RandomX(s.m, s.k, 7);
      Tensor w = RandomBf16(s.n, s.k, 8);
      Tensor want = Tensor::Empty({s.m, s.n}, DType::kF32);
      Tensor got = Tensor::Empty({s.m, s.n}, DType::kF32);
      MatMul(x, w, got, &pool, kInt8);
      if (internal::UseAvx512Bf16()) {
        reference::MatMulBf16(x, w, want);
        ExpectBitExact(got, want, what + ", stored");
        // The stored bytes zeroed: the packed copy still gives the original product.
        ExpectPackedBitExact(x, w, kInt8, &pool, want, (s.n + 31) / 32 * 32 * ((s.k + 1) / 2) * 4,
                             true, what);
      } else {
        // The exact F32 MatMul: within float rounding of the double reference.
        ExpectNearReference(got, x, w, 1e-4, what);
      }
    }
  }
  if (GetParam()) {
    NoteIfUntested(
        internal::UseAvx512Bf16(),
        "CPU lacks AVX512_BF16: BF16 kInt8 is the F32 MatMul here; the vdpbf16ps kernel");
  }
}

INSTANTIATE_TEST_SUITE_P(, Bf16MatMulTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Vdpbf16psForced" : "CpuChoice";
                         });

// BF16 kInt8 goes to vdpbf16ps exactly where the table says (and the CPU has it), and
// MatMulArithmetic names the kernel that runs.
TEST(Bf16MatMulChoiceTest, FollowsTheCpuTable) {
  EXPECT_EQ(internal::CpuPrefersBf16Dot(),
            internal::CpuSupportsAvx512Bf16() && internal::CpuIsAmd());
  EXPECT_EQ(internal::UseAvx512Bf16(), internal::CpuPrefersBf16Dot());
  EXPECT_EQ(MatMulArithmetic(DType::kBF16, MatMulPrecision::kInt8),
            internal::CpuPrefersBf16Dot() ? "bf16" : "f32");
  EXPECT_EQ(MatMulArithmetic(DType::kBF16, MatMulPrecision::kExact), "f32");
  EXPECT_EQ(MatMulArithmetic(DType::kF16, MatMulPrecision::kInt8), "f32");
  EXPECT_EQ(MatMulArithmetic(DType::kQ4_K, MatMulPrecision::kInt8), "int8");
  EXPECT_EQ(MatMulArithmetic(DType::kQ4_K, MatMulPrecision::kExact), "f32");
  {
    ScopedBf16Dot scoped(true);
    EXPECT_EQ(internal::UseAvx512Bf16(), internal::Avx512Bf16Available());
    EXPECT_EQ(MatMulArithmetic(DType::kBF16, MatMulPrecision::kInt8),
              internal::CpuSupportsAvx512Bf16() ? "bf16" : "f32");
  }
  EXPECT_EQ(internal::UseAvx512Bf16(), internal::CpuPrefersBf16Dot());
  std::printf("[ NOTE     ] BF16 weights at kInt8 multiply on %s here\n",
              internal::UseAvx512Bf16() ? "vdpbf16ps" : "F32 FMAs");
}

// The kernel really rounds x to BF16 (llama.cpp's vec_dot_type for BF16 weights) and its error
// against the exact product stays inside that rounding's bound: |x - bf16(x)| <= 2^-9 |x|, so
// |y - exact| <= 2^-9 sum |x w| plus F32 accumulation.
TEST(Bf16MatMulDotTest, ErrorIsBf16RoundingOfActivations) {
  ScopedBf16Dot scoped(true);
  if (!internal::UseAvx512Bf16()) GTEST_SKIP() << "CPU lacks AVX512_BF16";
  const int64_t m = 9, n = 40, k = 1024;
  const Tensor x = RandomX(m, k, 11);
  const Tensor w = RandomBf16(n, k, 12);
  Tensor got = Tensor::Empty({m, n}, DType::kF32);
  Tensor exact = Tensor::Empty({m, n}, DType::kF32);
  MatMul(x, w, got, nullptr, kInt8);
  reference::MatMul(x, w, exact);
  int differ = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double bound = 0;
      const auto* row = reinterpret_cast<const uint16_t*>(w.row(j));
      for (int64_t c = 0; c < k; ++c) {
        bound += std::fabs(x.data<float>()[i * k + c] * Bf16ToF32(row[c]));
      }
      const float g = got.data<float>()[i * n + j], e = exact.data<float>()[i * n + j];
      EXPECT_LE(std::fabs(g - e), bound * (1.0 / 512 + 1e-5)) << i << "," << j;
      differ += g != e;
    }
  }
  EXPECT_GT(differ, m * n / 2) << "x does not look rounded to BF16";
}

// A row's bits do not depend on the rows beside it, the chunk it is in, packing or threads.
TEST(Bf16MatMulDotTest, RowsAreBatchInvariant) {
  ScopedBf16Dot scoped(true);
  if (!internal::UseAvx512Bf16()) GTEST_SKIP() << "CPU lacks AVX512_BF16";
  const int64_t m = 37, n = 100, k = 300;
  const Tensor x = RandomX(m, k, 21);
  const Tensor w = RandomBf16(n, k, 22);
  ThreadPool pool(2);
  const auto packed = PackedWeight::Pack(w, kInt8, &pool);
  Tensor all = Tensor::Empty({m, n}, DType::kF32);
  MatMul(x, w, all, &pool, kInt8);
  ASSERT_NE(packed, nullptr);
  ExpectChunksGiveTheSameBits(x, w, *packed, kInt8, {1, 2, 3, 12, 13, 25}, &pool, all, "BF16");
}

}  // namespace
}  // namespace uc::kernels
