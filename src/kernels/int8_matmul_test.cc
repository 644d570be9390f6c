// The integer MatMul (MatMulPrecision::kInt8). Its bits are defined by reference::MatMulInt8, so
// every check against the reference is exact (tolerance 0): the AVX2 activation quantizers
// against the scalar ones of tensor/quants.h, and MatMul on every path (portable, AVX2, AVX-512
// VNNI where the CPU has them) with one and two threads for every quantized weight dtype, on random
// blocks and on extreme ones (f16 scales of 65504, subnormal and negative, quants all 0 / 15 / -128
// / 127, activations quantizing to all +-127). Results must also be independent of the batch a row
// is in. Against the exact F32 MatMul the error must stay inside the a-priori bound of 8-bit
// activations stated in ops.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/dispatch.h"
#include "kernels/matmul_test_util.h"
#include "kernels/ops.h"
#include "kernels/reference.h"
#include "tensor/quants.h"

namespace uc {
void PrintTo(DType dtype, std::ostream* os) { *os << DTypeName(dtype); }

namespace kernels {
namespace {

using testing::ExpectBitExact;
using testing::HalfScaleOffsets;
using testing::RandomWeights;
using testing::RandomX;

enum class Path { kPortable, kAvx2, kAvx512 };
std::string PathName(Path path) {
  switch (path) {
    case Path::kAvx2:
      return "Avx2";
    case Path::kAvx512:
      return "Avx512";
    default:
      return "Portable";
  }
}
void PrintTo(Path path, std::ostream* os) { *os << PathName(path); }

// Routes ops to `path` while alive. ok() is false when the CPU lacks the path's instructions;
// skip() then says which.
class ScopedPath {
 public:
  explicit ScopedPath(Path path) : path_(path) {
    switch (path) {
      case Path::kPortable:
        internal::ForceLevelForTesting(internal::KernelLevel::kPortable);
        ok_ = true;
        break;
      case Path::kAvx2:
        internal::ForceLevelForTesting(internal::KernelLevel::kAvx2);
        ok_ = internal::CpuSupportsAvx2();
        break;
      case Path::kAvx512:
        internal::ForceLevelForTesting(internal::KernelLevel::kAvx512);
        ok_ = internal::CpuSupportsAvx512Vnni();
        break;
    }
  }
  ~ScopedPath() { internal::ForceLevelForTesting(internal::KernelLevel::kAvx512); }
  bool ok() const { return ok_; }
  // Why the path cannot run here.
  std::string skip() const {
    return path_ == Path::kAvx512
               ? "CPU lacks AVX-512 F/BW/VL/DQ + VNNI (or the OS does not enable ZMM state): the "
                 "AVX-512 VNNI integer MatMul is NOT tested on this machine"
               : "CPU lacks AVX2";
  }

