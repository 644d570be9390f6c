// Quantized weights multiplied exactly (MatMulPrecision::kExact) from the packed layout, on each
// kernel level the CPU has: avx512::MatMulQuantExact (AVX-512 VNNI), avx512::MatMulQuantExactVbmi
// (AVX512_VBMI as well) and avx2::MatMulQuantExact
// (forced on AVX-512 machines too). Its bits are defined by the scalar
// reference::MatMulExactGrouped (codes times x per scale group, then the group's scale and offset,
// std::fma each), so every check against it is exact: m from 1 to past a prefill block, partial
// tiles and pairs (n % 64), k of one record to several prefill blocks, one to three threads, random
// codes and scales. Against the dequantized double reference (reference::MatMul) the kernel must
// stay within the exact path's 1e-5. A row's bits must not depend on the rows beside it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/matmul_test_util.h"
#include "kernels/ops.h"
#include "kernels/reference.h"

namespace uc::kernels {
namespace {

using testing::ExpectBitExact;
using testing::NoteIfUntested;
using testing::RandomWeights;
using testing::RandomX;

const DType kGroupedDTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                                DType::kQ5_0, DType::kQ5_1, DType::kQ4_K,
                                DType::kQ5_K, DType::kQ6_K, DType::kMXFP4};

constexpr MatMulOptions kExact{};

// |got - want| <= 1e-5 * (RMS(want) + |want|), element by element.
void ExpectWithinExactTolerance(const Tensor& got, const Tensor& want, const std::string& what) {
  double sum_sq = 0.0;
  for (int64_t i = 0; i < want.numel(); ++i) sum_sq += std::pow(want.data<float>()[i], 2);
  const double rms = std::sqrt(sum_sq / static_cast<double>(std::max<int64_t>(1, want.numel())));
  int misses = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = got.data<float>()[i], w = want.data<float>()[i];
    if (std::abs(g - w) <= 1e-5 * (rms + std::abs(w))) continue;
    if (++misses <= 5) ADD_FAILURE() << what << ": element " << i << " got " << g << " want " << w;
  }
}

struct Shape {
  int64_t m, n, k;
};
// k in whole super-blocks (every dtype here takes it): one record, several, past a prefill block
// (512) and not a multiple of it; n across partial tiles, one tile of a pair, odd pair counts;
// m across the decode passes (1, 2), the prefill micro-kernel widths (3..6) and past them.
const Shape kShapes[] = {{1, 1, 256},  {1, 64, 512},  {2, 70, 256},  {3, 33, 768},   {2, 130, 1280},
                         {5, 96, 256}, {6, 200, 512}, {7, 64, 1024}, {13, 129, 768}, {40, 65, 256}};

// A kernel the CPU can run the packed layout with: a level, and at kAvx512 with or without the
// AVX512_VBMI variant (avx512::MatMulQuantExactVbmi).
struct Kernel {
  internal::KernelLevel level;
  bool vbmi = false;
};
// The kernels this CPU has, each forced for the test's scope by ScopedLevel.
std::vector<Kernel> Levels() {
  std::vector<Kernel> kernels;
  if (internal::CpuSupportsAvx2()) kernels.push_back({internal::KernelLevel::kAvx2});
  if (internal::CpuSupportsAvx512Vnni()) kernels.push_back({internal::KernelLevel::kAvx512});
  if (internal::CpuSupportsAvx512Vbmi()) kernels.push_back({internal::KernelLevel::kAvx512, true});
  NoteIfUntested(internal::CpuSupportsAvx512Vnni(),
                 "CPU lacks AVX-512 VNNI: avx512::MatMulQuantExact");
  NoteIfUntested(internal::CpuSupportsAvx512Vbmi(),
                 "CPU lacks AVX512_VBMI: avx512::MatMulQuantExactVbmi");
  NoteIfUntested(internal::CpuSupportsAvx2(), "CPU lacks AVX2: avx2::MatMulQuantExact");
  return kernels;
}
const char* LevelName(Kernel kernel) {
  if (kernel.level != internal::KernelLevel::kAvx512) return "avx2";
  return kernel.vbmi ? "avx512_vbmi" : "avx512";
}
struct ScopedLevel {
  explicit ScopedLevel(Kernel kernel) {
    internal::ForceLevelForTesting(kernel.level);
    internal::ForceNoVbmiForTesting(!kernel.vbmi);
  }
  explicit ScopedLevel(internal::KernelLevel level) : ScopedLevel(Kernel{level}) {}
  ~ScopedLevel() {
    internal::ForceLevelForTesting(internal::KernelLevel::kAvx512);
    internal::ForceNoVbmiForTesting(false);
  }
};

