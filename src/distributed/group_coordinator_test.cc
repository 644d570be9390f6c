#include "distributed/group_coordinator.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "distributed/thread_process_group.h"

namespace uc::distributed {
namespace {

// A ProcessGroup that fails the test if used: size-1 groups must not touch the transport.
class UntouchableGroup final : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void AllReduceSum(float*, int64_t) override { ADD_FAILURE() << "AllReduceSum"; }
  void AllGather(const void*, int64_t, void*) override { ADD_FAILURE() << "AllGather"; }
  void Broadcast(void*, int64_t, int) override { ADD_FAILURE() << "Broadcast"; }
  void Send(const void*, int64_t, int, int) override { ADD_FAILURE() << "Send"; }
  void Recv(void*, int64_t, int, int) override { ADD_FAILURE() << "Recv"; }
  void Barrier() override { ADD_FAILURE() << "Barrier"; }
  void SetWaitObserver(WaitObserver) override {}
};

// [rows, cols] F32 with element (i, j) = base + i * cols + j.
Tensor Iota(int64_t rows, int64_t cols, float base) {
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = base + static_cast<float>(i);
  return Tensor::FromVector(v, {rows, cols});
}

TEST(GroupCoordinatorTest, RankAccessorsFollowVllm) {
  auto state = std::make_shared<ThreadGroupState>(3);
  GroupCoordinator g({1, 4, 7}, 4, 2, std::make_unique<ThreadProcessGroup>(state, 1), "pp");
  EXPECT_EQ(g.rank(), 4);
  EXPECT_EQ(g.local_rank(), 2);
  EXPECT_EQ(g.rank_in_group(), 1);
  EXPECT_EQ(g.world_size(), 3);
  EXPECT_EQ(g.ranks(), (std::vector<int>{1, 4, 7}));
  EXPECT_EQ(g.first_rank(), 1);
  EXPECT_EQ(g.last_rank(), 7);
  EXPECT_FALSE(g.is_first_rank());
  EXPECT_FALSE(g.is_last_rank());
  EXPECT_EQ(g.next_rank(), 7);
  EXPECT_EQ(g.prev_rank(), 1);
  EXPECT_EQ(g.name(), "pp");

  GroupCoordinator last({1, 4, 7}, 7, 0, std::make_unique<ThreadProcessGroup>(state, 2));
  EXPECT_TRUE(last.is_last_rank());
  EXPECT_EQ(last.next_rank(), 1);  // wraps
  EXPECT_EQ(last.prev_rank(), 4);
  GroupCoordinator first({1, 4, 7}, 1, 0, std::make_unique<ThreadProcessGroup>(state, 0));
  EXPECT_TRUE(first.is_first_rank());
  EXPECT_EQ(first.prev_rank(), 7);  // wraps
}

TEST(GroupCoordinatorTest, SingleRankGroupPassesThroughWithoutTransport) {
  for (bool with_group : {false, true}) {
    GroupCoordinator g({5}, 5, 0, with_group ? std::make_unique<UntouchableGroup>() : nullptr);
    EXPECT_EQ(g.next_rank(), 5);
    EXPECT_EQ(g.prev_rank(), 5);
    EXPECT_TRUE(g.is_first_rank() && g.is_last_rank());
    Tensor t = Iota(2, 3, 1.0f);
    g.AllReduce(t);
    EXPECT_EQ(t.ToFloatVector(), Iota(2, 3, 1.0f).ToFloatVector());
    Tensor full = Tensor::Zeros({2, 3}, DType::kF32);
    g.AllGather(t, full, -1);
    EXPECT_EQ(full.ToFloatVector(), t.ToFloatVector());
    Tensor gathered = Tensor::Zeros({2, 3}, DType::kF32);
    g.Gather(t, gathered, 0, 0);
    EXPECT_EQ(gathered.ToFloatVector(), t.ToFloatVector());
    g.Broadcast(t, 0);
    std::string bytes = "scheduler output";
    g.BroadcastObject(bytes, 0);
    EXPECT_EQ(bytes, "scheduler output");
    g.Barrier();
  }
}

class CoordinatorCollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(CoordinatorCollectivesTest, AllReduceSumsTensors) {
  const int n = GetParam();
  RunWithThreadGroup(n, [&](GroupCoordinator& g) {
    Tensor t = Iota(3, 4, static_cast<float>(g.rank_in_group()));
    g.AllReduce(t);
    const std::vector<float> got = t.ToFloatVector();
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i], static_cast<float>(n * i + n * (n - 1) / 2));
    }
  });
}

