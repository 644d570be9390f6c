// Every tensor of a real K-quant model dequantizes bit for bit as gguf-py does: Gemma 3 270M
// Q4_K_M (Q4_K, Q6_K, Q5_0, Q8_0 and F32 tensors; scripts/fetch-gemma3.sh), whose per-tensor
// sha256 of the float32 values from gguf.quants.dequantize is in
// tests/testdata/gemma3/dequant_sha256.json (tools/reference/make_quant_fixtures.py --gemma3).
// Each tensor is read through GgufFile and dequantized by the scalar reference (DequantizeRow,
// hashed and compared with the file) and by EmbeddingLookup on the portable and the AVX2 path
// (compared byte for byte with the reference). Label `model`: UC_GEMMA3_GGUF must point to the
// .gguf; the test is skipped when it is unset.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "common/sha256.h"
#include "common/test_util.h"
#include "io/gguf/gguf.h"
#include "io/gguf/gguf_types.h"
#include "kernels/dispatch.h"
#include "kernels/ops.h"

namespace uc {
namespace {

using testing::Sha256;

TEST(Sha256Test, KnownDigests) {
  Sha256 empty;
  EXPECT_EQ(empty.HexDigest(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  Sha256 abc;
  abc.Update("a", 1);
  abc.Update("bc", 2);
  EXPECT_EQ(abc.HexDigest(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string million(1000000, 'a');
  Sha256 many;
  for (size_t i = 0; i < million.size(); i += 999) {
    many.Update(million.data() + i, std::min<size_t>(999, million.size() - i));
  }
  EXPECT_EQ(many.HexDigest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Dequantizes `tensor` ([rows, cols], any rank folded to 2-D) with the reference and with
// EmbeddingLookup on both paths, a chunk of rows at a time; returns the reference's sha256.
std::string CheckTensor(const Tensor& tensor, const std::string& name) {
  const int64_t cols = tensor.rank() == 0 ? 1 : tensor.dim(-1);
  const int64_t rows = cols == 0 ? 0 : tensor.numel() / cols;
  const Tensor table = tensor.Reshape({rows, cols});
  const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 20) / std::max<int64_t>(1, cols));
  Sha256 sha;
  std::vector<float> want;
  std::vector<int32_t> ids;
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t n = std::min(chunk, rows - r0);
    want.resize(static_cast<size_t>(n * cols));
    for (int64_t r = 0; r < n; ++r) {
      DequantizeRow(table.dtype(), table.row(r0 + r), want.data() + r * cols, cols);
    }
    sha.Update(want.data(), want.size() * sizeof(float));
    ids.resize(static_cast<size_t>(n));
    std::iota(ids.begin(), ids.end(), static_cast<int32_t>(r0));
    for (bool portable : {true, false}) {
      if (!portable && !kernels::internal::CpuSupportsAvx2()) continue;
      kernels::internal::ForcePortableForTesting(portable);
      Tensor got = Tensor::Empty({n, cols}, DType::kF32);
      kernels::EmbeddingLookup(table, ids, got);
      kernels::internal::ForcePortableForTesting(false);
      if (std::memcmp(got.raw(), want.data(), want.size() * sizeof(float)) == 0) continue;
      for (size_t i = 0; i < want.size(); ++i) {
        if (std::memcmp(got.data<float>() + i, want.data() + i, sizeof(float)) == 0) continue;
        ADD_FAILURE() << name << ": " << (portable ? "portable" : "AVX2") << " element "
                      << r0 * cols + static_cast<int64_t>(i) << " is " << got.data<float>()[i]
                      << ", the reference " << want[i];
        return "";
      }
    }
  }
  return sha.HexDigest();
}

TEST(Gemma3DequantTest, EveryTensorMatchesGgufPy) {
  const char* path = std::getenv("UC_GEMMA3_GGUF");
  if (path == nullptr || *path == '\0') {
    GTEST_SKIP() << "UC_GEMMA3_GGUF is not set: run scripts/fetch-gemma3.sh and export its output";
  }
  const auto start = std::chrono::steady_clock::now();
  auto gguf = io::GgufFile::Open(path);
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  const nlohmann::json expected =
      testing::LoadJson(testing::TestData("gemma3/dequant_sha256.json"));
  ASSERT_TRUE(expected.contains("tensors"));
  EXPECT_EQ((*gguf)->tensor_infos().size(), expected["tensors"].size());
  int64_t elements = 0;
  for (const nlohmann::json& t : expected["tensors"]) {
    const std::string name = t["name"];
    SCOPED_TRACE(name);
    StatusOr<Tensor> tensor = (*gguf)->Get(name);
    ASSERT_TRUE(tensor.ok()) << tensor.status().ToString();
    EXPECT_EQ(DTypeName(tensor->dtype()), t["type"].get<std::string>());
    ASSERT_EQ(tensor->shape(), t["shape"].get<Shape>());
    EXPECT_EQ(CheckTensor(*tensor, name), t["sha256"].get<std::string>());
    // A few values too, so that a mismatch shows numbers and not just two digests.
    const int64_t cols = tensor->dim(-1);
    std::vector<float> row(static_cast<size_t>(cols));
    for (const nlohmann::json& sample : t["samples"]) {
      const auto index = sample[0].get<int64_t>();
      ASSERT_LT(index, tensor->numel());
      DequantizeRow(tensor->dtype(), tensor->row(index / cols), row.data(), cols);
      EXPECT_EQ(row[index % cols], sample[1].get<float>()) << "element " << index;
    }
    elements += tensor->numel();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("checked %zu tensors, %lld values, in %.1f s\n", expected["tensors"].size(),
              static_cast<long long>(elements), seconds);
}

}  // namespace
}  // namespace uc
