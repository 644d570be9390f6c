#include "distributed/mpi/mpi_runtime.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/check.h"
#include "distributed/mpi/mpi_process_group.h"

namespace uc::distributed {
namespace {

struct RuntimeState {
  bool initialized = false;
  bool finalized = false;
  int world_rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::string hostname;
};

RuntimeState& State() {
  static RuntimeState state;
  return state;
}

void AbortOnFatal() { MPI_Abort(MPI_COMM_WORLD, kCheckFailedExitCode); }

bool HasEnv(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && value[0] != '\0';
}

Status MpiError(int rc, const std::string& call) {
  char reason[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(rc, reason, &length);
  return UnavailableError(call + " failed: " + reason);
}

}  // namespace

bool LaunchedUnderMpi() {
  return HasEnv("OMPI_COMM_WORLD_SIZE") || HasEnv("PMIX_RANK") || HasEnv("PMI_RANK") ||
         HasEnv("PMI_SIZE") || (HasEnv("SLURM_STEP_ID") && HasEnv("SLURM_PROCID"));
}

Status MpiRuntime::Init(int* argc, char*** argv) {
  RuntimeState& s = State();
  if (s.initialized || s.finalized) {
    return FailedPreconditionError("MpiRuntime::Init called twice (MPI can start only once)");
  }
  int provided = 0;
  int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Init_thread");
  s.initialized = true;
  if (provided < MPI_THREAD_FUNNELED) {
    return UnavailableError("MPI provides thread level " + std::to_string(provided) +
                            ", below MPI_THREAD_FUNNELED");
  }
  if ((rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN)) != MPI_SUCCESS) {
    return MpiError(rc, "MPI_Comm_set_errhandler");
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &s.world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &s.world_size);
  MPI_Comm node;
  rc =
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, s.world_rank, MPI_INFO_NULL, &node);
  if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Comm_split_type(SHARED)");
  MPI_Comm_rank(node, &s.local_rank);
  MPI_Comm_size(node, &s.local_size);
  MPI_Comm_free(&node);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  s.hostname.assign(name, static_cast<size_t>(length));
  SetCheckRank(s.world_rank);
  SetFatalHook(&AbortOnFatal);
  return OkStatus();
}

Status MpiRuntime::Finalize() {
  RuntimeState& s = State();
  if (!s.initialized) return OkStatus();
  SetFatalHook(nullptr);
  s.initialized = false;
  s.finalized = true;
  const int rc = MPI_Finalize();
  if (rc != MPI_SUCCESS)
    return InternalError("MPI_Finalize failed with code " + std::to_string(rc));
  return OkStatus();
}

bool MpiRuntime::initialized() { return State().initialized; }

int MpiRuntime::world_rank() {
  UC_CHECK(initialized(), "MpiRuntime::world_rank before Init");
  return State().world_rank;
}

int MpiRuntime::world_size() {
  UC_CHECK(initialized(), "MpiRuntime::world_size before Init");
  return State().world_size;
}

int MpiRuntime::local_rank() {
  UC_CHECK(initialized(), "MpiRuntime::local_rank before Init");
  return State().local_rank;
}

int MpiRuntime::local_size() {
  UC_CHECK(initialized(), "MpiRuntime::local_size before Init");
  return State().local_size;
}

const std::string& MpiRuntime::hostname() {
  UC_CHECK(initialized(), "MpiRuntime::hostname before Init");
  return State().hostname;
}

void MpiRuntime::Abort(std::string_view message, int exit_code) {
  const RuntimeState& s = State();
  if (s.initialized) {
    std::fprintf(stderr, "[rank %d on %s] fatal: %.*s\n", s.world_rank, s.hostname.c_str(),
                 static_cast<int>(message.size()), message.data());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, exit_code);
  } else {
    std::fprintf(stderr, "fatal: %.*s\n", static_cast<int>(message.size()), message.data());
    std::fflush(stderr);
  }
  std::exit(exit_code);
}

MpiBackend::MpiBackend() {
  UC_CHECK(MpiRuntime::initialized(), "MpiBackend needs MpiRuntime::Init first");
}

int MpiBackend::world_rank() const { return MpiRuntime::world_rank(); }
int MpiBackend::world_size() const { return MpiRuntime::world_size(); }
int MpiBackend::local_rank() const { return MpiRuntime::local_rank(); }

StatusOr<std::unique_ptr<ProcessGroup>> MpiBackend::NewGroup(std::span<const int> ranks) {
  UC_RETURN_IF_ERROR(ValidateGroupRanks(ranks, world_rank(), world_size()));
  // Groups of one call are disjoint, so the smallest member names each group uniquely; the
  // world rank as key keeps the group's order ascending.
  MPI_Comm comm;
  const int rc = MPI_Comm_split(MPI_COMM_WORLD, ranks.front(), world_rank(), &comm);
  if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Comm_split");
  auto group = std::make_unique<MpiProcessGroup>(comm);
  if (group->size() != static_cast<int>(ranks.size())) {
    return InternalError("MPI_Comm_split made a group of " + std::to_string(group->size()) +
                         " ranks for a list of " + std::to_string(ranks.size()) +
                         "; the ranks disagree on the group layout");
  }
  return std::unique_ptr<ProcessGroup>(std::move(group));
}

}  // namespace uc::distributed