 private:
  Path path_;
  bool ok_ = false;
};

const DType kQuantizedDTypes[] = {DType::kQ8_0, DType::kQ4_0,   DType::kQ4_1, DType::kQ5_0,
                                  DType::kQ5_1, DType::kIQ4_NL, DType::kQ2_K, DType::kQ3_K,
                                  DType::kQ4_K, DType::kQ5_K,   DType::kQ6_K, DType::kQ8_K,
                                  DType::kMXFP4};

// ---------------------------------------------------------------------------------------------
// Activation quantizers.

// Rows that exercise the rounding rules and the scale edge cases, 256 wide.
std::vector<std::vector<float>> QuantizerRows() {
  std::vector<std::vector<float>> rows;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float stddev : {1.0f, 1e-3f, 1e3f, 1e6f, 1e-20f}) {
    for (int r = 0; r < 20; ++r) {
      std::vector<float> row(256);
      for (float& v : row) v = normal(rng) * stddev;
      rows.push_back(row);
    }
  }
  // amax = 127 in every 32 and 256 block (d = 1), the rest exact halves and their neighbours:
  // roundf's ties go away from zero, Q8_K's to even.
  std::vector<float> ties(256);
  for (int j = 0; j < 256; ++j) {
    const float half = static_cast<float>(j % 64) - 31.5f;
    ties[j] = j % 32 == 0 ? 127.0f : j % 3 == 0 ? half : std::nextafter(half, j % 2 ? 0.0f : 99.f);
  }
  rows.push_back(ties);
  for (float& v : ties) v = -v;
  rows.push_back(ties);
  rows.push_back(std::vector<float>(256, 0.0f));
  rows.push_back(std::vector<float>(256, 0.75f));   // all quantize to 127
  rows.push_back(std::vector<float>(256, -3e-3f));  // all -127
  rows.push_back(std::vector<float>(256, 1e-40f));  // subnormal input
  std::vector<float> lonely(256, 0.0f);
  lonely[77] = -2.5f;
  rows.push_back(lonely);
  // Equal magnitudes of both signs: Q8_K takes the first (here negative) as its max.
  std::vector<float> both = rows[0];
  both[9] = -50.0f;
  both[200] = 50.0f;
  rows.push_back(both);
  std::swap(both[9], both[200]);
  rows.push_back(both);
  return rows;
}

TEST(ActivationQuantizerTest, Avx2MatchesScalarBitForBit) {
  if (!internal::CpuSupportsAvx2()) GTEST_SKIP() << "CPU lacks AVX2";
#if defined(__x86_64__)
  for (ActivationFormat format :
       {ActivationFormat::kQ8_0, ActivationFormat::kQ8_1, ActivationFormat::kQ8_K}) {
    const int64_t bytes = ActivationRowBytes(format, 256);
    std::vector<uint32_t> want((bytes + 3) / 4), got((bytes + 3) / 4, 0xdeadbeef);
    int row = 0;
    for (const std::vector<float>& x : QuantizerRows()) {
      std::fill(want.begin(), want.end(), 0u);
      cpu::QuantizeActivations(format, x.data(), 256, reinterpret_cast<std::byte*>(want.data()));
      avx2::QuantizeActivations(format, x.data(), 256, reinterpret_cast<std::byte*>(got.data()));
      ASSERT_EQ(std::memcmp(want.data(), got.data(), static_cast<size_t>(bytes)), 0)
          << "format " << static_cast<int>(format) << " row " << row;
      ++row;
    }
  }
#endif
}

TEST(ActivationQuantizerTest, ScalarFollowsGgmlsRules) {
  std::vector<float> x(256);
  for (int j = 0; j < 256; ++j) x[j] = j % 32 == 0 ? 127.0f : static_cast<float>(j % 8) - 3.5f;
  x[0] = -127.0f;  // Q8_K: the first |x| == 127 is negative: iscale = 127 / 127 = 1, d = 1
  BlockQ8_0 q8_0[8];
  QuantizeActivationsQ8_0(x.data(), 8, q8_0);
  EXPECT_EQ(F16ToF32(q8_0[0].d), 1.0f);
  EXPECT_EQ(q8_0[0].qs[1], -3);  // -2.5 -> -3: ties away from zero
  EXPECT_EQ(q8_0[0].qs[4], 1);   // 0.5 -> 1
  EXPECT_EQ(q8_0[0].qs[7], 4);   // 3.5 -> 4
  BlockQ8_1 q8_1[8];
  QuantizeActivationsQ8_1(x.data(), 8, q8_1);
  int sum = 0;
  for (int8_t q : q8_1[1].qs) sum += q;
  EXPECT_EQ(F16ToF32(q8_1[1].s), static_cast<float>(sum));
  BlockQ8_K q8_k;
  QuantizeActivationsQ8_K(x.data(), 1, &q8_k);
  EXPECT_EQ(q8_k.d, 1.0f);
  EXPECT_EQ(q8_k.qs[1], -2);  // -2.5 -> -2: ties to even
  EXPECT_EQ(q8_k.qs[4], 0);   // 0.5 -> 0
  EXPECT_EQ(q8_k.qs[7], 4);   // 3.5 -> 4
  EXPECT_EQ(q8_k.qs[0], -127);
  EXPECT_EQ(q8_k.qs[32], 127);
  for (int i = 0; i < 16; ++i) {
    int s = 0;
    for (int l = 0; l < 16; ++l) s += q8_k.qs[16 * i + l];
    EXPECT_EQ(q8_k.bsums[i], s);
  }
  for (const std::vector<float>& row : QuantizerRows()) {
    QuantizeActivationsQ8_K(row.data(), 1, &q8_k);
    for (int8_t q : q8_k.qs) ASSERT_GE(q, -127);
  }
}

// ---------------------------------------------------------------------------------------------
// MatMul over dtype x threads x path.

using Int8Param = std::tuple<DType, int, Path>;

class Int8MatMulTest : public ::testing::TestWithParam<Int8Param> {
 protected:
  DType dtype() const { return std::get<0>(GetParam()); }
  int threads() const { return std::get<1>(GetParam()); }
  Path path() const { return std::get<2>(GetParam()); }
};

// Where this path packs w (PackedWeight), MatMul from the packed copy gives `want`'s bits too.
void ExpectPackedBitExact(const Tensor& x, const Tensor& w, const Tensor& want, ThreadPool* pool,
                          const std::string& what) {
  const auto packed = PackedWeight::Pack(w, {.precision = MatMulPrecision::kInt8}, pool);
  if (packed == nullptr) return;
  Tensor got = Tensor::Empty(want.shape(), DType::kF32);
  MatMul(x, *packed, got, pool);
  ExpectBitExact(got, want, what + " packed");
}

// The a-priori error of 8-bit activations (ops.h): each x element is off by at most
// 0.57 * amax / 127 of its activation block (0.51 for Q8_K's F32 scale) plus what an f16 scale
// can lose when subnormal; Q8_1's f16 s adds |m| * 2^-10 * sum |x| per block; the F32 sums add
// 1e-5 of sum |w x|.
void ExpectWithinActivationBound(const Tensor& x, const Tensor& w, const Tensor& got,
                                 const Tensor& exact, const std::string& what) {
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  const DType dtype = w.dtype();
  const int64_t block = DTypeBlockSize(dtype);
  const double per_amax = (block == kQK_K ? 0.51 : 0.57) / 127.0;
  const bool q8_1 = dtype == DType::kQ4_1 || dtype == DType::kQ5_1;
  std::vector<float> wrow(static_cast<size_t>(k));
  int misses = 0;
  for (int64_t j = 0; j < n; ++j) {
    DequantizeRow(dtype, w.row(j), wrow.data(), k);
    for (int64_t i = 0; i < m; ++i) {
      const float* xr = x.data<float>() + i * k;
      double bound = 0.0;
      for (int64_t b0 = 0; b0 < k; b0 += block) {
        double amax = 0.0, abs_x = 0.0;
        for (int64_t l = b0; l < b0 + block; ++l) {
          amax = std::max(amax, double{std::fabs(xr[l])});
          abs_x += std::fabs(xr[l]);
        }
        for (int64_t l = b0; l < b0 + block; ++l) {
          bound +=
              std::fabs(wrow[l]) * (amax * per_amax + 4e-6) + 1e-5 * std::fabs(wrow[l] * xr[l]);
        }
        if (q8_1) {
          uint16_t half;
          std::memcpy(&half, w.row(j) + b0 / 32 * DTypeBlockBytes(dtype) + 2, 2);
          bound += std::fabs(F16ToF32(half)) * abs_x * 1.01 / 1024;
        }
      }
      const double g = got.data<float>()[i * n + j], e = exact.data<float>()[i * n + j];
      if (std::fabs(g - e) <= bound) continue;
      if (++misses <= 5) {
        ADD_FAILURE() << what << ": y[" << i << ", " << j << "] = " << g << ", exact " << e
                      << ", bound " << bound;
      }
    }
  }
  EXPECT_EQ(misses, 0) << what;
}

TEST_P(Int8MatMulTest, MatchesInt8ReferenceExactlyAndExactMatMulWithinBound) {
  ScopedPath scoped(path());
  if (!scoped.ok()) GTEST_SKIP() << scoped.skip();
  ThreadPool pool(threads());
  uint32_t seed = 1;
  for (int64_t m : {1, 3, 8, 9, 64}) {
    for (int64_t k : {256, 768}) {
      for (int64_t n : {45, 8}) {
        const Tensor x = RandomX(m, k, seed++);
        const Tensor w = RandomWeights(n, k, dtype(), seed++);
        Tensor got = Tensor::Empty({m, n}, DType::kF32);
        Tensor want = Tensor::Empty({m, n}, DType::kF32);
        Tensor exact = Tensor::Empty({m, n}, DType::kF32);
        MatMul(x, w, got, &pool, MatMulPrecision::kInt8);
        reference::MatMulInt8(x, w, want);
        reference::MatMul(x, w, exact);
        const std::string what =
            "m=" + std::to_string(m) + " k=" + std::to_string(k) + " n=" + std::to_string(n);
        ExpectBitExact(got, want, what);
        ExpectWithinActivationBound(x, w, got, exact, what);
      }
    }
  }
}

// Every m around the AVX2 and AVX-512 panel sizes (8, 16) and passes (64 and 128 rows; the
// K-quants' m >= 16 kernel takes four rows at a time, so 17, 19 and 130 leave 1, 3 and 2), block
// counts odd and even (32-element types: 1, 3, 8 and 23 blocks; K-quants: 1, 3 and 5 super-blocks),
// and n around the tile sizes: the same bits as the reference.
TEST_P(Int8MatMulTest, MatchesInt8ReferenceOverShapes) {
  ScopedPath scoped(path());
  if (!scoped.ok()) GTEST_SKIP() << scoped.skip();
  ThreadPool pool(threads());
  const bool k_quant = DTypeBlockSize(dtype()) == kQK_K;
  const std::vector<int64_t> ks =
      k_quant ? std::vector<int64_t>{256, 768, 1280} : std::vector<int64_t>{32, 96, 256, 736};
  uint32_t seed = 1000;
  for (int64_t m : {1, 3, 8, 9, 17, 19, 64, 65, 130}) {
    for (int64_t k : ks) {
      for (int64_t n : {45, 16}) {
        const Tensor x = RandomX(m, k, seed++);
        const Tensor w = RandomWeights(n, k, dtype(), seed++);
        Tensor got = Tensor::Empty({m, n}, DType::kF32);
        Tensor want = Tensor::Empty({m, n}, DType::kF32);
        MatMul(x, w, got, &pool, MatMulPrecision::kInt8);
        reference::MatMulInt8(x, w, want);
        const std::string what =
            "m=" + std::to_string(m) + " k=" + std::to_string(k) + " n=" + std::to_string(n);
        ExpectBitExact(got, want, what);
        ExpectPackedBitExact(x, w, want, &pool, what);
      }
    }
  }
}

// A row's result is the same bits whatever else is in the batch and however many threads run.
TEST_P(Int8MatMulTest, RowsAreBatchInvariant) {
  ScopedPath scoped(path());
  if (!scoped.ok()) GTEST_SKIP() << scoped.skip();
  ThreadPool pool(threads());
  const int64_t k = 512, n = 37, m = 70;  // 70 rows: two passes of the AVX2 tile loop
  const Tensor x = RandomX(m, k, 11);
  const Tensor w = RandomWeights(n, k, dtype(), 12);
  Tensor all = Tensor::Empty({m, n}, DType::kF32);
  MatMul(x, w, all, &pool, MatMulPrecision::kInt8);
  for (int64_t i : {0, 5, 63, 64, 69}) {
    Tensor alone = Tensor::Empty({1, n}, DType::kF32);
    MatMul(x.Slice(i, i + 1), w, alone, nullptr, MatMulPrecision::kInt8);
    ExpectBitExact(alone, all.Slice(i, i + 1), "row " + std::to_string(i) + " alone");
    // The row among 8 others of a different batch, at position 3.
    Tensor mixed = RandomX(9, k, 100 + static_cast<uint32_t>(i));
    std::memcpy(mixed.row(3), x.row(i), static_cast<size_t>(x.row_bytes()));
    Tensor out = Tensor::Empty({9, n}, DType::kF32);
    MatMul(mixed, w, out, &pool, MatMulPrecision::kInt8);
    ExpectBitExact(out.Slice(3, 4), all.Slice(i, i + 1), "row " + std::to_string(i) + " mixed");
  }
}

// Blocks at the edges of their ranges: extreme f16 scales (largest, subnormal, zero, negative),
// quant bytes all 0x00 / 0xff / 0x80 / 0x7f, and activations that quantize to +-127 everywhere,
// to zero, or come from huge and tiny inputs.
TEST_P(Int8MatMulTest, ExtremeBlocksMatchInt8ReferenceExactly) {
  ScopedPath scoped(path());
  if (!scoped.ok()) GTEST_SKIP() << scoped.skip();
  ThreadPool pool(threads());
  const int64_t k = 512, n = 24;
  Tensor w = RandomWeights(n, k, dtype(), 21);
  const int64_t block_bytes = DTypeBlockBytes(dtype());
  const uint16_t kHalves[] = {0x7bff /*65504*/, 0x0001 /*2^-24*/,  0x0000,
                              0xbc00 /*-1*/,    0xfbff /*-65504*/, 0x3c00 /*1*/};
  const uint8_t kFills[] = {0x00, 0xff, 0x80, 0x7f};
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t b = 0; b < w.row_bytes() / block_bytes; ++b) {
      auto* block = reinterpret_cast<uint8_t*>(w.row(j) + b * block_bytes);
      if (j % 2 == 0) std::memset(block, kFills[(j / 2 + b) % 4], static_cast<size_t>(block_bytes));
      for (size_t f : HalfScaleOffsets(dtype())) {
        std::memcpy(block + f, &kHalves[(j + b + f) % 6], 2);
      }
      if (dtype() == DType::kQ8_K) {
        const float d = j % 3 == 0 ? 1e-30f : j % 3 == 1 ? -3.0f : 7e3f;
        std::memcpy(block, &d, 4);
      }
    }
  }
  // 16 rows: the AVX2 path takes rows 0-15 as two panels and each row alone as a single row.
  Tensor x = RandomX(16, k, 22);
  for (int64_t l = 0; l < k; ++l) {
    x.data<float>()[0 * k + l] = 1.5f;                  // all +127
    x.data<float>()[1 * k + l] = l % 2 ? -2.0f : 2.0f;  // all +-127
    x.data<float>()[2 * k + l] = 0.0f;                  // all zero
    x.data<float>()[3 * k + l] *= 300.0f;               // large
    x.data<float>()[4 * k + l] *= 1e-7f;                // tiny, subnormal f16 d
  }
  for (int64_t l = 0; l < k; ++l) x.data<float>()[9 * k + l] = -1.0f;  // all -127
  Tensor got = Tensor::Empty({16, n}, DType::kF32);
  Tensor want = Tensor::Empty({16, n}, DType::kF32);
  MatMul(x, w, got, &pool, MatMulPrecision::kInt8);
  reference::MatMulInt8(x, w, want);
  ExpectBitExact(got, want, "extreme");
  ExpectPackedBitExact(x, w, want, &pool, "extreme");
  for (int64_t i = 0; i < 6; ++i) {
    Tensor alone = Tensor::Empty({1, n}, DType::kF32);
    MatMul(x.Slice(i, i + 1), w, alone, &pool, MatMulPrecision::kInt8);
    ExpectBitExact(alone, want.Slice(i, i + 1), "extreme row " + std::to_string(i) + " alone");
  }
}

