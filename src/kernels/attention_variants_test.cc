// The ops the Gemma family adds — sliding-window and soft-capped attention, GELU-tanh gating,
// soft-capping and scaling — against the scalar reference (kernels/reference.h), on both the
// AVX2 and the portable path, with one and two threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/ops.h"
#include "kernels/reference.h"

namespace uc::kernels {
namespace {

enum class Path { kPortable, kAvx2, kAvx512 };

Tensor RandomNormal(Shape shape, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  Tensor t = Tensor::Empty(std::move(shape), DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

// |got - want| <= tol * max(1, max |want|), element by element.
void ExpectCloseScaled(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  double scale = 1.0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    scale = std::max(scale, std::fabs(double{want.data<float>()[i]}));
  }
  for (int64_t i = 0; i < want.numel(); ++i) {
    ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], tol * scale)
        << what << " element " << i;
  }
}

class VariantsTest : public ::testing::TestWithParam<std::tuple<int, Path>> {
 protected:
  void SetUp() override {
    const Path path = std::get<1>(GetParam());
    if (path == Path::kAvx2 && !internal::CpuSupportsAvx2()) GTEST_SKIP() << "CPU lacks AVX2";
    if (path == Path::kAvx512 && !internal::CpuSupportsAvx512Vnni()) {
      GTEST_SKIP() << "CPU lacks AVX-512";
    }
    internal::ForceLevelForTesting(path == Path::kPortable ? internal::KernelLevel::kPortable
                                   : path == Path::kAvx2   ? internal::KernelLevel::kAvx2
                                                           : internal::KernelLevel::kAvx512);
    pool_ = std::make_unique<ThreadPool>(std::get<0>(GetParam()));
  }
  void TearDown() override { internal::ForceLevelForTesting(internal::KernelLevel::kAvx512); }
  ThreadPool* pool() { return pool_.get(); }

 private:
  std::unique_ptr<ThreadPool> pool_;
};

TEST(AttentionShapeTest, FirstPositionKeepsTheLastWindowPositions) {
  AttentionShape shape{1, 1, 8, 1.0f};
  EXPECT_EQ(shape.FirstPosition(0), 0);
  EXPECT_EQ(shape.FirstPosition(100), 0);
  shape.window = 4;
  EXPECT_EQ(shape.FirstPosition(0), 0);
  EXPECT_EQ(shape.FirstPosition(3), 0);
  EXPECT_EQ(shape.FirstPosition(4), 1);  // positions 1, 2, 3, 4: four of them
  EXPECT_EQ(shape.FirstPosition(100), 97);
}

// Sequences longer and shorter than the window, prefill chunks and decode tokens, blocks
// scattered over the cache, with and without soft-capping; each token alone gives the same bits.
TEST_P(VariantsTest, WindowedAndCappedPagedAttentionMatchesReference) {
  struct Variant {
    int window;
    float softcap;
    bool sinks = false;
  };
  const Variant variants[] = {{1, 0.0f},       {8, 0.0f},       {33, 0.0f},
                              {0, 3.0f},       {16, 2.0f},      {512, 0.5f},
                              {0, 0.0f, true}, {8, 0.0f, true}, {1, 0.0f, true}};
  // gpt-oss's sink logits, one per head: one far above the scores, one far below.
  const float sinks[] = {0.3f, -1.2f, 9.0f, -30.0f};
  const std::vector<std::pair<int, int>> seqs = {{1, 1}, {37, 1}, {70, 20}, {16, 16}, {130, 3}};
  const int num_heads = 4, num_kv_heads = 2, head_dim = 32, block_size = 8;
  const int max_len = 130;
  const int blocks_per_seq = (max_len + block_size - 1) / block_size;
  const int num_blocks = blocks_per_seq * static_cast<int>(seqs.size());
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  for (int b = 0; b < num_blocks; ++b) ids[b] = b;
  std::mt19937 rng(11);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> tables(seqs.size() * blocks_per_seq, -1);
  size_t next = 0;
  std::vector<int32_t> positions, token_seq;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const auto [len, tokens] = seqs[s];
    for (int b = 0; b * block_size < len; ++b) tables[s * blocks_per_seq + b] = ids[next++];
    for (int p = len - tokens; p < len; ++p) {
      positions.push_back(p);
      token_seq.push_back(static_cast<int32_t>(s));
    }
  }
  const int64_t m = static_cast<int64_t>(positions.size());
  const int64_t kv_width = int64_t{num_kv_heads} * head_dim;
  const Tensor q = RandomNormal({m, int64_t{num_heads} * head_dim}, 12, 3.0f);
  const Tensor k = RandomNormal({int64_t{num_blocks} * block_size, kv_width}, 13);
  const Tensor v = RandomNormal({int64_t{num_blocks} * block_size, kv_width}, 14);
  const PagedKvLayout layout{block_size, blocks_per_seq, tables, token_seq};
  for (const Variant& variant : variants) {
    AttentionShape shape{num_heads, num_kv_heads, head_dim, 1.0f / std::sqrt(32.0f)};
    shape.window = variant.window;
    shape.softcap = variant.softcap;
    if (variant.sinks) shape.sinks = sinks;
    const std::string what = "window " + std::to_string(variant.window) + " softcap " +
                             std::to_string(variant.softcap) + (variant.sinks ? " sinks" : "");
    Tensor got = Tensor::Empty(q.shape(), DType::kF32);
    Tensor want = Tensor::Empty(q.shape(), DType::kF32);
    PagedAttention(q, k, v, layout, positions, shape, got, pool());
    reference::PagedAttention(q, k, v, layout, positions, shape, want);
    ExpectCloseScaled(got, want, 1e-5, what);
    for (int64_t i = 0; i < m; ++i) {
      Tensor qi = q.Slice(i, i + 1);
      Tensor alone = Tensor::Empty(qi.shape(), DType::kF32);
      const int32_t seq[1] = {token_seq[i]};
      const PagedKvLayout one{block_size, blocks_per_seq, tables, seq};
      PagedAttention(qi, k, v, one, std::span<const int32_t>(&positions[i], 1), shape, alone,
                     pool());
      ASSERT_EQ(
          std::memcmp(alone.raw(), got.Slice(i, i + 1).raw(), static_cast<size_t>(alone.nbytes())),
          0)
          << what << " token " << i;
    }
  }
}

