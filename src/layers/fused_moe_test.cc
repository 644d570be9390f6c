#include "layers/fused_moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>
#include <vector>

#include "distributed/thread_process_group.h"
#include "layers/layers_test_util.h"
#include "layers/linear.h"

namespace uc::layers::moe_test {
namespace {

using distributed::GroupCoordinator;
using distributed::RunWithThreadGroup;
using testing::ExpectClose;
using testing::RandomF32;
using testing::RandomWeight;

constexpr int64_t kHidden = 64, kInter = 64, kSharedInter = 96, kExperts = 6;
constexpr int kTopK = 2;

struct Weights {
  Tensor router;  // [kExperts, kHidden]
  std::vector<ExpertWeights> experts;
  ExpertWeights shared;
  Tensor shared_gate;  // [1, kHidden]
};

Weights MakeWeights(DType dtype) {
  Weights w;
  w.router = RandomF32({kExperts, kHidden}, 100);
  for (int e = 0; e < kExperts; ++e) {
    const uint32_t s = 200 + 3 * e;
    w.experts.push_back({RandomWeight(kInter, kHidden, dtype, s),
                         RandomWeight(kInter, kHidden, dtype, s + 1),
                         RandomWeight(kHidden, kInter, dtype, s + 2),
                         {},
                         {},
                         {}});
  }
  w.shared = {RandomWeight(kSharedInter, kHidden, dtype, 300),
              RandomWeight(kSharedInter, kHidden, dtype, 301),
              RandomWeight(kHidden, kSharedInter, dtype, 302),
              {},
              {},
              {}};
  w.shared_gate = RandomF32({1, kHidden}, 303);
  return w;
}

std::vector<float> Matmul(const std::vector<float>& x, int64_t m, const Tensor& w) {
  Tensor y = Tensor::Empty({m, w.dim(0)}, DType::kF32);
  Linear(w, Tensor()).Forward(Tensor::FromVector(x, {m, w.dim(1)}), y, nullptr);
  return y.ToFloatVector();
}

// One token through one gated expert, with its intermediate dimension restricted to
// [begin, end) (a TP rank's slice; the whole expert for [0, I)).
std::vector<float> Expert(const std::vector<float>& x, const ExpertWeights& w, int64_t begin,
                          int64_t end) {
  const std::vector<float> gate = Matmul(x, 1, w.gate), up = Matmul(x, 1, w.up);
  const std::vector<float> down = w.down.ToFloatVector();
  const int64_t inter = w.gate.dim(0);
  std::vector<float> out(kHidden, 0.0f);
  for (int64_t i = begin; i < end; ++i) {
    const float act = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
    for (int64_t j = 0; j < kHidden; ++j) out[j] += down[j * inter + i] * act;
  }
  return out;
}

// The block written out token by token: softmax over all experts, the top k, renormalised when
// asked, plus the sigmoid-gated shared expert. `part`/`parts`: only that slice of every
// intermediate dimension (the partial sum one TP rank holds before the all-reduce); with
// `whole_experts`, the routed experts are whole and only those of rank `part` (e mod parts) count
// (expert parallelism's partial sum; the shared expert is still sliced).
std::vector<float> Reference(const Tensor& x, const Weights& w, bool renormalize, bool shared,
                             int part = 0, int parts = 1, bool whole_experts = false) {
  const int64_t m = x.dim(0);
  const std::vector<float> xs = x.ToFloatVector();
  std::vector<float> out(static_cast<size_t>(m * kHidden), 0.0f);
  for (int64_t t = 0; t < m; ++t) {
    const std::vector<float> row(xs.begin() + t * kHidden, xs.begin() + (t + 1) * kHidden);
    std::vector<float> p = Matmul(row, 1, w.router);
    const float max = *std::max_element(p.begin(), p.end());
    float sum = 0.0f;
    for (float& v : p) sum += v = std::exp(v - max);
    for (float& v : p) v /= sum;
    std::vector<int> order(kExperts);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
    float chosen = 0.0f;
    for (int k = 0; k < kTopK; ++k) chosen += p[order[k]];
    for (int k = 0; k < kTopK; ++k) {
      const int e = order[k];
      const float weight = renormalize ? p[e] / chosen : p[e];
      if (whole_experts && e % parts != part) continue;
      const std::vector<float> y = whole_experts ? Expert(row, w.experts[e], 0, kInter)
                                                 : Expert(row, w.experts[e], part * kInter / parts,
                                                          (part + 1) * kInter / parts);
      for (int64_t j = 0; j < kHidden; ++j) out[t * kHidden + j] += weight * y[j];
    }
    if (shared) {
      const float s = 1.0f / (1.0f + std::exp(-Matmul(row, 1, w.shared_gate)[0]));
      const std::vector<float> y =
          Expert(row, w.shared, part * kSharedInter / parts, (part + 1) * kSharedInter / parts);
      for (int64_t j = 0; j < kHidden; ++j) out[t * kHidden + j] += s * y[j];
    }
  }
  return out;
}

StatusOr<FusedMoe> LoadMoe(const Weights& w, bool renormalize, bool shared, GroupCoordinator& g,
                           bool expert_parallel = false) {
  MoeOptions options;
  options.expert_parallel = expert_parallel;
  return FusedMoe::Load("moe", w.router, w.experts, kTopK, renormalize,
                        shared ? &w.shared : nullptr, w.shared_gate, g, options);
}

// `w` with only the experts rank `rank` of `ranks` holds under expert parallelism left defined
// (what the model loader reads there).
Weights OwnExpertsOnly(const Weights& w, int rank, int ranks) {
  Weights own = w;
  for (int e = 0; e < kExperts; ++e) {
    if (FusedMoe::ExpertOwner(e, ranks) != rank) own.experts[e] = ExpertWeights();
  }
  return own;
}

std::vector<float> RunBlock(const FusedMoe& moe, const Tensor& x) {
  MoeBuffers buffers(x.dim(0), moe);
  Tensor out = Tensor::Empty({x.dim(0), kHidden}, DType::kF32);
  moe.Forward(x, buffers, out, nullptr);
  return out.ToFloatVector();
}

struct Case {
  int tp;
  bool renormalize;
  bool shared;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << "tp " << c.tp << (c.renormalize ? " renormalised" : "") << (c.shared ? " shared" : "");
}

class FusedMoeTest : public ::testing::TestWithParam<Case> {};

// Every token's output equals the block written out token by token, at TP 1, 2 and 4 (each rank
// a slice of every expert's intermediate dimension, all-reduced inside Forward); the router's
// logits and dense weights are the same on every rank.
TEST_P(FusedMoeTest, MatchesTheBlockTokenByToken) {
  const Case c = GetParam();
  const Weights w = MakeWeights(DType::kF32);
  const Tensor x = RandomF32({9, kHidden}, 7);
  const std::vector<float> want = Reference(x, w, c.renormalize, c.shared);
  RunWithThreadGroup(c.tp, [&](GroupCoordinator& g) {
    auto moe = LoadMoe(w, c.renormalize, c.shared, g);
    ASSERT_TRUE(moe.ok()) << moe.status().ToString();
    EXPECT_EQ(moe->intermediate_size_per_partition(), kInter / c.tp);
    MoeBuffers buffers(x.dim(0), *moe);
    Tensor out = Tensor::Empty({x.dim(0), kHidden}, DType::kF32);
    moe->Forward(x, buffers, out, nullptr);
    ExpectClose(out.ToFloatVector(), want);
    const std::vector<float> weights = buffers.expert_weights.Slice(0, x.dim(0)).ToFloatVector();
    for (int64_t t = 0; t < x.dim(0); ++t) {
      int chosen = 0;
      float sum = 0.0f;
      for (int64_t e = 0; e < kExperts; ++e) {
        chosen += weights[t * kExperts + e] != 0.0f ? 1 : 0;
        sum += weights[t * kExperts + e];
      }
      EXPECT_EQ(chosen, kTopK) << "token " << t;
      if (c.renormalize) {
        EXPECT_NEAR(sum, 1.0f, 1e-6f) << "token " << t;
      }
    }
  });
}

// Q8_0 experts whose intermediate size is three blocks (96): TP 2 gives rank 0 two blocks and
// rank 1 one (gate/up rows and down columns alike), and the all-reduced block equals one
// process's.
TEST(FusedMoeUnevenTest, OddBlockCountSplitsUnevenlyAndEqualsOneProcess) {
  constexpr int64_t kOddInter = 96;
  Weights w;
  w.router = RandomF32({kExperts, kHidden}, 400);
  for (int e = 0; e < kExperts; ++e) {
    const uint32_t s = 500 + 3 * e;
    w.experts.push_back({RandomWeight(kOddInter, kHidden, DType::kQ8_0, s),
                         RandomWeight(kOddInter, kHidden, DType::kQ8_0, s + 1),
                         RandomWeight(kHidden, kOddInter, DType::kQ8_0, s + 2),
                         {},
                         {},
                         {}});
  }
  const Tensor x = RandomF32({7, kHidden}, 8);
  std::vector<float> want;
  RunWithThreadGroup(1, [&](GroupCoordinator& g) {
    auto moe = LoadMoe(w, true, false, g);
    ASSERT_TRUE(moe.ok()) << moe.status().ToString();
    want = RunBlock(*moe, x);
  });
  ASSERT_EQ(want.size(), static_cast<size_t>(x.numel()));
  RunWithThreadGroup(2, [&](GroupCoordinator& g) {
    auto moe = LoadMoe(w, true, false, g);
    ASSERT_TRUE(moe.ok()) << moe.status().ToString();
    EXPECT_EQ(moe->intermediate_size_per_partition(), g.rank_in_group() == 0 ? 64 : 32);
    ExpectClose(RunBlock(*moe, x), want);
  });
}

INSTANTIATE_TEST_SUITE_P(Tp, FusedMoeTest,
                         ::testing::Values(Case{1, true, false}, Case{2, true, false},
                                           Case{2, false, true}, Case{4, false, true}),
                         [](const auto& info) {
                           return "Tp" + std::to_string(info.param.tp) +
                                  (info.param.renormalize ? "Renormalised" : "") +
                                  (info.param.shared ? "Shared" : "");
                         });

// Two ranks' partial sums of a block: the first far from the whole (a tap there would be
// wrong), both adding up to it.
void ExpectPartialsOf(const std::vector<float>& whole, const std::vector<float>& part0,
                      const std::vector<float>& part1) {
  float scale = 0.0f, diff = 0.0f;
  std::vector<float> sum(whole.size());
  for (size_t i = 0; i < whole.size(); ++i) {
    scale = std::max(scale, std::fabs(whole[i]));
    diff = std::max(diff, std::fabs(part0[i] - whole[i]));
    sum[i] = part0[i] + part1[i];
  }
  EXPECT_GT(diff, 0.1f * scale);
  ExpectClose(sum, whole);
}

// What a tap placed before the all-reduce would see: one rank's partial sum over its slice of
// the experts (and of the shared expert). It is far from the block's output (so a capture there
// would be wrong and the TP test above can fail), while the ranks' partials add up to it.
TEST(FusedMoeBlockTest, ATapBeforeTheReduceWouldSeeAPartialSum) {
  const Weights w = MakeWeights(DType::kF32);
  const Tensor x = RandomF32({5, kHidden}, 8);
  const std::vector<float> whole = Reference(x, w, false, true);
  const std::vector<float> part0 = Reference(x, w, false, true, 0, 2);
  const std::vector<float> part1 = Reference(x, w, false, true, 1, 2);
  ExpectPartialsOf(whole, part0, part1);
}

// Expert parallelism at 2 and 4 ranks (four ranks over six experts: two hold two, two hold one),
// with and without the (still sliced) shared expert: each rank is given and holds only its whole
// experts (e mod tp), and the all-reduced block equals the block written out token by token.
TEST(FusedMoeExpertParallelTest, WholeExpertsPerRankEqualTheBlock) {
  const Weights w = MakeWeights(DType::kF32);
  const Tensor x = RandomF32({11, kHidden}, 17);
  for (const bool shared : {false, true}) {
    const std::vector<float> want = Reference(x, w, true, shared);
    for (const int tp : {2, 4}) {
      RunWithThreadGroup(tp, [&](GroupCoordinator& g) {
        const int rank = g.rank_in_group();
        auto moe = LoadMoe(OwnExpertsOnly(w, rank, tp), true, shared, g, true);
        ASSERT_TRUE(moe.ok()) << moe.status().ToString();
        EXPECT_TRUE(moe->expert_parallel());
        EXPECT_EQ(moe->intermediate_size_per_partition(), kInter);  // whole experts
        if (shared) {
          EXPECT_EQ(moe->shared_intermediate_size_per_partition(), kSharedInter / tp);
        }
        for (int e = 0; e < kExperts; ++e) {
          EXPECT_EQ(moe->runs_expert(e), e % tp == rank) << "expert " << e << " rank " << rank;
        }
        ExpectClose(RunBlock(*moe, x), want);
      });
    }
  }
}

// Q8_0 experts of one block of intermediate size (32): TP 2 cannot slice them, expert
// parallelism runs them whole on their owners and equals one process; on one rank the option
// changes nothing.
TEST(FusedMoeExpertParallelTest, ExpertsTooSmallToSliceRunWhole) {
  Weights w = MakeWeights(DType::kF32);
  for (int e = 0; e < kExperts; ++e) {
    const uint32_t s = 700 + 3 * e;
    w.experts[e] = {RandomWeight(32, kHidden, DType::kQ8_0, s),
                    RandomWeight(32, kHidden, DType::kQ8_0, s + 1),
                    RandomWeight(kHidden, 32, DType::kQ8_0, s + 2),
                    {},
                    {},
                    {}};
  }
  const Tensor x = RandomF32({6, kHidden}, 18);
  std::vector<float> want;
  RunWithThreadGroup(1, [&](GroupCoordinator& g) {
    auto moe = LoadMoe(w, true, false, g, true);
    ASSERT_TRUE(moe.ok()) << moe.status().ToString();
    EXPECT_FALSE(moe->expert_parallel());
    want = RunBlock(*moe, x);
  });
  RunWithThreadGroup(2, [&](GroupCoordinator& g) {
    auto sliced = LoadMoe(w, true, false, g);
    ASSERT_FALSE(sliced.ok());
    EXPECT_NE(sliced.status().message().find("fewer than tensor_parallel_size 2"),
              std::string::npos)
        << sliced.status().message();
    auto moe = LoadMoe(w, true, false, g, true);
    ASSERT_TRUE(moe.ok()) << moe.status().ToString();
    ExpectClose(RunBlock(*moe, x), want);
  });
}

// What a tap before the all-reduce would see under expert parallelism: one rank's whole experts
// (and its slice of the shared expert) — far from the block's output, while the two ranks'
// partial sums add up to it.
TEST(FusedMoeExpertParallelTest, ATapBeforeTheReduceWouldSeeOneRanksExperts) {
  const Weights w = MakeWeights(DType::kF32);
  const Tensor x = RandomF32({5, kHidden}, 19);
  const std::vector<float> whole = Reference(x, w, false, true);
  const std::vector<float> part0 = Reference(x, w, false, true, 0, 2, true);
  const std::vector<float> part1 = Reference(x, w, false, true, 1, 2, true);
  ExpectPartialsOf(whole, part0, part1);
}

// The expert weights and matmul paths the bit-for-bit tests run: F32, and Q8_0 on the exact and
// the int8 paths.
const std::pair<DType, kernels::MatMulPrecision> kExpertPaths[] = {
    {DType::kF32, kernels::MatMulPrecision::kExact},
    {DType::kQ8_0, kernels::MatMulPrecision::kExact},
    {DType::kQ8_0, kernels::MatMulPrecision::kInt8}};

// Batch invariance at the block level: each token's output has the same bits alone and in a
// batch (other tokens routed to the same experts change only the rows the expert's matmul
// runs over), for F32 and for Q8_0 experts on the exact and the int8 paths.
TEST(FusedMoeBlockTest, EachTokenHasItsBitsAloneAndInABatch) {
  for (const auto& [dtype, precision] : kExpertPaths) {
    const Weights w = MakeWeights(dtype);
    RunWithThreadGroup(1, [&](GroupCoordinator& g) {
      auto moe = LoadMoe(w, true, true, g);
      ASSERT_TRUE(moe.ok()) << moe.status().ToString();
      moe->set_matmul({precision, /*batch_invariant=*/true});
      const Tensor x = RandomF32({37, kHidden}, 9);
      const std::vector<float> batch = RunBlock(*moe, x);
      for (int64_t t = 0; t < x.dim(0); t += 6) {
        const std::vector<float> alone = RunBlock(*moe, x.Slice(t, t + 1));
        EXPECT_TRUE(std::equal(alone.begin(), alone.end(), batch.begin() + t * kHidden))
            << DTypeName(dtype) << " token " << t;
      }
      if (precision == kernels::MatMulPrecision::kInt8) {
        const Weights f32 = MakeWeights(DType::kF32);
        const std::vector<float> want = Reference(x, f32, true, true);
        float scale = 1.0f, err = 0.0f;
        for (size_t i = 0; i < want.size(); ++i) {
          scale = std::max(scale, std::fabs(want[i]));
          err = std::max(err, std::fabs(batch[i] - want[i]));
        }
        EXPECT_LT(err, 0.05f * scale) << "int8 experts strayed from the F32 block";
      }
    });
  }
}

// A small batch whose experts run side by side, one thread each (two or three threads, one to
// four tokens, top 2 and top 4 of 6 experts), has the bits of the same batch with every expert's
// matmuls run one expert after another on no pool (the outputs added in the same expert order:
// with four of them, another order would change the sums); so does a batch past
// kMaxParallelSlots.
TEST(FusedMoeBlockTest, ExpertsSideBySideKeepTheBits) {
  for (const auto& [dtype, precision] : kExpertPaths) {
    const Weights w = MakeWeights(dtype);
    for (int top_k : {kTopK, 4}) {
      RunWithThreadGroup(1, [&](GroupCoordinator& g) {
        auto moe =
            FusedMoe::Load("moe", w.router, w.experts, top_k, true, &w.shared, w.shared_gate, g);
        ASSERT_TRUE(moe.ok()) << moe.status().ToString();
        moe->set_matmul({precision, /*batch_invariant=*/true});
        for (int64_t m : {int64_t{1}, int64_t{2}, int64_t{4}, kMaxParallelSlots / top_k + 3}) {
          const Tensor x = RandomF32({m, kHidden}, 40 + static_cast<uint32_t>(m));
          const std::vector<float> want = RunBlock(*moe, x);
          for (int threads : {2, 3}) {
            ThreadPool pool(threads);
            MoeBuffers buffers(m, *moe);
            Tensor out = Tensor::Empty({m, kHidden}, DType::kF32);
            moe->Forward(x, buffers, out, &pool);
            const std::vector<float> got = out.ToFloatVector();
            EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin()))
                << DTypeName(dtype) << " top " << top_k << " m " << m << ", " << threads
                << " threads";
          }
        }
      });
    }
  }
}

