// Run under mpiexec (see CMakeLists.txt): the MPI transport, GroupCoordinator and ParallelState
// over real processes, and the CPU an idle rank burns while it waits.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <thread>
#include <vector>

#include "distributed/mpi/mpi_process_group.h"
#include "distributed/mpi/mpi_runtime.h"
#include "distributed/parallel_state.h"

namespace uc::distributed {
namespace {

std::unique_ptr<ProcessGroup> WorldGroup() {
  MpiBackend backend;
  std::vector<int> all(static_cast<size_t>(backend.world_size()));
  std::iota(all.begin(), all.end(), 0);
  StatusOr<std::unique_ptr<ProcessGroup>> group = backend.NewGroup(all);
  UC_CHECK(group.ok(), "%s", group.status().ToString().c_str());
  return std::move(group).value();
}

GroupCoordinator WorldCoordinator() {
  std::vector<int> all(static_cast<size_t>(MpiRuntime::world_size()));
  std::iota(all.begin(), all.end(), 0);
  return GroupCoordinator(all, MpiRuntime::world_rank(), MpiRuntime::local_rank(), WorldGroup(),
                          "world");
}

double CpuSeconds(int who) {
  rusage usage{};
  getrusage(who, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

TEST(MpiRuntimeTest, KnowsTheWorld) {
  EXPECT_TRUE(LaunchedUnderMpi());
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (size != nullptr) {
    EXPECT_EQ(MpiRuntime::world_size(), std::atoi(size));
  }
  EXPECT_GE(MpiRuntime::world_size(), 2);
  // One host: the local rank is the world rank.
  EXPECT_EQ(MpiRuntime::local_rank(), MpiRuntime::world_rank());
  EXPECT_EQ(MpiRuntime::local_size(), MpiRuntime::world_size());
  EXPECT_FALSE(MpiRuntime::hostname().empty());
}

TEST(MpiProcessGroupTest, CollectivesOnRankDependentInputs) {
  std::unique_ptr<ProcessGroup> group = WorldGroup();
  const int n = group->size(), me = group->rank();
  std::vector<float> data(1000);
  for (int i = 0; i < 1000; ++i) data[i] = static_cast<float>(me * 100 + i);
  group->AllReduceSum(data.data(), 1000);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(data[i], static_cast<float>(100 * n * (n - 1) / 2 + n * i));
  }
  const int32_t mine[2] = {me, -me};
  std::vector<int32_t> all(2 * n);
  group->AllGather(mine, sizeof(mine), all.data());
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(all[2 * r], r);
    EXPECT_EQ(all[2 * r + 1], -r);
  }
  for (int root = 0; root < n; ++root) {
    int64_t v[3] = {me, me, me};
    group->Broadcast(v, sizeof(v), root);
    EXPECT_EQ(v[0], root);
    EXPECT_EQ(v[2], root);
  }
  // A ring with a large message (rendezvous protocol): even ranks send first.
  std::vector<float> out(1 << 18, static_cast<float>(me)), in(1 << 18, -1.0f);
  const int64_t bytes = static_cast<int64_t>(out.size() * sizeof(float));
  if (me % 2 == 0) {
    group->Send(out.data(), bytes, (me + 1) % n, 7);
    group->Recv(in.data(), bytes, (me + n - 1) % n, 7);
  } else {
    group->Recv(in.data(), bytes, (me + n - 1) % n, 7);
    group->Send(out.data(), bytes, (me + 1) % n, 7);
  }
  EXPECT_EQ(in.front(), static_cast<float>((me + n - 1) % n));
  EXPECT_EQ(in.back(), static_cast<float>((me + n - 1) % n));
  group->Barrier();
}

TEST(MpiGroupCoordinatorTest, TensorsObjectsAndDicts) {
  GroupCoordinator g = WorldCoordinator();
  const int n = g.world_size(), me = g.rank_in_group();
  Tensor shard = Tensor::FromVector({static_cast<float>(me), static_cast<float>(me + 10),
                                     static_cast<float>(me + 20), static_cast<float>(me + 30)},
                                    {2, 2});
  Tensor full = Tensor::Empty({2, 2 * n}, DType::kF32);
  g.AllGather(shard, full, -1);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(full.data<float>()[2 * r], static_cast<float>(r));
    EXPECT_EQ(full.data<float>()[2 * n + 2 * r + 1], static_cast<float>(r + 30));
  }
  std::string bytes = me == n - 1 ? std::string(5000, 'z') : std::string();
  g.BroadcastObject(bytes, n - 1);
  EXPECT_EQ(bytes, std::string(5000, 'z'));
  std::map<std::string, Tensor> out = {
      {"hidden_states", Tensor::FromVector({1.0f * me, 2.0f * me, 3.0f * me}, {1, 3})},
      {"residual", Tensor::FromVector({-1.0f * me}, {1, 1})}};
  std::map<std::string, Tensor> in;
  if (me % 2 == 0) {
    g.SendTensorDict(out, (me + 1) % n);
    in = g.RecvTensorDict((me + n - 1) % n);
  } else {
    in = g.RecvTensorDict((me + n - 1) % n);
    g.SendTensorDict(out, (me + 1) % n);
  }
  const float prev = static_cast<float>((me + n - 1) % n);
  EXPECT_EQ(in["hidden_states"].ToFloatVector(), (std::vector<float>{prev, 2 * prev, 3 * prev}));
  EXPECT_EQ(in["residual"].shape(), (Shape{1, 1}));
}

TEST(MpiParallelStateTest, GroupsMatchVllmAndCommunicate) {
  const int world = MpiRuntime::world_size(), rank = MpiRuntime::world_rank();
  ParallelConfig config;
  config.tensor_parallel_size = 2;
  config.pipeline_parallel_size = world / 2;
  MpiBackend backend;
  StatusOr<ParallelState*> state = InitializeModelParallel(config, backend);
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_EQ(InitializeModelParallel(config, backend).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(GetTpGroup().ranks(), (std::vector<int>{rank & ~1, rank | 1}));
  EXPECT_EQ(GetTpGroup().rank_in_group(), rank % 2);
  EXPECT_EQ(GetPpGroup().world_size(), world / 2);
  for (GroupKind kind : {GroupKind::kWorld, GroupKind::kTensorParallel,
                         GroupKind::kPipelineParallel, GroupKind::kDataParallel}) {
    GroupCoordinator& g = GetParallelState().group(kind);
    Tensor t = Tensor::FromVector({static_cast<float>(rank)}, {1});
    g.AllReduce(t);
    int expected = 0;
    for (int r : g.ranks()) expected += r;
    EXPECT_EQ(t.data<float>()[0], static_cast<float>(expected)) << GroupKindName(kind);
  }
  DestroyModelParallel();
  ParallelConfig wrong = config;
  wrong.tensor_parallel_size = 3;
  EXPECT_EQ(InitializeModelParallel(wrong, backend).status().code(), StatusCode::kInvalidArgument);
}

TEST(MpiProcessGroupTest, WaitObserverIsConsultedWhileWaiting) {
  std::unique_ptr<ProcessGroup> group = WorldGroup();
  int calls = 0;
  double last = 0.0;
  if (group->rank() != 0) {
    group->SetWaitObserver([&](std::string_view op, double waited) {
      EXPECT_EQ(op, "Barrier");
      ++calls;
      last = waited;
      return true;
    });
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  group->Barrier();
  if (group->rank() != 0) {
    EXPECT_GE(calls, 10);
    EXPECT_GE(last, 0.2);
  }
}

// The number the design depends on: an idle rank waiting for the next step must not burn a core
// (a blocking MPI_Bcast measured 99-100%). Each rank takes a turn being the late root.
TEST(MpiProcessGroupTest, IdleRankWaitingInBroadcastUsesLittleCpu) {
  std::unique_ptr<ProcessGroup> group = WorldGroup();
  constexpr double kIdleSeconds = 1.5;
  for (int root = 0; root < group->size(); ++root) {
    group->Barrier();
    int64_t step = 0;
    if (group->rank() == root) {
      std::this_thread::sleep_for(std::chrono::duration<double>(kIdleSeconds));
      step = 42;
      group->Broadcast(&step, sizeof(step), root);
      continue;
    }
    const double cpu_process = CpuSeconds(RUSAGE_SELF);
    const double cpu_thread = CpuSeconds(RUSAGE_THREAD);
    const auto start = std::chrono::steady_clock::now();
    group->Broadcast(&step, sizeof(step), root);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double process_share = (CpuSeconds(RUSAGE_SELF) - cpu_process) / wall;
    const double thread_share = (CpuSeconds(RUSAGE_THREAD) - cpu_thread) / wall;
    EXPECT_EQ(step, 42);
    EXPECT_GE(wall, kIdleSeconds * 0.8);
    std::printf(
        "[rank %d] idle %.2f s in Broadcast (root %d): CPU %.1f%% of a core "
        "(waiting thread %.1f%%)\n",
        group->rank(), wall, root, 100 * process_share, 100 * thread_share);
    std::fflush(stdout);
    EXPECT_LT(process_share, 0.25);
  }
}

}  // namespace
}  // namespace uc::distributed