// A query head's output has the same bits whether 1, 3 or 4 heads share its KV head (the AVX-512
// scores reduce four heads of four keys in one tree, fewer heads one at a time: the same adds).
TEST_P(VariantsTest, HeadOutputDoesNotDependOnTheGroupSize) {
  constexpr int kHd = 64;
  const std::vector<int32_t> positions = {3, 10, 17, 20, 29, 33, 36};
  const auto m = static_cast<int64_t>(positions.size());
  const Tensor q4 = RandomNormal({m, 4 * kHd}, 41);
  const Tensor k = RandomNormal({37, kHd}, 42);
  const Tensor v = RandomNormal({37, kHd}, 43);
  auto run = [&](int heads) {
    Tensor q = Tensor::Empty({m, heads * kHd}, DType::kF32);
    for (int64_t i = 0; i < m; ++i) {
      std::memcpy(q.data<float>() + i * heads * kHd, q4.data<float>() + i * 4 * kHd,
                  sizeof(float) * heads * kHd);
    }
    Tensor out = Tensor::Empty(q.shape(), DType::kF32);
    CausalAttention(q, k, v, positions, AttentionShape{heads, 1, kHd, 0.125f}, out, pool());
    return out;
  };
  const Tensor out4 = run(4);
  for (int heads : {1, 3}) {
    const Tensor out = run(heads);
    for (int64_t i = 0; i < m; ++i) {
      ASSERT_EQ(std::memcmp(out.data<float>() + i * heads * kHd, out4.data<float>() + i * 4 * kHd,
                            sizeof(float) * heads * kHd),
                0)
          << heads << " heads, token " << i;
    }
  }
}

// A window of one position attends to the token itself: the output is its own value row.
TEST_P(VariantsTest, WindowOfOneReturnsTheTokensOwnValue) {
  const Tensor q = RandomNormal({3, 16}, 21);
  const Tensor k = RandomNormal({10, 16}, 22);
  const Tensor v = RandomNormal({10, 16}, 23);
  AttentionShape shape{2, 2, 8, 0.5f};
  shape.window = 1;
  const std::vector<int32_t> positions = {0, 5, 9};
  Tensor out = Tensor::Empty(q.shape(), DType::kF32);
  CausalAttention(q, k, v, positions, shape, out, pool());
  for (size_t i = 0; i < positions.size(); ++i) {
    for (int d = 0; d < 16; ++d) {
      EXPECT_FLOAT_EQ(out.data<float>()[i * 16 + d], v.data<float>()[positions[i] * 16 + d]);
    }
  }
}