INSTANTIATE_TEST_SUITE_P(
    QuantizedDTypes, Int8MatMulTest,
    ::testing::Combine(::testing::ValuesIn(kQuantizedDTypes), ::testing::Values(1, 2),
                       ::testing::Values(Path::kAvx512, Path::kAvx2, Path::kPortable)),
    [](const ::testing::TestParamInfo<Int8Param>& info) {
      return std::string(DTypeName(std::get<0>(info.param))) + "_" +
             std::to_string(std::get<1>(info.param)) + "Threads_" +
             PathName(std::get<2>(info.param));
    });

// ---------------------------------------------------------------------------------------------

TEST(Int8MatMulApiTest, PathsGiveTheSameBits) {
  if (!internal::CpuSupportsAvx2()) GTEST_SKIP() << "CPU lacks AVX2";
  if (!internal::CpuSupportsAvx512Vnni()) {
    std::printf(
        "[ NOTE     ] CPU lacks AVX-512 VNNI: comparing the AVX2 and portable paths only\n");
  }
  ThreadPool pool(2);
  for (DType dtype : kQuantizedDTypes) {
    const Tensor x = RandomX(37, 1024, 31);
    const Tensor w = RandomWeights(29, 1024, dtype, 32);
    Tensor portable = Tensor::Empty({37, 29}, DType::kF32);
    {
      ScopedPath scoped(Path::kPortable);
      MatMul(x, w, portable, &pool, MatMulPrecision::kInt8);
    }
    for (Path path : {Path::kAvx2, Path::kAvx512}) {
      ScopedPath scoped(path);
      if (!scoped.ok()) continue;
      Tensor got = Tensor::Empty({37, 29}, DType::kF32);
      MatMul(x, w, got, &pool, MatMulPrecision::kInt8);
      ExpectBitExact(got, portable, std::string(DTypeName(dtype)) + " " + PathName(path));
    }
  }
}

