// Every op against the scalar reference (kernels/reference.h) on random inputs, on both the
// AVX2 and the portable path, with one and two threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "kernels/bandwidth.h"
#include "kernels/compute_peak.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/dispatch.h"
#include "kernels/ops.h"
#include "kernels/reference.h"

namespace uc {
// Prints DType test parameters by name.
void PrintTo(DType dtype, std::ostream* os) { *os << DTypeName(dtype); }

namespace kernels {
namespace {

enum class Path { kPortable, kAvx2, kAvx512 };

std::string PathName(Path path) {
  return path == Path::kAvx512 ? "Avx512" : path == Path::kAvx2 ? "Avx2" : "Portable";
}
void PrintTo(Path path, std::ostream* os) { *os << PathName(path); }

// Routes ops to `path` (its kernel level at most) while alive. ok() is false when the CPU lacks
// the path's instructions.
class ScopedPath {
 public:
  explicit ScopedPath(Path path)
      : ok_(path == Path::kPortable || (path == Path::kAvx2 ? internal::CpuSupportsAvx2()
                                                            : internal::CpuSupportsAvx512Vnni())) {
    internal::ForceLevelForTesting(path == Path::kPortable ? internal::KernelLevel::kPortable
                                   : path == Path::kAvx2   ? internal::KernelLevel::kAvx2
                                                           : internal::KernelLevel::kAvx512);
  }
  ~ScopedPath() { internal::ForceLevelForTesting(internal::KernelLevel::kAvx512); }
  bool ok() const { return ok_; }

