// main() for MPI tests: starts MPI through MpiRuntime, runs the tests on every rank, prints the
// usual report on rank 0 only (other ranks print just their failures, prefixed with the rank),
// and makes every rank exit non-zero when any rank failed.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "distributed/mpi/mpi_runtime.h"

namespace {

// Prints failed assertions of a non-zero rank, which has no result printer.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  uc::Status status = uc::distributed::MpiRuntime::Init(&argc, &argv);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  const int rank = uc::distributed::MpiRuntime::world_rank();
  if (rank != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any_failed && !failed) {
    std::fprintf(stderr, "a test failed on another rank (see its [rank N] lines)\n");
  }
  status = uc::distributed::MpiRuntime::Finalize();
  return any_failed || !status.ok() ? 1 : 0;
}