TEST(FusedMoeBlockTest, BadShapesAndSizesAreErrorsNamingTheExpert) {
  const Weights w = MakeWeights(DType::kF32);
  RunWithThreadGroup(1, [&](GroupCoordinator& g) {
    Weights bad = w;
    bad.experts[3].down = RandomF32({kHidden, kInter + 1}, 1);
    auto moe = LoadMoe(bad, true, false, g);
    ASSERT_FALSE(moe.ok());
    EXPECT_NE(moe.status().message().find("expert 3"), std::string::npos) << moe.status().message();
    auto k = FusedMoe::Load("moe", w.router, w.experts, kExperts + 1, true, nullptr, Tensor(), g);
    ASSERT_FALSE(k.ok());
    EXPECT_NE(k.status().message().find("num_experts_per_tok"), std::string::npos);
  });
  // Three Q8_0 blocks of intermediate size cannot be shared by four ranks (F32 experts of any
  // size can: their unit is one element).
  RunWithThreadGroup(4, [&](GroupCoordinator& g) {
    Weights odd = w;
    for (ExpertWeights& e : odd.experts) {
      e = {RandomWeight(96, kHidden, DType::kQ8_0, 1),
           RandomWeight(96, kHidden, DType::kQ8_0, 2),
           RandomWeight(kHidden, 96, DType::kQ8_0, 3),
           {},
           {},
           {}};
    }
    auto moe = LoadMoe(odd, true, false, g);
    ASSERT_FALSE(moe.ok());
    EXPECT_NE(moe.status().message().find("expert 0"), std::string::npos) << moe.status().message();
    EXPECT_NE(moe.status().message().find("3 block(s) of 32 elements, fewer than "
                                          "tensor_parallel_size 4"),
              std::string::npos)
        << moe.status().message();
  });
}

}  // namespace
}  // namespace uc::layers::moe_test