TEST_P(CoordinatorCollectivesTest, AllGatherAlongDim0AndLastDim) {
  const int n = GetParam();
  constexpr int64_t kRows = 3, kCols = 2;
  RunWithThreadGroup(n, [&](GroupCoordinator& g) {
    const Tensor shard = Iota(kRows, kCols, 1000.0f * static_cast<float>(g.rank_in_group()));
    Tensor rows = Tensor::Empty({n * kRows, kCols}, DType::kF32);
    g.AllGather(shard, rows, 0);
    Tensor cols = Tensor::Empty({kRows, n * kCols}, DType::kF32);
    g.AllGather(shard, cols, -1);
    for (int r = 0; r < n; ++r) {
      for (int64_t i = 0; i < kRows; ++i) {
        for (int64_t j = 0; j < kCols; ++j) {
          const float expected =
              1000.0f * static_cast<float>(r) + static_cast<float>(i * kCols + j);
          EXPECT_EQ(rows.data<float>()[(r * kRows + i) * kCols + j], expected);
          EXPECT_EQ(cols.data<float>()[i * n * kCols + r * kCols + j], expected);
        }
      }
    }
  });
}

TEST_P(CoordinatorCollectivesTest, GatherDeliversOnlyToTheDestination) {
  const int n = GetParam();
  const int dst = n - 1;
  RunWithThreadGroup(n, [&](GroupCoordinator& g) {
    const Tensor shard = Iota(2, 3, 100.0f * static_cast<float>(g.rank_in_group()));
    Tensor full;
    if (g.rank_in_group() == dst) full = Tensor::Zeros({2, 3 * n}, DType::kF32);
    g.Gather(shard, full, dst, -1);
    if (g.rank_in_group() != dst) return;
    for (int r = 0; r < n; ++r) {
      for (int i = 0; i < 2; ++i) {
        for (int j = 0; j < 3; ++j) {
          EXPECT_EQ(full.data<float>()[i * 3 * n + r * 3 + j], 100.0f * r + i * 3 + j);
        }
      }
    }
  });
}

TEST_P(CoordinatorCollectivesTest, BroadcastTensorAndObject) {
  const int n = GetParam();
  RunWithThreadGroup(n, [&](GroupCoordinator& g) {
    for (int root = 0; root < n; ++root) {
      Tensor t = Iota(2, 2, static_cast<float>(g.rank_in_group() * 10));
      g.Broadcast(t, root);
      EXPECT_EQ(t.ToFloatVector(), Iota(2, 2, static_cast<float>(root * 10)).ToFloatVector());
      // Variable length: every rank starts with a different size.
      std::string bytes(static_cast<size_t>(g.rank_in_group() * 3), 'x');
      if (g.rank_in_group() == root)
        bytes = "step " + std::to_string(root) + std::string(root, '\0');
      g.BroadcastObject(bytes, root);
      EXPECT_EQ(bytes, "step " + std::to_string(root) + std::string(root, '\0'));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, CoordinatorCollectivesTest, ::testing::Values(1, 2, 3, 4));

TEST(CoordinatorTensorDictTest, TravelsToTheNextRank) {
  for (int n : {2, 3, 4}) {
    RunWithThreadGroup(n, [&](GroupCoordinator& g) {
      const int me = g.rank_in_group();
      std::map<std::string, Tensor> out;
      out["hidden_states"] = Iota(3, 4, static_cast<float>(me));
      out["residual"] = Iota(3, 4, -static_cast<float>(me));
      Tensor half = Tensor::Empty({5}, DType::kF16);
      for (int i = 0; i < 5; ++i) half.data<uint16_t>()[i] = F32ToF16(static_cast<float>(me + i));
      out["f16"] = half;
      out["empty"] = Tensor::Empty({0, 4}, DType::kF32);
      // Even ranks send first, odd ranks receive first: no reliance on buffering.
      const int next = (me + 1) % n, prev = (me + n - 1) % n;
      std::map<std::string, Tensor> in;
      if (me % 2 == 0) {
        g.SendTensorDict(out, next);
        in = g.RecvTensorDict(prev);
      } else {
        in = g.RecvTensorDict(prev);
        g.SendTensorDict(out, next);
      }
      ASSERT_EQ(in.size(), 4u);
      EXPECT_EQ(in["hidden_states"].ToFloatVector(), Iota(3, 4, prev).ToFloatVector());
      EXPECT_EQ(in["residual"].ToFloatVector(), Iota(3, 4, -prev).ToFloatVector());
      EXPECT_EQ(in["f16"].dtype(), DType::kF16);
      EXPECT_EQ(in["f16"].ToFloatVector()[4], static_cast<float>(prev + 4));
      EXPECT_EQ(in["empty"].shape(), (Shape{0, 4}));
    });
  }
}

}  // namespace
}  // namespace uc::distributed