// With a sink logit s and a window of one position, head h's weight on its own value is
// 1 / (1 + exp(s - score)): the sink takes the rest of the probability mass and gives no value.
TEST_P(VariantsTest, SinkTakesItsShareOfTheSoftmax) {
  const Tensor q = RandomNormal({2, 16}, 24);
  const Tensor k = RandomNormal({10, 16}, 25);
  const Tensor v = RandomNormal({10, 16}, 26);
  const float sinks[] = {0.7f, -2.0f};
  AttentionShape shape{2, 2, 8, 0.5f};
  shape.window = 1;
  shape.sinks = sinks;
  const std::vector<int32_t> positions = {4, 9};
  Tensor out = Tensor::Empty(q.shape(), DType::kF32);
  CausalAttention(q, k, v, positions, shape, out, pool());
  for (size_t i = 0; i < positions.size(); ++i) {
    for (int h = 0; h < 2; ++h) {
      double score = 0.0;
      for (int d = 0; d < 8; ++d) {
        score += double{q.data<float>()[i * 16 + h * 8 + d]} *
                 k.data<float>()[positions[i] * 16 + h * 8 + d];
      }
      const double weight = 1.0 / (1.0 + std::exp(double{sinks[h]} - 0.5 * score));
      for (int d = 0; d < 8; ++d) {
        EXPECT_NEAR(out.data<float>()[i * 16 + h * 8 + d],
                    weight * v.data<float>()[positions[i] * 16 + h * 8 + d], 1e-6)
            << "token " << i << " head " << h;
      }
    }
  }
}

TEST_P(VariantsTest, GeluTanhAndMulMatchesReference) {
  for (int64_t count : {1, 8, 13, 1029}) {
    Tensor gate = RandomNormal({1, count}, 30 + static_cast<uint32_t>(count), 4.0f);
    if (count > 8) gate.data<float>()[3] = -95.0f;  // tanh saturates
    if (count > 8) gate.data<float>()[4] = 95.0f;
    const Tensor up = RandomNormal({1, count}, 31);
    Tensor got = Tensor::Empty({1, count}, DType::kF32);
    Tensor want = Tensor::Empty({1, count}, DType::kF32);
    GeluTanhAndMul(gate, up, got);
    reference::GeluTanhAndMul(gate, up, want);
    for (int64_t i = 0; i < count; ++i) {
      EXPECT_NEAR(got.data<float>()[i], want.data<float>()[i],
                  2e-6 * std::max(1.0f, std::fabs(want.data<float>()[i])))
          << "count " << count << " element " << i;
    }
  }
}

TEST(SoftCapTest, SquashesIntoTheCapAndKeepsSmallValues) {
  Tensor x = Tensor::FromVector({0.0f, 1e-3f, -2.0f, 30.0f, 1e9f, -1e9f}, {1, 6});
  SoftCap(30.0f, x);
  const float* v = x.data<float>();
  EXPECT_EQ(v[0], 0.0f);
  EXPECT_NEAR(v[1], 1e-3f, 1e-9f);
  EXPECT_NEAR(v[2], 30.0f * std::tanh(-2.0f / 30.0f), 1e-6f);
  EXPECT_NEAR(v[3], 30.0f * std::tanh(1.0f), 1e-5f);
  EXPECT_FLOAT_EQ(v[4], 30.0f);
  EXPECT_FLOAT_EQ(v[5], -30.0f);
  Scale(2.0f, x);
  EXPECT_FLOAT_EQ(x.data<float>()[4], 60.0f);
}

INSTANTIATE_TEST_SUITE_P(ThreadsAndPaths, VariantsTest,
                         ::testing::Combine(::testing::Values(1, 2),
                                            ::testing::Values(Path::kPortable, Path::kAvx2,
                                                              Path::kAvx512)),
                         [](const ::testing::TestParamInfo<std::tuple<int, Path>>& info) {
                           const Path path = std::get<1>(info.param);
                           return std::string(path == Path::kAvx512 ? "Avx512"
                                              : path == Path::kAvx2 ? "Avx2"
                                                                    : "Portable") +
                                  "_" + std::to_string(std::get<0>(info.param)) + "Threads";
                         });

}  // namespace
}  // namespace uc::kernels
