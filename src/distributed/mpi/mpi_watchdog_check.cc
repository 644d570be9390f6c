// A job with a hung rank, for the mpi_watchdog_test CTest entry: rank 1 never joins the
// broadcast; rank 0's wait observer gives up after 0.5 s, which must end the whole job with
// kWaitAbandonedExitCode (124) within seconds instead of hanging.
#include <chrono>
#include <cstdio>
#include <numeric>
#include <thread>
#include <vector>

#include "distributed/mpi/mpi_runtime.h"

int main(int argc, char** argv) {
  using namespace uc::distributed;
  if (!MpiRuntime::Init(&argc, &argv).ok()) return 1;
  MpiBackend backend;
  std::vector<int> all(static_cast<size_t>(backend.world_size()));
  std::iota(all.begin(), all.end(), 0);
  auto group = backend.NewGroup(all);
  if (!group.ok()) return 1;
  if (backend.world_rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(60));  // hangs
  } else {
    (*group)->SetWaitObserver([](std::string_view, double waited) { return waited < 0.5; });
    int64_t step = 0;
    (*group)->Broadcast(&step, sizeof(step), 0 == backend.world_rank() ? 1 : 0);
  }
  std::fprintf(stderr, "rank %d: the wait observer did not end the job\n", backend.world_rank());
  (void)MpiRuntime::Finalize();
  return 0;
}
