// File: mpi_runtime.h
// -----------------------------------------------------------------------------
// The MPI process environment: initialization, the world's ranks and hosts, the abort path,
// and MpiBackend, which makes the ProcessGroups of ParallelState from MPI_COMM_WORLD.
//
//   if (LaunchedUnderMpi()) {
//     UC_RETURN_IF_ERROR(MpiRuntime::Init(&argc, &argv));
//     MpiBackend backend;
//     UC_ASSIGN_OR_RETURN(ParallelState* state, InitializeModelParallel(config, backend));
//     ...
//     DestroyModelParallel();
//     MpiRuntime::Finalize();
//   }
//
// Failure behaviour (reference/distributed-measurements.md): a rank that dies makes mpirun tear
// the job down about 1 s later; a failed UC_CHECK on any rank calls MPI_Abort through the fatal
// hook Init installs, so nobody waits forever in a collective; a rank that hangs is caught by
// a WaitObserver (process_group.h), which also ends in MPI_Abort. MPI_COMM_WORLD uses
// MPI_ERRORS_RETURN so that an error Open MPI does report becomes a message naming the rank and
// the call (then MPI_Abort) instead of the default handler's bare abort.
//
// No MPI type appears in this header: code that includes it needs no MPI compile flags.
// All functions must be called from the thread that called Init (MPI_THREAD_FUNNELED).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"
#include "distributed/process_group.h"

namespace uc::distributed {

// True when this process was started by an MPI launcher (mpirun/mpiexec of Open MPI or MPICH,
// or srun): checks OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK, PMI_SIZE, and SLURM_STEP_ID with
// SLURM_PROCID. Reads the environment only; never calls MPI.
bool LaunchedUnderMpi();

// Exit status of the job when a UC_CHECK fails under MPI (that of abort()).
inline constexpr int kCheckFailedExitCode = 134;

class MpiRuntime {
 public:
  // MPI_Init_thread with at least MPI_THREAD_FUNNELED; sets MPI_ERRORS_RETURN on
  // MPI_COMM_WORLD; finds the local rank (MPI_Comm_split_type SHARED) and the host name;
  // installs the fatal hook (MPI_Abort(MPI_COMM_WORLD, kCheckFailedExitCode)) and the rank
  // printed by failed checks. argc/argv may be null.
  // FailedPrecondition if called twice or after Finalize; Unavailable if MPI cannot start or
  // does not provide FUNNELED.
  static Status Init(int* argc, char*** argv);
  // MPI_Finalize (collective), after every group is destroyed (DestroyModelParallel). Removes
  // the fatal hook. No-op unless initialized. Returns Internal on an MPI error.
  static Status Finalize();
  static bool initialized();

  // REQUIRES: initialized() (UC_CHECK).
  static int world_rank();
  static int world_size();
  static int local_rank();  // rank among the processes on this host
  static int local_size();  // processes on this host
  static const std::string& hostname();

  // Prints "[rank R on HOST] fatal: message" to stderr and calls
  // MPI_Abort(MPI_COMM_WORLD, exit_code). Falls back to std::exit when MPI is not running.
  [[noreturn]] static void Abort(std::string_view message, int exit_code);
};

// Backend over MPI_COMM_WORLD: NewGroup is MPI_Comm_split(world, color = ranks[0],
// key = world rank), and the result is an MpiProcessGroup owning the new communicator.
// REQUIRES: MpiRuntime::initialized() for the object's lifetime.
class MpiBackend final : public Backend {
 public:
  MpiBackend();

  int world_rank() const override;
  int world_size() const override;
  int local_rank() const override;
  StatusOr<std::unique_ptr<ProcessGroup>> NewGroup(std::span<const int> ranks) override;
};

}  // namespace uc::distributed