TEST(QuantExactMatMulTest, PackedMatchesTheGroupedOrderBitForBit) {
  uint32_t seed = 3;
  for (Kernel level : Levels()) {
    ScopedLevel scoped(level);
    for (DType dtype : kGroupedDTypes) {
      for (const Shape& s : kShapes) {
        const Tensor x = RandomX(s.m, s.k, seed++);
        const Tensor w = RandomWeights(s.n, s.k, dtype, seed++);
        Tensor want = Tensor::Empty({s.m, s.n}, DType::kF32);
        reference::MatMulExactGrouped(x, w, want);
        Tensor dequantized = Tensor::Empty({s.m, s.n}, DType::kF32);
        reference::MatMul(x, w, dequantized);
        for (int threads : {1, 2, 3}) {
          ThreadPool pool(threads);
          const std::string what = std::string(LevelName(level)) + " " +
                                   std::string(DTypeName(dtype)) + " m " + std::to_string(s.m) +
                                   " n " + std::to_string(s.n) + " k " + std::to_string(s.k) +
                                   ", " + std::to_string(threads) + " threads";
          const auto packed = PackedWeight::Pack(w, kExact, &pool);
          ASSERT_NE(packed, nullptr) << what;
          Tensor got = Tensor::Empty({s.m, s.n}, DType::kF32);
          MatMul(x, *packed, got, &pool);
          ExpectBitExact(got, want, what);
          ExpectWithinExactTolerance(got, dequantized, what + ", against the dequantized product");
        }
      }
    }
  }
}

// The 32-element types take any k in whole blocks: the prefill's last k block is then shorter
// than the others (x packed per block of kPanelKc), and m leaves a partial row block.
TEST(QuantExactMatMulTest, ShortLastKBlockMatchesTheGroupedOrderBitForBit) {
  const Shape shapes[] = {{7, 40, 288}, {13, 70, 544}, {8, 33, 32}};
  uint32_t seed = 101;
  for (Kernel level : Levels()) {
    ScopedLevel scoped(level);
    for (DType dtype :
         {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kMXFP4}) {
      for (const Shape& s : shapes) {
        const Tensor x = RandomX(s.m, s.k, seed++);
        const Tensor w = RandomWeights(s.n, s.k, dtype, seed++);
        Tensor want = Tensor::Empty({s.m, s.n}, DType::kF32);
        reference::MatMulExactGrouped(x, w, want);
        ThreadPool pool(2);
        const auto packed = PackedWeight::Pack(w, kExact, &pool);
        const std::string what = std::string(LevelName(level)) + " " +
                                 std::string(DTypeName(dtype)) + " m " + std::to_string(s.m) +
                                 " k " + std::to_string(s.k);
        ASSERT_NE(packed, nullptr) << what;
        Tensor got = Tensor::Empty({s.m, s.n}, DType::kF32);
        MatMul(x, *packed, got, &pool);
        ExpectBitExact(got, want, what);
      }
    }
  }
}

// MXFP4's E8M0 scales across their range, subnormal ones included (e 0 and 1: 2^-128 and 2^-127
// as E8M0HalfToF32 gives them), one kernel for both levels: the grouped order's bits.
TEST(QuantExactMatMulTest, Mxfp4ScalesAcrossTheirRange) {
  const uint8_t scales[] = {0, 1, 2, 3, 100, 127, 128, 129, 140};
  for (Kernel level : Levels()) {
    ScopedLevel scoped(level);
    Tensor w = RandomWeights(70, 288, DType::kMXFP4, 61);
    for (int64_t j = 0; j < 70; ++j) {
      auto* blocks = reinterpret_cast<BlockMXFP4*>(w.row(j));
      for (int64_t b = 0; b < 9; ++b) blocks[b].e = scales[(j + b) % 9];
    }
    for (int64_t m : {1, 2, 7}) {
      const Tensor x = RandomX(m, 288, 62 + static_cast<uint32_t>(m));
      Tensor want = Tensor::Empty({m, 70}, DType::kF32);
      reference::MatMulExactGrouped(x, w, want);
      const auto packed = PackedWeight::Pack(w, kExact);
      ASSERT_NE(packed, nullptr);
      Tensor got = Tensor::Empty({m, 70}, DType::kF32);
      MatMul(x, *packed, got, nullptr);
      ExpectBitExact(got, want, std::string(LevelName(level)) + " m " + std::to_string(m));
    }
  }
}

// The decode of the 4-bit types multiplies 16 q by x / 16 (NibbleLine in quant_exact_kernels.h),
// which is exact while x / 16 is: for x rows of elements so small that some quotient would be
// subnormal with bits lost, the kernels take the codes unscaled and keep the grouped order's
// bits. A row of small multiples of 2^-126 (quotients subnormal but exact) passes the round-trip
// check and is decoded through x / 16: the bits must still be the grouped order's.
TEST(QuantExactMatMulTest, TinyActivationsKeepTheGroupedOrderBits) {
  uint32_t seed = 71;
  for (Kernel level : Levels()) {
    ScopedLevel scoped(level);
    for (DType dtype : kGroupedDTypes) {
      const Tensor w = RandomWeights(70, 512, dtype, seed++);
      const auto packed = PackedWeight::Pack(w, kExact);
      ASSERT_NE(packed, nullptr);
      Tensor exact_quotients = Tensor::Empty({1, 512}, DType::kF32);
      for (int64_t i = 0; i < 512; ++i) {
        exact_quotients.data<float>()[i] = static_cast<float>(i * 7 % 17 - 8) * 0x1p-126f;
      }
      for (const Tensor& x : {RandomX(1, 512, seed++, 0x1p-121f),
                              RandomX(2, 512, seed++, 0x1p-121f), exact_quotients}) {
        const int64_t m = x.dim(0);
        Tensor want = Tensor::Empty({m, 70}, DType::kF32);
        reference::MatMulExactGrouped(x, w, want);
        Tensor got = Tensor::Empty({m, 70}, DType::kF32);
        MatMul(x, *packed, got, nullptr);
        ExpectBitExact(got, want,
                       std::string(LevelName(level)) + " " + std::string(DTypeName(dtype)) + " m " +
                           std::to_string(m));
      }
    }
  }
}