// Pack makes a copy exactly where a kernel reads one (kInt8, AVX-512 VNNI: every quantized type
// but Q2_K, Q3_K and Q8_K; at AVX2 Q8_0 and MXFP4, which the next test takes; kExact only for the
// types of quant_exact_matmul_test), MatMul reads that copy (the stored bytes may change after
// packing), and a lower kernel level forced after packing multiplies the stored rows.
TEST(PackedWeightTest, PacksForTheAvx512KernelAndReadsTheCopy) {
  ThreadPool pool(2);
  const MatMulOptions int8{.precision = MatMulPrecision::kInt8};
  const int64_t m = 5, k = 512, n = 21;
  const Tensor x = RandomX(m, k, 41);
  for (DType dtype : kQuantizedDTypes) {
    const std::string name(DTypeName(dtype));
    const bool packs = dtype != DType::kQ2_K && dtype != DType::kQ3_K && dtype != DType::kQ8_K;
    Tensor w = RandomWeights(n, k, dtype, 42);
    EXPECT_EQ(PackedWeight::Pack(w, MatMulOptions{}, &pool) != nullptr,
              internal::CpuSupportsAvx2() && reference::HasExactGrouped(dtype))
        << name << " kExact";
    {
      // Q8_0 and MXFP4 have avx2::MatMulInt8's own layout at that level (the next test).
      ScopedPath avx2(Path::kAvx2);
      EXPECT_EQ(PackedWeight::Pack(w, int8, &pool) != nullptr,
                internal::CpuSupportsAvx2() && (dtype == DType::kQ8_0 || dtype == DType::kMXFP4))
          << name << " AVX2";
    }
    const auto packed = PackedWeight::Pack(w, int8, &pool);
    if (!internal::CpuSupportsAvx512Vnni() || !packs) {
      if (internal::CpuSupportsAvx512Vnni() || (dtype != DType::kQ8_0 && dtype != DType::kMXFP4)) {
        EXPECT_EQ(packed, nullptr) << name;
      }
      continue;
    }
    ASSERT_NE(packed, nullptr) << name;
    EXPECT_EQ(packed->packed_bytes(), 32 * w.row_bytes()) << name << ": n rounded up to 16";
    Tensor want = Tensor::Empty({m, n}, DType::kF32);
    reference::MatMulInt8(x, w, want);
    // Forced down to AVX2 after packing: the stored rows, the same bits.
    {
      ScopedPath avx2(Path::kAvx2);
      Tensor got = Tensor::Empty({m, n}, DType::kF32);
      MatMul(x, *packed, got, &pool);
      ExpectBitExact(got, want, name + " packed, AVX2 forced");
    }
    // The stored bytes zeroed: the packed copy still gives the original product.
    std::memset(w.row(0), 0, static_cast<size_t>(w.nbytes()));
    Tensor got = Tensor::Empty({m, n}, DType::kF32);
    MatMul(x, *packed, got, &pool);
    ExpectBitExact(got, want, name + " packed, stored bytes zeroed");
  }
}

