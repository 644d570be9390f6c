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

#include "common/test_util.h"
#include "io/gguf.h"
#include "io/gguf_types.h"
#include "kernels/dispatch.h"
#include "kernels/ops.h"

namespace uc {
namespace {

// SHA-256 (FIPS 180-4), incremental; enough for a test, not for speed.
class Sha256 {
 public:
  void Update(const void* data, size_t size) {
    const auto* p = static_cast<const uint8_t*>(data);
    length_ += size;
    if (buffered_ > 0) {
      const size_t take = std::min(size, size_t{64} - buffered_);
      std::memcpy(buffer_ + buffered_, p, take);
      buffered_ += take;
      p += take;
      size -= take;
      if (buffered_ < 64) return;
      Block(buffer_);
      buffered_ = 0;
    }
    for (; size >= 64; p += 64, size -= 64) Block(p);
    std::memcpy(buffer_, p, size);
    buffered_ = size;
  }

  std::string HexDigest() {
    const uint64_t bits = length_ * 8;
    const uint8_t pad = 0x80;
    Update(&pad, 1);
    const uint8_t zero = 0;
    while (buffered_ != 56) Update(&zero, 1);
    uint8_t be[8];
    for (int i = 0; i < 8; ++i) be[i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
    Update(be, 8);
    std::string hex;
    for (uint32_t word : state_) {
      char text[9];
      std::snprintf(text, sizeof(text), "%08x", word);
      hex += text;
    }
    return hex;
  }

 private:
  static uint32_t Rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

  void Block(const uint8_t* p) {
    static constexpr uint32_t kK[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2};
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      w[i] = uint32_t{p[4 * i]} << 24 | uint32_t{p[4 * i + 1]} << 16 | uint32_t{p[4 * i + 2]} << 8 |
             uint32_t{p[4 * i + 3]};
    }
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = Rotr(w[i - 15], 7) ^ Rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = Rotr(w[i - 2], 17) ^ Rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
    uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t t1 =
          h + (Rotr(e, 6) ^ Rotr(e, 11) ^ Rotr(e, 25)) + ((e & f) ^ (~e & g)) + kK[i] + w[i];
      const uint32_t t2 = (Rotr(a, 2) ^ Rotr(a, 13) ^ Rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    const uint32_t add[8] = {a, b, c, d, e, f, g, h};
    for (int i = 0; i < 8; ++i) state_[i] += add[i];
  }

  std::array<uint32_t, 8> state_ = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  uint8_t buffer_[64] = {};
  size_t buffered_ = 0;
  uint64_t length_ = 0;
};

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
