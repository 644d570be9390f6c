#include "distributed/parallel_state.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "distributed/thread_process_group.h"

namespace uc::distributed {
namespace {

using Groups = std::vector<std::vector<int>>;

ParallelConfig Config(int tp, int pp, int dp = 1, int pcp = 1, int external_dp = 1) {
  ParallelConfig c;
  c.tensor_parallel_size = tp;
  c.pipeline_parallel_size = pp;
  c.data_parallel_size = dp;
  c.prefill_context_parallel_size = pcp;
  c.external_data_parallel_size = external_dp;
  return c;
}

// Expected lists written out by hand from vLLM's
// torch.arange(world).reshape(-1, dp, pp, pcp, tp).transpose(cut, 4).reshape(-1, size).
TEST(GroupRanksTest, World8Tp2Pp2Dp2) {
  const ParallelConfig c = Config(/*tp=*/2, /*pp=*/2, /*dp=*/2);
  EXPECT_EQ(GroupRanks(c, GroupKind::kWorld), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(GroupRanks(c, GroupKind::kTensorParallel), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(GroupRanks(c, GroupKind::kPipelineParallel), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  // vLLM enumerates DP groups by (tp, pp) coordinate after transpose(1, 4): tp-major.
  EXPECT_EQ(GroupRanks(c, GroupKind::kDataParallel), (Groups{{0, 4}, {2, 6}, {1, 5}, {3, 7}}));
  EXPECT_EQ(GroupRanks(c, GroupKind::kPrefillContextParallel),
            (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
}

TEST(GroupRanksTest, World8Tp4Pp2) {
  const ParallelConfig c = Config(4, 2);
  EXPECT_EQ(GroupRanks(c, GroupKind::kTensorParallel), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(GroupRanks(c, GroupKind::kPipelineParallel), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(GroupRanks(c, GroupKind::kDataParallel),
            (Groups{{0}, {4}, {1}, {5}, {2}, {6}, {3}, {7}}));
}

TEST(GroupRanksTest, World6Tp2Pp3) {
  const ParallelConfig c = Config(2, 3);
  EXPECT_EQ(GroupRanks(c, GroupKind::kTensorParallel), (Groups{{0, 1}, {2, 3}, {4, 5}}));
  EXPECT_EQ(GroupRanks(c, GroupKind::kPipelineParallel), (Groups{{0, 2, 4}, {1, 3, 5}}));
}

TEST(GroupRanksTest, World4Pp4) {
  const ParallelConfig c = Config(1, 4);
  EXPECT_EQ(GroupRanks(c, GroupKind::kTensorParallel), (Groups{{0}, {1}, {2}, {3}}));
  EXPECT_EQ(GroupRanks(c, GroupKind::kPipelineParallel), (Groups{{0, 1, 2, 3}}));
}

TEST(GroupRanksTest, World4Dp2Pp2) {
  const ParallelConfig c = Config(1, 2, 2);
  EXPECT_EQ(GroupRanks(c, GroupKind::kPipelineParallel), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(GroupRanks(c, GroupKind::kDataParallel), (Groups{{0, 2}, {1, 3}}));
}

TEST(GroupRanksTest, World4Pcp2Tp2) {
  const ParallelConfig c = Config(2, 1, 1, /*pcp=*/2);
  EXPECT_EQ(GroupRanks(c, GroupKind::kTensorParallel), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(GroupRanks(c, GroupKind::kPrefillContextParallel), (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(GroupRanks(c, GroupKind::kPipelineParallel), (Groups{{0}, {2}, {1}, {3}}));
}

TEST(GroupRanksTest, World16ExternalDp2Dp2Pp2Tp2) {
  const ParallelConfig c = Config(2, 2, 2, 1, /*external_dp=*/2);
  EXPECT_EQ(GroupRanks(c, GroupKind::kTensorParallel),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(GroupRanks(c, GroupKind::kPipelineParallel),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(GroupRanks(c, GroupKind::kDataParallel),
            (Groups{{0, 4}, {2, 6}, {1, 5}, {3, 7}, {8, 12}, {10, 14}, {9, 13}, {11, 15}}));
}

TEST(GroupRanksTest, EveryKindPartitionsTheWorld) {
  for (const ParallelConfig& c :
       {Config(2, 3, 2), Config(4, 1, 2, 2), Config(1, 5), Config(3, 2)}) {
    for (GroupKind kind : {GroupKind::kTensorParallel, GroupKind::kPipelineParallel,
                           GroupKind::kDataParallel, GroupKind::kPrefillContextParallel}) {
      std::vector<int> all;
      for (const auto& g : GroupRanks(c, kind)) {
        EXPECT_TRUE(std::is_sorted(g.begin(), g.end()));
        all.insert(all.end(), g.begin(), g.end());
      }
      std::sort(all.begin(), all.end());
      ASSERT_EQ(static_cast<int>(all.size()), c.world_size());
      for (int r = 0; r < c.world_size(); ++r) EXPECT_EQ(all[r], r);
    }
  }
}

TEST(ParallelConfigTest, WorldSizeMustEqualTheProduct) {
  EXPECT_TRUE(ValidateParallelConfig(Config(2, 2), 4).ok());
  const Status bad = ValidateParallelConfig(Config(2, 2), 6);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("world size 6"), std::string::npos) << bad.message();
  EXPECT_NE(bad.message().find("tensor_parallel_size 2"), std::string::npos) << bad.message();
  EXPECT_NE(bad.message().find("pipeline_parallel_size 2"), std::string::npos) << bad.message();
  EXPECT_EQ(ValidateParallelConfig(Config(0, 2), 0).code(), StatusCode::kInvalidArgument);
}

TEST(ParallelStateTest, ThreadsBuildVllmGroupsAndCommunicateInThem) {
  const ParallelConfig c = Config(2, 2, 2);
  auto world = std::make_shared<ThreadGroupState>(8);
  RunOnThreads(8, [&](int rank) {
    ThreadBackend backend(world, rank);
    StatusOr<ParallelState> state = ParallelState::Create(c, backend);
    ASSERT_TRUE(state.ok()) << state.status().ToString();
    GroupCoordinator& tp = state->tp_group();
    GroupCoordinator& pp = state->pp_group();
    GroupCoordinator& dp = state->dp_group();
    EXPECT_EQ(tp.ranks(), (std::vector<int>{rank & ~1, rank | 1}));
    EXPECT_EQ(tp.rank_in_group(), rank % 2);
    EXPECT_EQ(pp.ranks(), (std::vector<int>{rank & ~2, rank | 2}));
    EXPECT_EQ(pp.is_first_rank(), (rank & 2) == 0);
    EXPECT_EQ(dp.ranks(), (std::vector<int>{rank & ~4, rank | 4}));
    EXPECT_EQ(state->world_group().world_size(), 8);
    EXPECT_EQ(state->pcp_group().world_size(), 1);
    // Each group sums the global ranks of its members.
    for (GroupKind kind : {GroupKind::kWorld, GroupKind::kTensorParallel,
                           GroupKind::kPipelineParallel, GroupKind::kDataParallel}) {
      GroupCoordinator& g = state->group(kind);
      Tensor t = Tensor::FromVector({static_cast<float>(rank)}, {1});
      g.AllReduce(t);
      int expected = 0;
      for (int r : g.ranks()) expected += r;
      EXPECT_EQ(t.data<float>()[0], static_cast<float>(expected)) << GroupKindName(kind);
    }
  });
}

TEST(ParallelStateTest, CreateRejectsAWrongWorldSize) {
  auto world = std::make_shared<ThreadGroupState>(1);
  ThreadBackend backend(world, 0);
  StatusOr<ParallelState> state = ParallelState::Create(Config(2, 1), backend);
  EXPECT_EQ(state.status().code(), StatusCode::kInvalidArgument);
}

TEST(ParallelStateTest, ProcessWideInstanceInitializesOnce) {
  auto world = std::make_shared<ThreadGroupState>(1);
  ThreadBackend backend(world, 0);
  ASSERT_FALSE(ModelParallelIsInitialized());
  StatusOr<ParallelState*> first = InitializeModelParallel(Config(1, 1), backend);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(ModelParallelIsInitialized());
  EXPECT_EQ(&GetParallelState(), *first);
  EXPECT_EQ(&GetTpGroup(), &(*first)->tp_group());
  EXPECT_EQ(GetPpGroup().world_size(), 1);
  EXPECT_EQ(GetDpGroup().world_size(), 1);
  EXPECT_EQ(GetWorldGroup().world_size(), 1);
  EXPECT_EQ(GetPcpGroup().world_size(), 1);
  EXPECT_EQ(InitializeModelParallel(Config(1, 1), backend).status().code(),
            StatusCode::kFailedPrecondition);
  DestroyModelParallel();
  EXPECT_FALSE(ModelParallelIsInitialized());
  EXPECT_TRUE(InitializeModelParallel(Config(1, 1), backend).ok());
  DestroyModelParallel();
}

}  // namespace
}  // namespace uc::distributed
