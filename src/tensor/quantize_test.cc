// The weight quantizers (QuantizeRow) against ggml: tests/testdata/quant/quantize/input.f32
// holds rows of varied distributions (gaussian, outliers, all zero, constant, tiny, mixed
// magnitudes, positive only, log-uniform wide, zeroed groups) and <TYPE>.bin the bytes
// ggml_quantize_chunk writes for them without an importance matrix
// (tools/reference/make_quantizer_fixtures.py). Every row of every type must be byte-identical.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace uc {
namespace {

constexpr int64_t kRowLen = 512;  // manifest.json "row_len"

std::vector<char> ReadFileOrDie(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << "cannot open " << path;
    return {};
  }
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

std::string Base() { return std::string(UC_SOURCE_DIR) + "/tests/testdata/quant/quantize/"; }

class QuantizeRowTest : public ::testing::TestWithParam<DType> {};

TEST_P(QuantizeRowTest, BytesEqualGgmlReference) {
  const DType dtype = GetParam();
  const std::string name(DTypeName(dtype));
  const std::vector<char> input = ReadFileOrDie(Base() + "input.f32");
  const std::vector<char> want = ReadFileOrDie(Base() + name + ".bin");
  const int64_t rows = static_cast<int64_t>(input.size()) / (kRowLen * 4);
  ASSERT_GT(rows, 0);
  ASSERT_EQ(rows * kRowLen * 4, static_cast<int64_t>(input.size()));
  const int64_t row_bytes = DTypeRowBytes(dtype, kRowLen);
  ASSERT_EQ(rows * row_bytes, static_cast<int64_t>(want.size())) << name;

  std::vector<float> x(static_cast<size_t>(rows * kRowLen));
  std::memcpy(x.data(), input.data(), input.size());
  std::vector<char> got(want.size(), 0x55);
  int differing_rows = 0;
  for (int64_t r = 0; r < rows; ++r) {
    QuantizeRow(dtype, x.data() + r * kRowLen, got.data() + r * row_bytes, kRowLen);
    const char* g = got.data() + r * row_bytes;
    const char* w = want.data() + r * row_bytes;
    if (std::memcmp(g, w, static_cast<size_t>(row_bytes)) == 0) continue;
    ++differing_rows;
    const int64_t block_bytes = DTypeBlockBytes(dtype);
    for (int64_t b = 0; b < row_bytes / block_bytes; ++b) {
      for (int64_t k = 0; k < block_bytes; ++k) {
        if (g[b * block_bytes + k] != w[b * block_bytes + k]) {
          ADD_FAILURE() << name << " row " << r << " block " << b << " byte " << k << ": got "
                        << (static_cast<int>(g[b * block_bytes + k]) & 0xff) << " want "
                        << (static_cast<int>(w[b * block_bytes + k]) & 0xff);
          break;
        }
      }
    }
  }
  EXPECT_EQ(differing_rows, 0) << name << ": " << differing_rows << " of " << rows << " rows";
}

INSTANTIATE_TEST_SUITE_P(Types, QuantizeRowTest,
                         ::testing::Values(DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
                                           DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

// Quantize then dequantize stays close to the input (a sanity check of the block layouts on
// top of the byte equality): relative RMS error per type on a gaussian row.
TEST(QuantizeRowRoundTrip, ErrorShrinksWithBits) {
  std::vector<float> x(1024);
  uint32_t state = 12345;
  for (float& v : x) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<float>(static_cast<int32_t>(state >> 8) - (1 << 23)) / (1 << 23);
  }
  auto rel_rms = [&](DType dtype) {
    std::vector<char> q(static_cast<size_t>(DTypeRowBytes(dtype, 1024)));
    std::vector<float> back(1024);
    QuantizeRow(dtype, x.data(), q.data(), 1024);
    DequantizeRow(dtype, q.data(), back.data(), 1024);
    double err = 0, ref = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      err += (back[i] - x[i]) * (back[i] - x[i]);
      ref += x[i] * x[i];
    }
    return std::sqrt(err / ref);
  };
  EXPECT_LT(rel_rms(DType::kQ4_K), 0.08);
  EXPECT_LT(rel_rms(DType::kQ5_K), rel_rms(DType::kQ4_K));
  EXPECT_LT(rel_rms(DType::kQ6_K), rel_rms(DType::kQ5_K));
  EXPECT_LT(rel_rms(DType::kQ5_0), rel_rms(DType::kQ4_0));
  EXPECT_LT(rel_rms(DType::kQ5_1), rel_rms(DType::kQ4_1));
  EXPECT_LT(rel_rms(DType::kQ8_0), 0.01);
}

}  // namespace
}  // namespace uc