// Both levels write the same layout and read it to the same bits: a copy packed on one runs on
// the other.
TEST(QuantExactMatMulTest, LevelsShareTheLayout) {
  if (!internal::CpuSupportsAvx512Vnni()) GTEST_SKIP() << "one level only on this CPU";
  for (DType dtype : kGroupedDTypes) {
    const Tensor x = RandomX(9, 512, 51);
    const Tensor w = RandomWeights(100, 512, dtype, 52);
    const auto wide = PackedWeight::Pack(w, kExact);
    std::shared_ptr<const PackedWeight> narrow;
    {
      ScopedLevel scoped(internal::KernelLevel::kAvx2);
      narrow = PackedWeight::Pack(w, kExact);
    }
    ASSERT_NE(wide, nullptr);
    ASSERT_NE(narrow, nullptr);
    ASSERT_EQ(wide->packed_bytes(), narrow->packed_bytes());
    EXPECT_EQ(std::memcmp(wide->packed(), narrow->packed(), wide->packed_bytes()), 0)
        << DTypeName(dtype);
    Tensor a = Tensor::Empty({9, 100}, DType::kF32), b = Tensor::Empty({9, 100}, DType::kF32);
    MatMul(x, *narrow, a, nullptr);
    {
      ScopedLevel scoped(internal::KernelLevel::kAvx2);
      MatMul(x, *wide, b, nullptr);
    }
    ExpectBitExact(b, a, std::string(DTypeName(dtype)) + ": avx2 against avx512");
  }
}

// The packed copy is all the kernel reads; and the packed size is about the stored size.
TEST(QuantExactMatMulTest, PackedCopyStandsAloneAndStaysSmall) {
  for (Kernel level : Levels()) {
    ScopedLevel scoped(level);
    for (DType dtype : kGroupedDTypes) {
      const std::string what = std::string(LevelName(level)) + " " + std::string(DTypeName(dtype));
      const Tensor x = RandomX(3, 512, 31);
      Tensor w = RandomWeights(128, 512, dtype, 32);
      Tensor want = Tensor::Empty({3, 128}, DType::kF32);
      reference::MatMulExactGrouped(x, w, want);
      const auto packed = PackedWeight::Pack(w, kExact);
      ASSERT_NE(packed, nullptr) << what;
      // The scales of 64 rows add at most one byte per row and group to the stored fields.
      EXPECT_LE(packed->packed_bytes(), w.nbytes() * 21 / 20) << what;
      std::memset(w.row(0), 0, static_cast<size_t>(w.nbytes()));
      Tensor got = Tensor::Empty({3, 128}, DType::kF32);
      MatMul(x, *packed, got, nullptr);
      ExpectBitExact(got, want, what + ", zeroed source");
    }
  }
}

// A row's bits do not depend on the rows beside it, the chunk it is in, or the thread count.
TEST(QuantExactMatMulTest, RowsAreBatchInvariant) {
  const int64_t m = 37, n = 100, k = 768;
  const Tensor x = RandomX(m, k, 21);
  for (Kernel level : Levels()) {
    ScopedLevel scoped(level);
    for (DType dtype : kGroupedDTypes) {
      const Tensor w = RandomWeights(n, k, dtype, 22);
      ThreadPool pool(2);
      const auto packed = PackedWeight::Pack(w, kExact, &pool);
      ASSERT_NE(packed, nullptr);
      Tensor all = Tensor::Empty({m, n}, DType::kF32);
      MatMul(x, *packed, all, &pool);
      for (int64_t chunk : {1, 2, 3, 4, 6, 7, 13, 25}) {
        for (int64_t i0 = 0; i0 < m; i0 += chunk) {
          const int64_t rows = std::min(chunk, m - i0);
          Tensor got = Tensor::Empty({rows, n}, DType::kF32);
          MatMul(x.Slice(i0, i0 + rows), *packed, got, chunk == 3 ? nullptr : &pool);
          ExpectBitExact(got, all.Slice(i0, i0 + rows),
                         std::string(LevelName(level)) + " " + std::string(DTypeName(dtype)) +
                             " rows " + std::to_string(i0) + "+" + std::to_string(rows));
        }
      }
    }
  }
}

}  // namespace
}  // namespace uc::kernels