// avx2::MatMulInt8's tiles (int8::PackedTile): MXFP4 and Q8_0 at kInt8 at the AVX2 level (n = 21
// rounds up to 24 rows; 23 blocks' scales pad to 32 bytes: MXFP4's 184 to 192, Q8_0's 368 to
// 384). MatMul reads that copy alone at every m the kernel splits
// differently (a lone row's fused term, the prepared tile for several), and the portable level
// forced after packing reads the stored rows.
TEST(PackedWeightTest, PacksTilesForTheAvx2Kernel) {
  ThreadPool pool(2);
  const MatMulOptions int8{.precision = MatMulPrecision::kInt8};
  const int64_t k = 736, n = 21;
  struct Case {
    DType dtype;
    Path path;
    int64_t tile_bytes;
  };
  const Case cases[] = {{DType::kMXFP4, Path::kAvx2, 192 + 128 * 23},
                        {DType::kQ8_0, Path::kAvx2, 384 + 256 * 23}};
  for (const Case& c : cases) {
    ScopedPath scoped(c.path);
    if (!scoped.ok()) continue;
    const std::string name = PathName(c.path) + " " + std::string(DTypeName(c.dtype));
    Tensor w = RandomWeights(n, k, c.dtype, 43);
    const auto packed = PackedWeight::Pack(w, int8, &pool);
    ASSERT_NE(packed, nullptr) << name;
    EXPECT_EQ(packed->packed_bytes(), 3 * c.tile_bytes) << name;
    EXPECT_FALSE(packed->avx512_layout()) << name;
    std::vector<Tensor> xs, wants;
    for (int64_t m : {1, 2, 9, 70}) {
      xs.push_back(RandomX(m, k, 44 + static_cast<uint32_t>(m)));
      wants.push_back(Tensor::Empty({m, n}, DType::kF32));
      reference::MatMulInt8(xs.back(), w, wants.back());
    }
    {
      ScopedPath portable(Path::kPortable);
      Tensor got = Tensor::Empty(wants[1].shape(), DType::kF32);
      MatMul(xs[1], *packed, got, &pool);
      ExpectBitExact(got, wants[1], name + " packed, portable forced");
    }
    const ScopedPath restored(c.path);  // ~ScopedPath leaves the top level
    std::memset(w.row(0), 0, static_cast<size_t>(w.nbytes()));
    for (size_t i = 0; i < xs.size(); ++i) {
      Tensor got = Tensor::Empty(wants[i].shape(), DType::kF32);
      MatMul(xs[i], *packed, got, &pool);
      ExpectBitExact(got, wants[i],
                     name + " packed, stored bytes zeroed, m=" + std::to_string(xs[i].dim(0)));
    }
  }
  ScopedPath portable(Path::kPortable);
  EXPECT_EQ(PackedWeight::Pack(RandomWeights(n, k, DType::kMXFP4, 43), int8, &pool), nullptr);
}

