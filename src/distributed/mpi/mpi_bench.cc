// Latency of the MPI transport's collectives (median per op, max over ranks) next to the
// blocking MPI calls, and the CPU an idle rank uses while it waits in a broadcast.
//   mpiexec -n 2 --bind-to none mpi_bench [--idle-seconds S]
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <thread>
#include <vector>

#include "distributed/mpi/mpi_process_group.h"
#include "distributed/mpi/mpi_runtime.h"

namespace uc::distributed {
namespace {

using Clock = std::chrono::steady_clock;

// Median over iterations of the slowest rank's time for fn(), in microseconds.
double MedianMicros(const std::function<void()>& fn, int iterations) {
  std::vector<double> times;
  for (int i = 0; i < iterations + 5; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const Clock::time_point start = Clock::now();
    fn();
    double t = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (i >= 5) times.push_back(t);
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

// CPU share of the non-root ranks while rank 0 sleeps `seconds` before broadcasting (max over
// ranks).
double IdleShare(const std::function<void(int64_t*)>& broadcast, double seconds, int rank) {
  MPI_Barrier(MPI_COMM_WORLD);
  int64_t step = 0;
  double share = 0.0;
  if (rank == 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    broadcast(&step);
  } else {
    const double cpu = CpuSeconds();
    const Clock::time_point start = Clock::now();
    broadcast(&step);
    share = (CpuSeconds() - cpu) / std::chrono::duration<double>(Clock::now() - start).count();
  }
  MPI_Allreduce(MPI_IN_PLACE, &share, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return share;
}

int Main(int argc, char** argv) {
  if (!MpiRuntime::Init(&argc, &argv).ok()) return 1;
  double idle_seconds = 2.0;
  WaitPolicy policy;  // first column: arrive-then-blocking; second: the non-blocking default
  policy.collective_mode = CollectiveMode::kArriveThenBlocking;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--idle-seconds") == 0) idle_seconds = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--spin-us") == 0) policy.spin_seconds = 1e-6 * std::atof(argv[i + 1]);
  }
  const int rank = MpiRuntime::world_rank(), n = MpiRuntime::world_size();
  MPI_Comm comm, nbc_comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_dup(MPI_COMM_WORLD, &nbc_comm);
  MpiProcessGroup group(comm, policy);
  WaitPolicy nbc_policy = policy;
  nbc_policy.collective_mode = CollectiveMode::kNonBlocking;
  MpiProcessGroup nbc(nbc_comm, nbc_policy);
  constexpr int kIterations = 200;
  if (rank == 0) {
    std::printf("%d ranks on %s; median us per op (slowest rank)\n", n,
                MpiRuntime::hostname().c_str());
    std::printf("%-26s %14s %14s %14s\n", "op", "ProcessGroup", "MPI_I*+poll", "blocking MPI");
  }
  auto row = [&](const char* name, double a, double b, double c) {
    if (rank == 0) std::printf("%-26s %14.1f %14.1f %14.1f\n", name, a, b, c);
  };
  for (int64_t bytes : {int64_t{4} << 10, int64_t{64} << 10, int64_t{1} << 20}) {
    std::vector<float> buffer(static_cast<size_t>(bytes / 4), 1.0f);
    const int count = static_cast<int>(buffer.size());
    const double ours =
        MedianMicros([&] { group.AllReduceSum(buffer.data(), count); }, kIterations);
    const double polled =
        MedianMicros([&] { nbc.AllReduceSum(buffer.data(), count); }, kIterations);
    const double blocking = MedianMicros(
        [&] {
          MPI_Allreduce(MPI_IN_PLACE, buffer.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        },
        kIterations);
    char name[64];
    std::snprintf(name, sizeof(name), "all-reduce f32 %lld KiB",
                  static_cast<long long>(bytes >> 10));
    row(name, ours, polled, blocking);
  }
  std::vector<char> bytes4k(4096);
  row("broadcast 4 KiB",
      MedianMicros([&] { group.Broadcast(bytes4k.data(), 4096, 0); }, kIterations),
      MedianMicros([&] { nbc.Broadcast(bytes4k.data(), 4096, 0); }, kIterations),
      MedianMicros([&] { MPI_Bcast(bytes4k.data(), 4096, MPI_BYTE, 0, MPI_COMM_WORLD); },
                   kIterations));
  std::vector<char> gathered(4096 * static_cast<size_t>(n));
  row("all-gather 4 KiB/rank",
      MedianMicros([&] { group.AllGather(bytes4k.data(), 4096, gathered.data()); }, kIterations),
      MedianMicros([&] { nbc.AllGather(bytes4k.data(), 4096, gathered.data()); }, kIterations),
      MedianMicros(
          [&] {
            MPI_Allgather(bytes4k.data(), 4096, MPI_BYTE, gathered.data(), 4096, MPI_BYTE,
                          MPI_COMM_WORLD);
          },
          kIterations));
  row("barrier", MedianMicros([&] { group.Barrier(); }, kIterations),
      MedianMicros([&] { nbc.Barrier(); }, kIterations),
      MedianMicros([&] { MPI_Barrier(MPI_COMM_WORLD); }, kIterations));
  for (int64_t size : {int64_t{4} << 10, int64_t{1} << 20}) {
    std::vector<char> message(static_cast<size_t>(size));
    // Ping-pong between ranks 0 and 1; one-way time is half the round trip.
    const double ours = MedianMicros(
        [&] {
          if (rank == 0) {
            group.Send(message.data(), size, 1, 1);
            group.Recv(message.data(), size, 1, 2);
          } else if (rank == 1) {
            group.Recv(message.data(), size, 0, 1);
            group.Send(message.data(), size, 0, 2);
          }
        },
        kIterations);
    const int count = static_cast<int>(size);
    const double blocking = MedianMicros(
        [&] {
          if (rank == 0) {
            MPI_Send(message.data(), count, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(message.data(), count, MPI_BYTE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          } else if (rank == 1) {
            MPI_Recv(message.data(), count, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(message.data(), count, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
          }
        },
        kIterations);
    char name[64];
    std::snprintf(name, sizeof(name), "send/recv one-way %lld KiB",
                  static_cast<long long>(size >> 10));
    if (rank == 0) std::printf("%-26s %14.1f %14s %14.1f\n", name, ours / 2, "-", blocking / 2);
  }
  const double polled_idle = IdleShare(
      [&](int64_t* step) { group.Broadcast(step, sizeof(*step), 0); }, idle_seconds, rank);
  const double blocking_idle =
      IdleShare([&](int64_t* step) { MPI_Bcast(step, 1, MPI_INT64_T, 0, MPI_COMM_WORLD); },
                idle_seconds, rank);
  if (rank == 0) {
    std::printf(
        "idle rank CPU over %.1f s in a broadcast: polling %.1f%%, blocking %.1f%% "
        "of a core\n",
        idle_seconds, 100 * polled_idle, 100 * blocking_idle);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return MpiRuntime::Finalize().ok() ? 0 : 1;
}

}  // namespace
}  // namespace uc::distributed

int main(int argc, char** argv) { return uc::distributed::Main(argc, argv); }
