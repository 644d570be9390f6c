// The ggml block types Q5_0, Q5_1, IQ4_NL, Q2_K ... Q6_K, Q8_K and MXFP4 against gguf-py: for each,
// tests/testdata/quant/<TYPE>.blocks holds random blocks (edge-case scales included) and
// <TYPE>.f32 what gguf.quants.dequantize makes of them (tools/reference/make_quant_fixtures.py).
// Dequantization must match bit for bit on every path: the scalar reference (DequantizeRow), the
// portable and the AVX2 ConvertRow, and EmbeddingLookup. MatMul on the same weights, through the
// public op and both AVX2 paths (streaming and tiled), matches reference::MatMul within the
// float tolerance of kernels_test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/dispatch.h"
#include "kernels/matmul_test_util.h"
#include "kernels/ops.h"
#include "kernels/reference.h"

namespace uc::kernels {
namespace {

using testing::RandomX;

std::vector<char> ReadFileOrDie(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << "cannot open " << path;
    return {};
  }
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

// One fixture: the blocks as a [rows, cols] weight tensor and gguf-py's values for it.
struct Fixture {
  Tensor weights;
  std::vector<float> values;  // [rows * cols]
};

// Reads <TYPE>.blocks and <TYPE>.f32, arranged as rows of `blocks_per_row` blocks.
Fixture LoadFixture(DType dtype, int64_t blocks_per_row) {
  const std::string base = std::string(UC_SOURCE_DIR) + "/tests/testdata/quant/";
  const std::string name(DTypeName(dtype));
  const std::vector<char> blocks = ReadFileOrDie(base + name + ".blocks");
  const std::vector<char> values = ReadFileOrDie(base + name + ".f32");
  const int64_t num_blocks = static_cast<int64_t>(blocks.size()) / DTypeBlockBytes(dtype);
  EXPECT_EQ(num_blocks * DTypeBlockBytes(dtype), static_cast<int64_t>(blocks.size())) << name;
  EXPECT_EQ(num_blocks * DTypeBlockSize(dtype) * 4, static_cast<int64_t>(values.size())) << name;
  EXPECT_EQ(num_blocks % blocks_per_row, 0) << name;
  Fixture f;
  const int64_t rows = num_blocks / blocks_per_row;
  f.weights = Tensor::Empty({rows, blocks_per_row * DTypeBlockSize(dtype)}, dtype);
  std::memcpy(f.weights.raw(), blocks.data(), std::min<size_t>(blocks.size(), f.weights.nbytes()));
  f.values.resize(values.size() / 4);
  std::memcpy(f.values.data(), values.data(), f.values.size() * 4);
  return f;
}

std::string Hex(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  char text[16];
  std::snprintf(text, sizeof(text), "0x%08x", bits);
  return text;
}

// Expects got == want bit for bit; reports the first few differences.
void ExpectBitExact(const float* got, const float* want, int64_t n, const std::string& what) {
  int misses = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::memcmp(got + i, want + i, 4) == 0) continue;
    if (++misses <= 5) {
      ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " (" << Hex(got[i])
                    << ") want " << want[i] << " (" << Hex(want[i]) << ")";
    }
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << n << " elements differ";
}

// The fixtures' blocks per row: a few rows of several blocks each.
int64_t BlocksPerRow(DType dtype) { return DTypeBlockSize(dtype) == 32 ? 16 : 8; }

class QuantKernelsTest : public ::testing::TestWithParam<DType> {
 protected:
  void TearDown() override { internal::ForcePortableForTesting(false); }
  DType dtype() const { return GetParam(); }
};

TEST_P(QuantKernelsTest, DequantizeRowMatchesGgufPy) {
  const Fixture f = LoadFixture(dtype(), 1);
  const int64_t n = static_cast<int64_t>(f.values.size());
  std::vector<float> got(f.values.size());
  DequantizeRow(dtype(), f.weights.raw(), got.data(), n);
  ExpectBitExact(got.data(), f.values.data(), n, "DequantizeRow");
}

TEST_P(QuantKernelsTest, ConvertRowMatchesGgufPyOnBothPaths) {
  const Fixture f = LoadFixture(dtype(), BlocksPerRow(dtype()));
  const int64_t cols = f.weights.dim(1);
  std::vector<float> got(static_cast<size_t>(cols));
  for (int64_t r = 0; r < f.weights.dim(0); ++r) {
    cpu::ConvertRow(dtype(), f.weights.row(r), got.data(), cols);
    ExpectBitExact(got.data(), f.values.data() + r * cols, cols,
                   "portable row " + std::to_string(r));
    if (!internal::CpuSupportsAvx2()) continue;
#if defined(__x86_64__)
    std::fill(got.begin(), got.end(), -1.0f);
    avx2::ConvertRow(dtype(), f.weights.row(r), got.data(), cols);
    ExpectBitExact(got.data(), f.values.data() + r * cols, cols, "avx2 row " + std::to_string(r));
#endif
  }
}

TEST_P(QuantKernelsTest, EmbeddingLookupMatchesGgufPyOnBothPaths) {
  const Fixture f = LoadFixture(dtype(), BlocksPerRow(dtype()));
  const int64_t rows = f.weights.dim(0), cols = f.weights.dim(1);
  const std::vector<int32_t> ids = {static_cast<int32_t>(rows - 1), 0, 1,
                                    static_cast<int32_t>(rows / 2), 0};
  for (bool portable : {true, false}) {
    if (!portable && !internal::CpuSupportsAvx2()) continue;
    internal::ForcePortableForTesting(portable);
    Tensor out = Tensor::Empty({static_cast<int64_t>(ids.size()), cols}, DType::kF32);
    EmbeddingLookup(f.weights, ids, out);
    for (size_t i = 0; i < ids.size(); ++i) {
      ExpectBitExact(out.data<float>() + i * cols, f.values.data() + ids[i] * cols, cols,
                     std::string(portable ? "portable" : "avx2") + " id " + std::to_string(ids[i]));
    }
  }
}

// |got - want| <= rtol * (|want| + rms(want)) elementwise.
void ExpectCloseScaled(const Tensor& got, const Tensor& want, double rtol,
                       const std::string& what) {
  double ss = 0.0;
  for (int64_t i = 0; i < want.numel(); ++i)
    ss += double{want.data<float>()[i]} * want.data<float>()[i];
  const double rms = std::sqrt(ss / static_cast<double>(want.numel()));
  int misses = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = got.data<float>()[i], w = want.data<float>()[i];
    if (std::abs(g - w) <= rtol * (std::abs(w) + rms)) continue;
    if (++misses <= 5) ADD_FAILURE() << what << ": element " << i << " got " << g << " want " << w;
  }
  EXPECT_EQ(misses, 0) << what;
}