// MatMulMany gives each operand MatMul's bits: one x by three weights of a dtype (the q/k/v
// shape: a wide one and two narrow ones, n not a multiple of the tile), packed, stored or mixed,
// at decode and prefill widths; and operands it cannot take together (mixed dtypes, kExact).
TEST(MatMulManyTest, EachOperandGetsMatMulsBits) {
  ThreadPool pool(2);
  const MatMulOptions int8{.precision = MatMulPrecision::kInt8};
  const int64_t k = 512;
  const int64_t ns[] = {70, 21, 16};
  for (DType dtype : {DType::kQ4_0, DType::kQ8_0, DType::kQ4_1, DType::kQ4_K, DType::kQ6_K}) {
    std::vector<Tensor> ws;
    std::vector<std::shared_ptr<const PackedWeight>> packed;
    for (int i = 0; i < 3; ++i) {
      ws.push_back(RandomWeights(ns[i], k, dtype, 50 + i));
      packed.push_back(PackedWeight::Pack(ws.back(), int8, &pool));
    }
    for (int64_t m : {1, 5, 16, 37}) {
      const Tensor x = RandomX(m, k, 60);
      for (int variant = 0; variant < 3; ++variant) {  // packed, stored, the middle one stored
        std::vector<Tensor> got, want;
        MatMulOperand operands[3];
        for (int i = 0; i < 3; ++i) {
          got.push_back(Tensor::Empty({m, ns[i]}, DType::kF32));
          want.push_back(Tensor::Empty({m, ns[i]}, DType::kF32));
        }
        for (int i = 0; i < 3; ++i) {
          const bool stored = variant == 1 || (variant == 2 && i == 1);
          const PackedWeight* p = stored ? nullptr : packed[i].get();
          operands[i] = {&ws[i], p, int8, &got[i]};
          if (p != nullptr) {
            MatMul(x, *p, want[i], &pool);
          } else {
            MatMul(x, ws[i], want[i], &pool, int8);
          }
        }
        MatMulMany(x, operands, &pool);
        for (int i = 0; i < 3; ++i) {
          ExpectBitExact(got[i], want[i],
                         std::string(DTypeName(dtype)) + " m " + std::to_string(m) + " variant " +
                             std::to_string(variant) + " operand " + std::to_string(i));
        }
      }
    }
  }
  // Mixed dtypes and kExact: MatMul per operand.
  const Tensor x = RandomX(20, k, 61);
  Tensor a = RandomWeights(33, k, DType::kQ4_K, 62), b = RandomWeights(17, k, DType::kQ6_K, 63);
  Tensor ya = Tensor::Empty({20, 33}, DType::kF32), yb = Tensor::Empty({20, 17}, DType::kF32);
  Tensor wa = Tensor::Empty({20, 33}, DType::kF32), wb = Tensor::Empty({20, 17}, DType::kF32);
  for (const MatMulOptions& options : {int8, MatMulOptions{}}) {
    const MatMulOperand operands[] = {{&a, nullptr, options, &ya}, {&b, nullptr, options, &yb}};
    MatMulMany(x, operands, &pool);
    MatMul(x, a, wa, &pool, options);
    MatMul(x, b, wb, &pool, options);
    ExpectBitExact(ya, wa, "Q4_K beside Q6_K");
    ExpectBitExact(yb, wb, "Q6_K beside Q4_K");
  }
}

