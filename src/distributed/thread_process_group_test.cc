#include "distributed/thread_process_group.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

namespace uc::distributed {
namespace {

class ThreadCollectivesTest : public ::testing::TestWithParam<int> {
 protected:
  int size() const { return GetParam(); }
};

TEST_P(ThreadCollectivesTest, AllReduceSumAddsEveryRanksInput) {
  const int n = size();
  constexpr int kCount = 1000;
  auto state = std::make_shared<ThreadGroupState>(n);
  RunOnThreads(n, [&](int rank) {
    ThreadProcessGroup group(state, rank);
    std::vector<float> data(kCount);
    for (int i = 0; i < kCount; ++i) data[i] = static_cast<float>(rank * 100 + i);
    group.AllReduceSum(data.data(), kCount);
    const float rank_sum = 100.0f * static_cast<float>(n * (n - 1) / 2);
    for (int i = 0; i < kCount; ++i) {
      ASSERT_EQ(data[i], rank_sum + static_cast<float>(n * i)) << "rank " << rank << " i " << i;
    }
  });
}

TEST_P(ThreadCollectivesTest, AllGatherConcatenatesInRankOrder) {
  const int n = size();
  auto state = std::make_shared<ThreadGroupState>(n);
  RunOnThreads(n, [&](int rank) {
    ThreadProcessGroup group(state, rank);
    const std::vector<int32_t> send = {rank, rank * 10, rank * 100};
    std::vector<int32_t> recv(3 * n, -1);
    group.AllGather(send.data(), sizeof(int32_t) * 3, recv.data());
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(recv[3 * r], r);
      EXPECT_EQ(recv[3 * r + 1], r * 10);
      EXPECT_EQ(recv[3 * r + 2], r * 100);
    }
  });
}

TEST_P(ThreadCollectivesTest, BroadcastCopiesTheRootsBytes) {
  const int n = size();
  auto state = std::make_shared<ThreadGroupState>(n);
  RunOnThreads(n, [&](int rank) {
    ThreadProcessGroup group(state, rank);
    for (int root = 0; root < n; ++root) {
      std::vector<int64_t> data(5, rank);
      group.Broadcast(data.data(), sizeof(int64_t) * 5, root);
      for (int64_t v : data) EXPECT_EQ(v, root);
    }
  });
}

TEST_P(ThreadCollectivesTest, SendRecvAroundARing) {
  const int n = size();
  auto state = std::make_shared<ThreadGroupState>(n);
  RunOnThreads(n, [&](int rank) {
    ThreadProcessGroup group(state, rank);
    for (int tag = 0; tag < 3; ++tag) {
      const int64_t out[2] = {rank, tag};
      group.Send(out, sizeof(out), (rank + 1) % n, tag);
    }
    for (int tag = 2; tag >= 0; --tag) {  // tags are matched, not arrival order
      int64_t in[2] = {-1, -1};
      group.Recv(in, sizeof(in), (rank + n - 1) % n, tag);
      EXPECT_EQ(in[0], (rank + n - 1) % n);
      EXPECT_EQ(in[1], tag);
    }
  });
}

TEST_P(ThreadCollectivesTest, BarrierWaitsForEveryRank) {
  const int n = size();
  auto state = std::make_shared<ThreadGroupState>(n);
  std::atomic<int> arrived{0};
  RunOnThreads(n, [&](int rank) {
    ThreadProcessGroup group(state, rank);
    for (int round = 1; round <= 3; ++round) {
      std::this_thread::sleep_for(std::chrono::milliseconds(rank));
      arrived.fetch_add(1);
      group.Barrier();
      EXPECT_GE(arrived.load(), round * n);
      group.Barrier();
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, ThreadCollectivesTest, ::testing::Values(1, 2, 3, 4));

TEST(ThreadProcessGroupTest, WaitObserverSeesTheWaitGrow) {
  auto state = std::make_shared<ThreadGroupState>(2);
  std::vector<double> seen;
  RunOnThreads(2, [&](int rank) {
    ThreadProcessGroup group(state, rank);
    if (rank == 1) {
      group.SetWaitObserver([&](std::string_view op, double waited) {
        EXPECT_EQ(op, "Barrier");
        seen.push_back(waited);
        return true;
      });
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(80));
    }
    group.Barrier();
  });
  ASSERT_GE(seen.size(), 2u);
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
}

TEST(ThreadProcessGroupDeathTest, ObserverReturningFalseAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto state = std::make_shared<ThreadGroupState>(2);
        RunOnThreads(2, [&](int rank) {
          ThreadProcessGroup group(state, rank);
          if (rank == 1) {
            group.SetWaitObserver([](std::string_view, double waited) { return waited < 0.05; });
            group.Barrier();
          } else {
            std::this_thread::sleep_for(std::chrono::seconds(5));  // a hung peer
            group.Barrier();
          }
        });
      },
      "Barrier abandoned after");
}

TEST(ThreadProcessGroupDeathTest, MismatchedCollectivesFailLoudly) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto state = std::make_shared<ThreadGroupState>(2);
        RunOnThreads(2, [&](int rank) {
          ThreadProcessGroup group(state, rank);
          std::vector<char> data(16);
          group.Broadcast(data.data(), rank == 0 ? 8 : 16, 0);
        });
      },
      "collective mismatch");
}

TEST(ThreadBackendTest, NewGroupMatchesTheMembersCalls) {
  auto world = std::make_shared<ThreadGroupState>(4);
  RunOnThreads(4, [&](int rank) {
    ThreadBackend backend(world, rank);
    const std::vector<int> pair = rank < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
    auto group = backend.NewGroup(pair);
    ASSERT_TRUE(group.ok()) << group.status().ToString();
    EXPECT_EQ((*group)->size(), 2);
    EXPECT_EQ((*group)->rank(), rank % 2);
    float v = static_cast<float>(rank);
    (*group)->AllReduceSum(&v, 1);
    EXPECT_EQ(v, rank < 2 ? 1.0f : 5.0f);
    // A second split with the same member lists is a new group, not the first one again.
    auto again = backend.NewGroup(pair);
    ASSERT_TRUE(again.ok());
    float w = 1.0f;
    (*again)->AllReduceSum(&w, 1);
    EXPECT_EQ(w, 2.0f);
  });
}

TEST(ThreadBackendTest, NewGroupRejectsBadRankLists) {
  auto world = std::make_shared<ThreadGroupState>(4);
  ThreadBackend backend(world, 1);
  EXPECT_EQ(backend.NewGroup(std::vector<int>{}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(backend.NewGroup(std::vector<int>{0, 2}).status().code(),
            StatusCode::kInvalidArgument);  // rank 1 not a member
  EXPECT_EQ(backend.NewGroup(std::vector<int>{1, 0}).status().code(),
            StatusCode::kInvalidArgument);  // not sorted
  EXPECT_EQ(backend.NewGroup(std::vector<int>{1, 4}).status().code(),
            StatusCode::kInvalidArgument);  // outside the world
}

}  // namespace
}  // namespace uc::distributed