// The fixture's rows, less those with edge-case scales that dwarf the others (65504, -1000),
// which would leave the comparison blind to everything else: blocks 6 and 7 of every 16.
Tensor MatMulWeights(DType dtype) {
  Fixture f = LoadFixture(dtype, 1);
  std::vector<int64_t> keep;
  for (int64_t b = 0; b < f.weights.dim(0); ++b) {
    if (b % 16 != 6 && b % 16 != 7) keep.push_back(b);
  }
  const int64_t per_row = BlocksPerRow(dtype);
  const int64_t rows = static_cast<int64_t>(keep.size()) / per_row;
  Tensor w = Tensor::Empty({rows, per_row * DTypeBlockSize(dtype)}, dtype);
  const int64_t bytes = DTypeBlockBytes(dtype);
  for (int64_t i = 0; i < rows * per_row; ++i) {
    std::memcpy(static_cast<std::byte*>(w.raw()) + i * bytes, f.weights.row(keep[i]), bytes);
  }
  return w;
}

TEST_P(QuantKernelsTest, MatMulMatchesReference) {
  const Tensor w = MatMulWeights(dtype());
  const int64_t k = w.dim(1), n = w.dim(0);
  ThreadPool pool(2);
  uint32_t seed = 7;
  for (int64_t m : {1, 3, 8, 9, 20}) {
    const Tensor x = RandomX(m, k, seed++);
    Tensor want = Tensor::Empty({m, n}, DType::kF32);
    reference::MatMul(x, w, want);
    const std::string what = "m=" + std::to_string(m);
    for (bool portable : {true, false}) {
      if (!portable && !internal::CpuSupportsAvx2()) continue;
      internal::ForcePortableForTesting(portable);
      Tensor got = Tensor::Empty({m, n}, DType::kF32);
      MatMul(x, w, got, &pool);
      ExpectCloseScaled(got, want, 1e-5, what + (portable ? " portable" : " avx2"));
    }
#if defined(__x86_64__)
    if (!internal::CpuSupportsAvx2()) continue;
    const MatMulArgs args{x.data<float>(), m, k, w.row(0), w.dtype(), n, w.row_bytes(), nullptr};
    for (bool tiled : {false, true}) {
      Tensor got = Tensor::Empty({m, n}, DType::kF32);
      MatMulArgs a = args;
      a.y = got.data<float>();
      tiled ? avx2::MatMulTiled(a, &pool) : avx2::MatMulStreaming(a, &pool);
      ExpectCloseScaled(got, want, 1e-5, what + (tiled ? " tiled" : " streaming"));
    }
#endif
  }
}

INSTANTIATE_TEST_SUITE_P(GgmlTypes, QuantKernelsTest,
                         ::testing::Values(DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL, DType::kQ2_K,
                                           DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
                                           DType::kQ8_K, DType::kMXFP4),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

}  // namespace
}  // namespace uc::kernels