// The default (nothing forced) is the best level the CPU has, and forcing works both ways.
TEST(Int8MatMulApiTest, LevelsFollowTheCpu) {
  EXPECT_EQ(internal::UseAvx2(), internal::CpuSupportsAvx2());
  EXPECT_EQ(internal::UseAvx512Vnni(), internal::CpuSupportsAvx512Vnni());
  if (internal::CpuSupportsAvx512Vnni()) {
    EXPECT_TRUE(internal::CpuSupportsAvx2());
  }
  {
    ScopedPath scoped(Path::kAvx2);
    EXPECT_FALSE(internal::UseAvx512Vnni());
    EXPECT_EQ(internal::UseAvx2(), internal::CpuSupportsAvx2());
  }
  internal::ForcePortableForTesting(true);
  EXPECT_FALSE(internal::UseAvx2());
  EXPECT_FALSE(internal::UseAvx512Vnni());
  internal::ForcePortableForTesting(false);
  EXPECT_EQ(internal::UseAvx512Vnni(), internal::CpuSupportsAvx512Vnni());
  EXPECT_EQ(internal::UseAvx512Bf16(), internal::CpuPrefersBf16Dot());
  EXPECT_EQ(internal::Avx512Bf16Available(), internal::CpuSupportsAvx512Bf16());
  {
    ScopedPath scoped(Path::kAvx2);
    EXPECT_FALSE(internal::Avx512Bf16Available());
    EXPECT_FALSE(internal::UseAvx512Bf16());
  }
#if defined(__x86_64__)
  __builtin_cpu_init();
  EXPECT_EQ(internal::CpuIsAmd(), __builtin_cpu_is("amd") != 0);
  if (internal::CpuSupportsAvx512Vnni()) {
    EXPECT_EQ(internal::CpuSupportsAvx512Bf16(), __builtin_cpu_supports("avx512bf16") != 0);
  }
#endif
  std::printf("[ NOTE     ] kernel levels on this CPU: AVX2 %s, AVX-512 VNNI %s, AVX512_BF16 %s\n",
              internal::CpuSupportsAvx2() ? "yes" : "no",
              internal::CpuSupportsAvx512Vnni() ? "yes" : "NO (its int8 MatMul is untested here)",
              internal::CpuSupportsAvx512Bf16() ? "yes" : "NO (its BF16 MatMul is untested here)");
}

// F32 and F16 weights ignore kInt8; so does BF16 where avx512::MatMulBf16 does not run
// (bf16_matmul_test checks that kernel).
TEST(Int8MatMulApiTest, FloatWeightsIgnoreThePrecision) {
  const Tensor x = RandomX(3, 64, 41);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    if (dtype == DType::kBF16 && internal::UseAvx512Bf16()) continue;
    Tensor w = Tensor::Empty({5, 64}, dtype);
    const Tensor source = RandomX(5, 64, 42);
    for (int64_t r = 0; r < 5; ++r) {
      QuantizeRow(dtype, source.data<float>() + r * 64, w.row(r), 64);
    }
    Tensor exact = Tensor::Empty({3, 5}, DType::kF32);
    Tensor int8 = Tensor::Empty({3, 5}, DType::kF32);
    MatMul(x, w, exact, nullptr);
    MatMul(x, w, int8, nullptr, MatMulPrecision::kInt8);
    ExpectBitExact(int8, exact, std::string(DTypeName(dtype)));
  }
}

}  // namespace
}  // namespace kernels
}  // namespace uc