 private:
  bool ok_;
};

Tensor RandomNormal(Shape shape, uint32_t seed, float stddev = 1.0f, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(mean, stddev);
  Tensor t = Tensor::Empty(std::move(shape), DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

// Random quant bytes; the f16 scales (and mins) of each block get plausible values.
void FillQuantized(Tensor& t, std::mt19937& rng) {
  std::uniform_real_distribution<float> scale(0.002f, 0.05f);
  std::uniform_real_distribution<float> offset(-0.2f, 0.2f);
  std::uniform_int_distribution<int> byte(0, 255);
  auto* bytes = static_cast<uint8_t*>(t.raw());
  for (int64_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(byte(rng));
  const int64_t blocks = t.nbytes() / DTypeBlockBytes(t.dtype());
  for (int64_t b = 0; b < blocks; ++b) {
    std::byte* block = static_cast<std::byte*>(t.raw()) + b * DTypeBlockBytes(t.dtype());
    auto set = [&](auto* q) {
      using Block = std::remove_pointer_t<decltype(q)>;
      if constexpr (std::is_same_v<Block, BlockQ8_K>) {
        q->d = scale(rng) / 4;
      } else {
        q->d = F32ToF16(scale(rng) / (DTypeBlockSize(t.dtype()) == 32 ? 1 : 8));
      }
      if constexpr (requires { q->m; }) q->m = F32ToF16(offset(rng));
      if constexpr (requires { q->dmin; }) q->dmin = F32ToF16(scale(rng) / 8);
    };
    switch (t.dtype()) {
      case DType::kQ8_0:
        set(reinterpret_cast<BlockQ8_0*>(block));
        break;
      case DType::kQ4_0:
        set(reinterpret_cast<BlockQ4_0*>(block));
        break;
      case DType::kQ4_1:
        set(reinterpret_cast<BlockQ4_1*>(block));
        break;
      case DType::kQ5_0:
        set(reinterpret_cast<BlockQ5_0*>(block));
        break;
      case DType::kQ5_1:
        set(reinterpret_cast<BlockQ5_1*>(block));
        break;
      case DType::kIQ4_NL:
        set(reinterpret_cast<BlockIQ4_NL*>(block));
        break;
      case DType::kQ2_K:
        set(reinterpret_cast<BlockQ2_K*>(block));
        break;
      case DType::kQ3_K:
        set(reinterpret_cast<BlockQ3_K*>(block));
        break;
      case DType::kQ4_K:
        set(reinterpret_cast<BlockQ4_K*>(block));
        break;
      case DType::kQ5_K:
        set(reinterpret_cast<BlockQ5_K*>(block));
        break;
      case DType::kQ6_K:
        set(reinterpret_cast<BlockQ6_K*>(block));
        break;
      case DType::kQ8_K:
        set(reinterpret_cast<BlockQ8_K*>(block));
        break;
      case DType::kMXFP4:  // 2^(e - 128) * 12 up to 0.05
        reinterpret_cast<BlockMXFP4*>(block)->e = static_cast<uint8_t>(118 + byte(rng) % 7);
        break;
      default:
        FAIL() << "not a block type";
    }
  }
}

// Random [rows, cols] weights stored as `dtype`.
Tensor RandomWeights(Shape shape, DType dtype, uint32_t seed) {
  if (dtype == DType::kF32) return RandomNormal(shape, seed, 0.5f);
  Tensor t = Tensor::Empty(shape, dtype);
  std::mt19937 rng(seed);
  if (DTypeIsQuantized(dtype)) {
    FillQuantized(t, rng);
    return t;
  }
  std::normal_distribution<float> dist(0.0f, 0.5f);
  uint16_t* bits = t.data<uint16_t>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    bits[i] = dtype == DType::kF16 ? F32ToF16(dist(rng)) : F32ToBf16(dist(rng));
  }
  return t;
}

double Rms(const Tensor& t) {
  double ss = 0.0;
  for (int64_t i = 0; i < t.numel(); ++i) ss += double{t.data<float>()[i]} * t.data<float>()[i];
  return t.numel() == 0 ? 0.0 : std::sqrt(ss / static_cast<double>(t.numel()));
}

// Expects |got - want| <= rtol * |want| + atol elementwise; reports the first few misses.
void ExpectClose(const Tensor& got, const Tensor& want, double rtol, double atol,
                 const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  int misses = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = got.data<float>()[i];
    const double w = want.data<float>()[i];
    if (std::abs(g - w) <= rtol * std::abs(w) + atol) continue;
    if (++misses <= 5) {
      ADD_FAILURE() << what << ": element " << i << " got " << g << " want " << w;
    }
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << want.numel() << " elements differ";
}

// Relative tolerance with an absolute floor at the output's scale (cancellation in sums).
void ExpectCloseScaled(const Tensor& got, const Tensor& want, double rtol,
                       const std::string& what) {
  ExpectClose(got, want, rtol, rtol * Rms(want), what);
}

// ---------------------------------------------------------------------------------------------
// MatMul over dtype x threads x path.

using MatMulParam = std::tuple<DType, int, Path>;

const auto kAllWeightDTypes = ::testing::Values(
    DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
    DType::kQ5_1, DType::kIQ4_NL, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K,
    DType::kQ6_K, DType::kQ8_K, DType::kMXFP4);

class MatMulTest : public ::testing::TestWithParam<MatMulParam> {
 protected:
  DType dtype() const { return std::get<0>(GetParam()); }
  int threads() const { return std::get<1>(GetParam()); }
  Path path() const { return std::get<2>(GetParam()); }
};

TEST_P(MatMulTest, MatchesReference) {
  ScopedPath scoped(path());
  if (!scoped.ok()) GTEST_SKIP() << "CPU lacks the instructions of this path";
  ThreadPool pool(threads());
  uint32_t seed = 1;
  for (int64_t m : {1, 3, 17, 64}) {
    for (int64_t k : {64, 172, 96, 2048}) {
      if (k % DTypeBlockSize(dtype()) != 0) continue;
      for (int64_t n : {45, 19}) {
        const Tensor x = RandomNormal({m, k}, seed++);
        const Tensor w = RandomWeights({n, k}, dtype(), seed++);
        Tensor got = Tensor::Empty({m, n}, DType::kF32);
        Tensor want = Tensor::Empty({m, n}, DType::kF32);
        MatMul(x, w, got, &pool);
        reference::MatMul(x, w, want);
        ExpectCloseScaled(
            got, want, 1e-5,
            "m=" + std::to_string(m) + " k=" + std::to_string(k) + " n=" + std::to_string(n));
      }
    }
  }
}

// Batch invariance: each row of an m-row product has the bits of that row multiplied alone, for
// every m (across the decode/prefill boundary, blocks of 16, odd tails) and both precisions;
// and the invariant order is as close to the reference as the default one.
TEST_P(MatMulTest, BatchInvariantRowsEqualEachRowAlone) {
  ScopedPath scoped(path());
  if (!scoped.ok()) GTEST_SKIP() << "CPU lacks the instructions of this path";
  ThreadPool pool(threads());
  uint32_t seed = 7;
  const int64_t k = DTypeBlockSize(dtype()) == 256 ? 512 : DTypeIsQuantized(dtype()) ? 288 : 300;
  const int64_t n = 29;
  const Tensor w = RandomWeights({n, k}, dtype(), seed++);
  for (MatMulPrecision precision : {MatMulPrecision::kExact, MatMulPrecision::kInt8}) {
    const MatMulOptions options{.precision = precision, .batch_invariant = true};
    for (int64_t m : {2, 3, 8, 9, 17, 33, 70}) {
      const Tensor x = RandomNormal({m, k}, seed++);
      Tensor got = Tensor::Empty({m, n}, DType::kF32);
      MatMul(x, w, got, &pool, options);
      const std::string what = std::string(precision == MatMulPrecision::kInt8 ? "int8" : "exact") +
                               " m=" + std::to_string(m);
      if (precision == MatMulPrecision::kExact) {
        Tensor want = Tensor::Empty({m, n}, DType::kF32);
        reference::MatMul(x, w, want);
        ExpectCloseScaled(got, want, 1e-5, what);
      }
      int differing = 0;
      for (int64_t i = 0; i < m; ++i) {
        Tensor row = Tensor::Empty({1, k}, DType::kF32);
        std::memcpy(row.raw(), x.data<float>() + i * k, static_cast<size_t>(k) * sizeof(float));
        Tensor alone = Tensor::Empty({1, n}, DType::kF32);
        MatMul(row, w, alone, &pool, options);
        differing += std::memcmp(alone.raw(), got.data<float>() + i * n,
                                 static_cast<size_t>(n) * sizeof(float)) != 0;
      }
      EXPECT_EQ(differing, 0) << what << ": rows differing from the row alone";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, MatMulTest,
                         ::testing::Combine(kAllWeightDTypes, ::testing::Values(1, 2),
                                            ::testing::Values(Path::kAvx512, Path::kAvx2,
                                                              Path::kPortable)),
                         [](const ::testing::TestParamInfo<MatMulParam>& info) {
                           return std::string(DTypeName(std::get<0>(info.param))) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "Threads_" +
                                  PathName(std::get<2>(info.param));
                         });

// The two AVX2 MatMul paths are exact alternatives for every m; check each outside the range
// MatMul picks it for. Over dtype x threads.
class Avx2MatMulPathsTest : public ::testing::TestWithParam<std::tuple<DType, int>> {};

TEST_P(Avx2MatMulPathsTest, StreamingAndTiledMatchReference) {
  if (!internal::CpuSupportsAvx2()) GTEST_SKIP() << "CPU lacks AVX2";
  const DType dtype = std::get<0>(GetParam());
  ThreadPool pool(std::get<1>(GetParam()));
  uint32_t seed = 100;
  for (int64_t m : {1, 2, 4, 5, 6, 7, 13}) {
    // Crosses a 256-wide k block.
    const int64_t k = DTypeBlockSize(dtype) == 256 ? 512 : DTypeIsQuantized(dtype) ? 288 : 300;
    const int64_t n = 37;
    const Tensor x = RandomNormal({m, k}, seed++);
    const Tensor w = RandomWeights({n, k}, dtype, seed++);
    Tensor want = Tensor::Empty({m, n}, DType::kF32);
    reference::MatMul(x, w, want);
    for (bool tiled : {false, true}) {
      Tensor got = Tensor::Empty({m, n}, DType::kF32);
      const MatMulArgs args{x.data<float>(),  m, k, w.row(0), w.dtype(), n, w.row_bytes(),
                            got.data<float>()};
      tiled ? avx2::MatMulTiled(args, &pool) : avx2::MatMulStreaming(args, &pool);
      ExpectCloseScaled(got, want, 1e-5,
                        std::string(tiled ? "tiled" : "streaming") + " m=" + std::to_string(m));
    }
  }
}

// The AVX-512 prefill MatMul gives avx2::MatMulTiled's bits (the same FMA chain per element) for
// every m it is picked for and for partial tiles (n not a multiple of 32), across k blocks.
TEST_P(Avx2MatMulPathsTest, Avx512TiledEqualsAvx2TiledBitForBit) {
  if (!internal::CpuSupportsAvx512Vnni()) GTEST_SKIP() << "CPU lacks AVX-512";
  const DType dtype = std::get<0>(GetParam());
  ThreadPool pool(std::get<1>(GetParam()));
  uint32_t seed = 300;
  const int64_t k = DTypeBlockSize(dtype) == 256 ? 768 : DTypeIsQuantized(dtype) ? 544 : 580;
  for (int64_t m : {9, 12, 13, 25, 64}) {
    for (int64_t n : {37, 64, 161}) {
      const Tensor x = RandomNormal({m, k}, seed++);
      const Tensor w = RandomWeights({n, k}, dtype, seed++);
      Tensor want = Tensor::Empty({m, n}, DType::kF32);
      Tensor got = Tensor::Empty({m, n}, DType::kF32);
      const MatMulArgs args{x.data<float>(),   m, k, w.row(0), w.dtype(), n, w.row_bytes(),
                            want.data<float>()};
      avx2::MatMulTiled(args, &pool);
      MatMulArgs args512 = args;
      args512.y = got.data<float>();
      avx512::MatMulTiled(args512, &pool);
      EXPECT_EQ(std::memcmp(got.raw(), want.raw(), static_cast<size_t>(got.nbytes())), 0)
          << "m=" << m << " n=" << n;
      // And MatMul picks it: its result is the same.
      Tensor picked = Tensor::Empty({m, n}, DType::kF32);
      MatMul(x, w, picked, &pool);
      EXPECT_EQ(std::memcmp(picked.raw(), want.raw(), static_cast<size_t>(got.nbytes())), 0)
          << "MatMul m=" << m << " n=" << n;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, Avx2MatMulPathsTest,
                         ::testing::Combine(kAllWeightDTypes, ::testing::Values(1, 2)),
                         [](const ::testing::TestParamInfo<std::tuple<DType, int>>& info) {
                           return std::string(DTypeName(std::get<0>(info.param))) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "Threads";
                         });

// ---------------------------------------------------------------------------------------------
// The other ops over threads x path.

using OpParam = std::tuple<int, Path>;

class OpsTest : public ::testing::TestWithParam<OpParam> {
 protected:
  void SetUp() override {
    scoped_ = std::make_unique<ScopedPath>(std::get<1>(GetParam()));
    if (!scoped_->ok()) GTEST_SKIP() << "CPU lacks the instructions of this path";
    pool_ = std::make_unique<ThreadPool>(std::get<0>(GetParam()));
  }
  ThreadPool* pool() { return pool_.get(); }

 private:
  std::unique_ptr<ScopedPath> scoped_;
  std::unique_ptr<ThreadPool> pool_;
};

TEST_P(OpsTest, RmsNormMatchesReference) {
  uint32_t seed = 10;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t h : {64, 172, 2048, 5}) {
      const Tensor x = RandomNormal({3, h}, seed++, 2.0f);
      const Tensor w = RandomWeights({h}, dtype, seed++);
      Tensor got = Tensor::Empty({3, h}, DType::kF32);
      Tensor want = Tensor::Empty({3, h}, DType::kF32);
      RmsNorm(x, w, 1e-5f, got);
      reference::RmsNorm(x, w, 1e-5f, want);
      const std::string what = std::string(DTypeName(dtype)) + " h=" + std::to_string(h);
      ExpectClose(got, want, 1e-6, 1e-30, what);
      Tensor in_place = x.Clone();
      RmsNorm(in_place, w, 1e-5f, in_place);
      ExpectClose(in_place, want, 1e-6, 1e-30, what + " in place");
    }
  }
}

TEST_P(OpsTest, LayerNormAndGeluMatchReference) {
  uint32_t seed = 40;
  for (int64_t h : {64, 172, 2048, 5}) {
    // An offset row (mean 30): the variance must not come from E[x²] - E[x]².
    Tensor x = RandomNormal({4, h}, seed++, 2.0f);
    for (int64_t j = 0; j < h; ++j) x.data<float>()[3 * h + j] += 30.0f;
    const Tensor w = RandomNormal({h}, seed++, 1.0f);
    const Tensor b = RandomNormal({h}, seed++, 1.0f);
    Tensor got = Tensor::Empty({4, h}, DType::kF32);
    Tensor want = Tensor::Empty({4, h}, DType::kF32);
    LayerNorm(x, w, b, 1e-5f, got, pool());
    reference::LayerNorm(x, w, b, 1e-5f, want);
    ExpectClose(got, want, 1e-6, 1e-6, "LayerNorm h=" + std::to_string(h));
    Tensor in_place = x.Clone();
    LayerNorm(in_place, w, b, 1e-5f, in_place, pool());
    ExpectClose(in_place, want, 1e-6, 1e-6, "LayerNorm in place h=" + std::to_string(h));
    for (const bool tanh_form : {true, false}) {
      Tensor a = RandomNormal({3, h}, seed++, 3.0f);
      Tensor ref = a.Clone();
      if (tanh_form) {
        GeluTanh(a, pool());
        reference::GeluTanh(ref);
      } else {
        Gelu(a, pool());
        reference::Gelu(ref);
      }
      ExpectClose(a, ref, 2e-6, 1e-7, (tanh_form ? "GeluTanh h=" : "Gelu h=") + std::to_string(h));
    }
  }
}

TEST_P(OpsTest, RopeMatchesReference) {
  const std::vector<int32_t> positions = {0, 1, 7, 255, 1024, 4095};
  struct Case {
    int num_heads, head_dim, rotary_dim;
  };
  uint32_t seed = 20;
  for (const Case& c : {Case{4, 64, 64}, Case{2, 64, 32}, Case{3, 12, 8}, Case{2, 128, 128}}) {
    std::vector<float> inv_freq;
    for (int j = 0; j < c.rotary_dim / 2; ++j) {
      inv_freq.push_back(std::pow(10000.0f, -2.0f * j / c.rotary_dim));
    }
    for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalf}) {
      const Tensor x = RandomNormal({6, int64_t{c.num_heads} * c.head_dim}, seed++);
      Tensor got = x.Clone();
      Tensor want = x.Clone();
      Rope(positions, inv_freq, c.num_heads, c.head_dim, style, got);
      reference::Rope(positions, inv_freq, c.num_heads, c.head_dim, style, want);
      ExpectCloseScaled(
          got, want, 1e-6,
          "head_dim=" + std::to_string(c.head_dim) + " rotary=" + std::to_string(c.rotary_dim));
      // Dimensions past rotary_dim are untouched.
      for (int64_t i = 0; i < x.numel(); ++i) {
        if (i % c.head_dim >= c.rotary_dim) {
          ASSERT_EQ(got.data<float>()[i], x.data<float>()[i]);
        }
      }
    }
  }
}

TEST_P(OpsTest, SiluAndMulMatchesReference) {
  for (int64_t count : {1, 8, 13, 1029}) {
    Tensor gate = RandomNormal({1, count}, 30 + static_cast<uint32_t>(count), 4.0f);
    if (count > 8) gate.data<float>()[3] = -95.0f;  // exp saturates
    if (count > 8) gate.data<float>()[4] = 95.0f;
    const Tensor up = RandomNormal({1, count}, 31);
    Tensor got = Tensor::Empty({1, count}, DType::kF32);
    Tensor want = Tensor::Empty({1, count}, DType::kF32);
    SiluAndMul(gate, up, got);
    reference::SiluAndMul(gate, up, want);
    ExpectClose(got, want, 1e-6, 1e-30, "count=" + std::to_string(count));
  }
}

TEST_P(OpsTest, SoftmaxMatchesReference) {
  for (int64_t n : {1, 7, 64, 32003}) {
    Tensor x = RandomNormal({3, n}, 40 + static_cast<uint32_t>(n), 5.0f);
    Tensor want = x.Clone();
    Softmax(x);
    reference::Softmax(want);
    ExpectClose(x, want, 1e-6, 1e-30, "n=" + std::to_string(n));
  }
  // Masked logits (-inf) get probability exactly 0.
  Tensor masked = RandomNormal({2, 19}, 45);
  for (int j : {0, 5, 17, 18}) masked.data<float>()[j] = -INFINITY;
  Tensor masked_want = masked.Clone();
  Softmax(masked);
  reference::Softmax(masked_want);
  ExpectClose(masked, masked_want, 1e-6, 1e-30, "masked");
  EXPECT_EQ(masked.data<float>()[5], 0.0f);
  // exp over its whole useful range: probabilities from 1 down to e^-87.
  Tensor wide = Tensor::Empty({1, 1000}, DType::kF32);
  for (int j = 0; j < 1000; ++j) wide.data<float>()[j] = -87.0f * static_cast<float>(j) / 999;
  Tensor want = wide.Clone();
  Softmax(wide);
  reference::Softmax(want);
  ExpectClose(wide, want, 1e-6, 1e-38, "wide range");
}

TEST_P(OpsTest, AddBiasAndAddInPlaceMatchReference) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    const Tensor bias = RandomWeights({37}, dtype, 50);
    Tensor got = RandomNormal({5, 37}, 51);
    Tensor want = got.Clone();
    AddBias(bias, got);
    reference::AddBias(bias, want);
    ExpectClose(got, want, 0.0, 0.0, std::string("AddBias ") + std::string(DTypeName(dtype)));
  }
  const Tensor x = RandomNormal({3, 41}, 52);
  Tensor got = RandomNormal({3, 41}, 53);
  Tensor want = got.Clone();
  AddInPlace(x, got);
  reference::AddInPlace(x, want);
  ExpectClose(got, want, 0.0, 0.0, "AddInPlace");
}

// Given a pool, the row-wise ops split calls over kParallelRowOpElements per thread among its
// threads: the same bits as one thread, row lengths a multiple of the vector width or not.
TEST_P(OpsTest, RowOpsOnThePoolGiveTheSameBitsAsInline) {
  struct Shape {
    int64_t m, n;
  };
  uint32_t seed = 70;
  for (const Shape& s : {Shape{37, 2048}, Shape{67, 1029}}) {
    ASSERT_GE(s.m * s.n, 2 * kParallelRowOpElements);  // the pool's threads share it
    const std::string what = std::to_string(s.m) + "x" + std::to_string(s.n);
    const Tensor a = RandomNormal({s.m, s.n}, seed++, 4.0f);
    const Tensor b = RandomNormal({s.m, s.n}, seed++);
    auto expect_same = [&](const char* op, auto run) {
      Tensor inline_out = Tensor::Empty({s.m, s.n}, DType::kF32);
      Tensor pooled_out = Tensor::Empty({s.m, s.n}, DType::kF32);
      run(inline_out, nullptr);
      run(pooled_out, pool());
      ExpectClose(pooled_out, inline_out, 0.0, 0.0, std::string(op) + " " + what);
    };
    const Tensor w = RandomWeights({s.n}, DType::kBF16, seed++);
    expect_same("RmsNorm", [&](Tensor& out, ThreadPool* p) { RmsNorm(a, w, 1e-5f, out, p); });
    expect_same("SiluAndMul", [&](Tensor& out, ThreadPool* p) { SiluAndMul(a, b, out, p); });
    expect_same("GeluTanhAndMul",
                [&](Tensor& out, ThreadPool* p) { GeluTanhAndMul(a, b, out, p); });
    expect_same("AddInPlace", [&](Tensor& out, ThreadPool* p) {
      std::memcpy(out.raw(), b.raw(), static_cast<size_t>(b.nbytes()));
      AddInPlace(a, out, p);
    });
    if (s.n % 64 == 0) {  // 32 heads of 64
      std::vector<int32_t> positions(static_cast<size_t>(s.m));
      for (int64_t i = 0; i < s.m; ++i) positions[i] = static_cast<int32_t>(3 * i + 1);
      std::vector<float> inv_freq;
      for (int j = 0; j < 32; ++j) inv_freq.push_back(std::pow(10000.0f, -2.0f * j / 64));
      expect_same("Rope", [&](Tensor& out, ThreadPool* p) {
        std::memcpy(out.raw(), a.raw(), static_cast<size_t>(a.nbytes()));
        Rope(positions, inv_freq, static_cast<int>(s.n / 64), 64, RopeStyle::kHalf, out, p);
      });
    }
  }
}

TEST_P(OpsTest, EmbeddingLookupMatchesReference) {
  const std::vector<int32_t> ids = {3, 0, 99, 3, 42};
  uint32_t seed = 60;
  for (DType dtype :
       {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
        DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K,
        DType::kQ5_K, DType::kQ6_K, DType::kQ8_K, DType::kMXFP4}) {
    for (int64_t h : {64, 96, 172, 512}) {
      if (h % DTypeBlockSize(dtype) != 0) continue;
      const Tensor table = RandomWeights({100, h}, dtype, seed++);
      Tensor got = Tensor::Empty({5, h}, DType::kF32);
      Tensor want = Tensor::Empty({5, h}, DType::kF32);
      EmbeddingLookup(table, ids, got);
      reference::EmbeddingLookup(table, ids, want);
      // Bit for bit, Q4_0 and Q4_1 included: their AVX2 decoders fuse a multiply-add where the
      // reference rounds twice, but with an f16 scale and a 4-bit quant the product is exact.
      ExpectClose(got, want, 0.0, 0.0, std::string(DTypeName(dtype)) + " h=" + std::to_string(h));
    }
  }
}

struct AttentionCase {
  int num_heads, num_kv_heads, head_dim;
  std::vector<int32_t> positions;
  int capacity;
  float q_scale;  // larger values make the softmax peaky
};

TEST_P(OpsTest, CausalAttentionMatchesReference) {
  const std::vector<int32_t> prefill = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  const std::vector<AttentionCase> cases = {
      {4, 2, 8, prefill, 17, 1.0f},
      {6, 3, 12, {100, 101, 102, 103, 104}, 128, 1.0f},
      {4, 4, 64, prefill, 32, 4.0f},
      {8, 2, 128, {1500}, 2048, 1.0f},
      {2, 1, 128, {0, 7, 63}, 64, 10.0f},
      {3, 1, 40, {2999}, 3000, 1.0f},
      // Groups past four heads (two passes of the AVX-512 loops), head_dim with a 16-lane tail
      // and past 64 lanes, Gemma's 256.
      {16, 2, 72, prefill, 17, 2.0f},
      {10, 2, 256, {0, 5, 40}, 64, 1.0f},
  };
  uint32_t seed = 70;
  for (const AttentionCase& c : cases) {
    const int64_t m = static_cast<int64_t>(c.positions.size());
    const Tensor q = RandomNormal({m, int64_t{c.num_heads} * c.head_dim}, seed++, c.q_scale);
    const Tensor k = RandomNormal({c.capacity, int64_t{c.num_kv_heads} * c.head_dim}, seed++);
    const Tensor v = RandomNormal({c.capacity, int64_t{c.num_kv_heads} * c.head_dim}, seed++);
    const AttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim,
                               1.0f / std::sqrt(static_cast<float>(c.head_dim))};
    Tensor got = Tensor::Empty(q.shape(), DType::kF32);
    Tensor want = Tensor::Empty(q.shape(), DType::kF32);
    CausalAttention(q, k, v, c.positions, shape, got, pool());
    reference::CausalAttention(q, k, v, c.positions, shape, want);
    ExpectCloseScaled(got, want, 1e-5,
                      "heads=" + std::to_string(c.num_heads) + "/" +
                          std::to_string(c.num_kv_heads) +
                          " head_dim=" + std::to_string(c.head_dim));
  }
}

// A batch of sequences of different lengths, prefill chunks and decode tokens mixed, whose
// blocks are scattered over the cache in shuffled order.
TEST_P(OpsTest, PagedAttentionMatchesReference) {
  struct Case {
    int num_heads, num_kv_heads, head_dim, block_size;
  };
  const std::vector<Case> cases = {
      {4, 2, 8, 16}, {6, 3, 12, 4}, {8, 2, 64, 16}, {3, 1, 40, 1}, {2, 2, 128, 64}};
  // (sequence length so far, tokens of it in this batch)
  const std::vector<std::pair<int, int>> seqs = {{1, 1}, {37, 1}, {70, 20}, {16, 16}, {130, 3}};
  uint32_t seed = 300;
  for (const Case& c : cases) {
    const int max_len = 130;
    const int blocks_per_seq = (max_len + c.block_size - 1) / c.block_size;
    const int num_blocks = blocks_per_seq * static_cast<int>(seqs.size()) + 3;
    std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
    for (int b = 0; b < num_blocks; ++b) ids[b] = b;
    std::mt19937 rng(seed);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<int32_t> tables(seqs.size() * blocks_per_seq, -1);
    size_t next = 0;
    std::vector<int32_t> positions, token_seq;
    for (size_t s = 0; s < seqs.size(); ++s) {
      const auto [len, tokens] = seqs[s];
      for (int b = 0; b * c.block_size < len; ++b) tables[s * blocks_per_seq + b] = ids[next++];
      for (int p = len - tokens; p < len; ++p) {
        positions.push_back(p);
        token_seq.push_back(static_cast<int32_t>(s));
      }
    }
    const int64_t m = static_cast<int64_t>(positions.size());
    const int64_t kv_width = int64_t{c.num_kv_heads} * c.head_dim;
    const Tensor q = RandomNormal({m, int64_t{c.num_heads} * c.head_dim}, seed++, 2.0f);
    const Tensor k = RandomNormal({int64_t{num_blocks} * c.block_size, kv_width}, seed++);
    const Tensor v = RandomNormal({int64_t{num_blocks} * c.block_size, kv_width}, seed++);
    const AttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim,
                               1.0f / std::sqrt(static_cast<float>(c.head_dim))};
    const PagedKvLayout layout{c.block_size, blocks_per_seq, tables, token_seq};
    Tensor got = Tensor::Empty(q.shape(), DType::kF32);
    Tensor want = Tensor::Empty(q.shape(), DType::kF32);
    PagedAttention(q, k, v, layout, positions, shape, got, pool());
    reference::PagedAttention(q, k, v, layout, positions, shape, want);
    ExpectCloseScaled(got, want, 1e-5, "block_size=" + std::to_string(c.block_size));
    // A token's result does not depend on its batch neighbours: run each token alone.
    for (int64_t i = 0; i < m; ++i) {
      Tensor qi = q.Slice(i, i + 1);
      Tensor alone = Tensor::Empty(qi.shape(), DType::kF32);
      const int32_t seq[1] = {token_seq[i]};
      const PagedKvLayout one{c.block_size, blocks_per_seq, tables, seq};
      PagedAttention(qi, k, v, one, std::span<const int32_t>(&positions[i], 1), shape, alone,
                     pool());
      ASSERT_EQ(
          std::memcmp(alone.raw(), got.Slice(i, i + 1).raw(), static_cast<size_t>(alone.nbytes())),
          0)
          << "token " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ThreadsAndPaths, OpsTest,
                         ::testing::Combine(::testing::Values(1, 2),
                                            ::testing::Values(Path::kAvx512, Path::kAvx2,
                                                              Path::kPortable)),
                         [](const ::testing::TestParamInfo<OpParam>& info) {
                           return std::to_string(std::get<0>(info.param)) + "Threads_" +
                                  PathName(std::get<1>(info.param));
                         });

// ---------------------------------------------------------------------------------------------

TEST(KernelsTest, HasAvx2FollowsTheTestingSwitch) {
  internal::ForcePortableForTesting(true);
  EXPECT_FALSE(HasAvx2());
  internal::ForcePortableForTesting(false);
  EXPECT_EQ(HasAvx2(), internal::CpuSupportsAvx2());
}

TEST(KernelsTest, MatMulWithEmptyInnerDimensionIsZero) {
  Tensor x = Tensor::Empty({2, 0}, DType::kF32);
  Tensor w = Tensor::Empty({3, 0}, DType::kBF16);
  Tensor y = RandomNormal({2, 3}, 1);
  MatMul(x, w, y, nullptr);
  for (float v : y.ToFloatVector()) EXPECT_EQ(v, 0.0f);
}

TEST(KernelsDeathTest, ShapeMismatchesAreFatal) {
  const Tensor x = RandomNormal({2, 64}, 1);
  const Tensor w = RandomNormal({8, 32}, 2);
  Tensor y = Tensor::Empty({2, 8}, DType::kF32);
  EXPECT_DEATH(MatMul(x, w, y, nullptr), "MatMul: shapes");
  const std::vector<int32_t> ids = {100};
  Tensor out = Tensor::Empty({1, 32}, DType::kF32);
  EXPECT_DEATH(EmbeddingLookup(w, ids, out), "outside vocabulary");
}

TEST(KernelsTest, ReadBandwidthIsTheBestOfEveryReadLoop) {
  ThreadPool pool(2);
  const std::vector<ReadLoopBandwidth> loops = MeasureReadLoops(&pool, int64_t{8} << 20, 3);
  ASSERT_FALSE(loops.empty());
  EXPECT_EQ(loops.front().loop, "portable");
  if (internal::UseAvx2()) {
    ASSERT_GE(loops.size(), 2u);
    EXPECT_EQ(loops[1].loop, "avx2");
  }
  if (internal::UseAvx512Vnni()) {
    EXPECT_EQ(loops.back().loop, "avx512");
  }
  for (const ReadLoopBandwidth& r : loops) EXPECT_GT(r.bytes_per_second, 1e8) << r.loop;
  EXPECT_GT(MeasureReadBandwidth(&pool, int64_t{8} << 20, 3), 1e8);
}

// Each read loop sums exactly what the portable one does (the probe reads every byte).
TEST(KernelsTest, ReadLoopsSumEveryElement) {
  std::vector<float> x(4096 + 37);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7);
  const int64_t n = static_cast<int64_t>(x.size());
  double expected = 0.0;
  for (float v : x) expected += v;
  EXPECT_EQ(cpu::SumFloats(x.data(), n), expected);
#if defined(__x86_64__)
  if (internal::UseAvx2()) {
    EXPECT_EQ(avx2::SumFloats(x.data(), n), expected);
  }
  if (internal::UseAvx512Vnni()) {
    EXPECT_EQ(avx512::SumFloats(x.data(), n), expected);
  }
#endif
}

// The compute probes list exactly the instructions this CPU's kernels use, lowest level first.
TEST(KernelsTest, ComputePeaksCoverEveryInstructionTheKernelsUse) {
  ThreadPool pool(2);
  const std::vector<ComputePeak> peaks = MeasureComputePeaks(&pool, 1, 0.002);
  std::vector<std::string> names;
  for (const ComputePeak& p : peaks) {
    names.push_back(p.instruction);
    EXPECT_TRUE(std::isfinite(p.ops_per_second) && p.ops_per_second > 1e8) << p.instruction;
  }
  std::vector<std::string> expected;
  if (internal::UseAvx2()) expected = {"fma-f32 ymm", "maddubs ymm"};
  if (internal::UseAvx512Vnni()) {
    expected.insert(expected.end(), {"fma-f32 zmm", "vpdpbusd zmm"});
  }
  if (internal::Avx512Bf16Available()) {
    expected.push_back("vdpbf16ps zmm");
  }
  EXPECT_EQ(names, expected);
  for (const ComputePeak& p : peaks) {
    const bool known = p.kind == "f32" || p.kind == "int8" || p.kind == "bf16";
    EXPECT_TRUE(known) << p.instruction << ": " << p.kind;
  }
}

// Each probe does the work its operation count claims: the lanes' sum counts it exactly.
TEST(KernelsTest, ComputeProbesDoTheWorkTheyCount) {
#if defined(__x86_64__)
  for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000}}) {
    const double dn = static_cast<double>(n);
    if (internal::UseAvx2()) {
      EXPECT_EQ(avx2::FmaChains(n), 96 * dn);
      EXPECT_EQ(avx2::MaddubsChains(n), 2016 * dn);
    }
    if (internal::UseAvx512Vnni()) {
      EXPECT_EQ(avx512::FmaChains(n), 192 * dn);
      EXPECT_EQ(avx512::DpbusdChains(n), 768 * dn);
    }
    if (internal::Avx512Bf16Available()) {
      EXPECT_EQ(avx512::Dpbf16Chains(n), 192 * dn * 0x1p-19);
    }
  }
#else
  GTEST_SKIP() << "the compute probes are x86-64 only";
#endif
}

TEST(KernelsDeathTest, ComputePeaksNeedARepetition) {
  EXPECT_DEATH(MeasureComputePeaks(nullptr, 0), "need >= 1 repetition");
}

}  // namespace
}  // namespace kernels
}  // namespace uc
