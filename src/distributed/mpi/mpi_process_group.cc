#include "distributed/mpi/mpi_process_group.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <thread>

#include "base/check.h"
#include "distributed/mpi/mpi_runtime.h"

namespace uc::distributed {
namespace {

// Largest message one MPI call carries (counts are int).
constexpr int64_t kMaxChunkBytes = int64_t{1} << 30;

int WorldRankForMessages() { return MpiRuntime::initialized() ? MpiRuntime::world_rank() : -1; }

// An MPI error is fatal: name the rank, the call and MPI's reason, then fail (-> MPI_Abort).
void CheckMpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char reason[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(rc, reason, &length);
  UC_CHECK(false, "[rank %d] %s failed: %s", WorldRankForMessages(), call, reason);
}

int ChunkCount(int64_t bytes) { return static_cast<int>(std::min(bytes, kMaxChunkBytes)); }

}  // namespace

MpiProcessGroup::MpiProcessGroup(MPI_Comm comm, WaitPolicy policy) : comm_(comm), policy_(policy) {
  CheckMpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  CheckMpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
}

MpiProcessGroup::~MpiProcessGroup() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_SELF && comm_ != MPI_COMM_NULL) {
    MPI_Comm_free(&comm_);
  }
}

template <typename Test>
void MpiProcessGroup::PollUntil(const Test& test, const char* op) {
  if (test()) return;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  auto waited = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  // Spin first: in a decode step the peer is usually a few microseconds away. Yielding lets a
  // peer sharing the core (more ranks than cores) run instead of waiting for a tick.
  while (waited() < policy_.spin_seconds) {
    std::this_thread::yield();
    if (test()) return;
  }
  // Then sleep between polls, in proportion to the wait so far: MPI progresses only inside MPI
  // calls, so each sleep delays completion by up to its length.
  while (true) {
    const double seconds = waited();
    if (observer_ && !observer_(op, seconds)) {
      char message[160];
      std::snprintf(message, sizeof(message), "%s abandoned after %.3f s by the wait observer", op,
                    seconds);
      MpiRuntime::Abort(message, kWaitAbandonedExitCode);
    }
    const double sleep = std::clamp(seconds * policy_.sleep_fraction, policy_.min_sleep_seconds,
                                    policy_.max_sleep_seconds);
    std::this_thread::sleep_for(std::chrono::duration<double>(sleep));
    if (test()) return;
  }
}

void MpiProcessGroup::Wait(MPI_Request* request, const char* op) {
  PollUntil(
      [&] {
        int done = 0;
        CheckMpi(MPI_Test(request, &done, MPI_STATUS_IGNORE), op);
        return done != 0;
      },
      op);
}

void MpiProcessGroup::WaitForArrival(const char* op) {
  MPI_Request request;
  CheckMpi(MPI_Ibarrier(comm_, &request), "MPI_Ibarrier");
  Wait(&request, op);
}

void MpiProcessGroup::AllReduceSum(float* data, int64_t count) {
  constexpr int64_t kMaxChunkFloats = kMaxChunkBytes / sizeof(float);
  if (!non_blocking()) WaitForArrival("AllReduceSum");
  for (int64_t offset = 0; offset < count; offset += kMaxChunkFloats) {
    const int n = static_cast<int>(std::min(count - offset, kMaxChunkFloats));
    if (!non_blocking()) {
      CheckMpi(MPI_Allreduce(MPI_IN_PLACE, data + offset, n, MPI_FLOAT, MPI_SUM, comm_),
               "MPI_Allreduce");
      continue;
    }
    MPI_Request request;
    CheckMpi(MPI_Iallreduce(MPI_IN_PLACE, data + offset, n, MPI_FLOAT, MPI_SUM, comm_, &request),
             "MPI_Iallreduce");
    Wait(&request, "AllReduceSum");
  }
}

void MpiProcessGroup::AllGather(const void* send, int64_t bytes, void* recv) {
  UC_CHECK(bytes <= INT_MAX, "AllGather of %lld bytes per rank exceeds INT_MAX",
           static_cast<long long>(bytes));
  const int n = static_cast<int>(bytes);
  if (!non_blocking()) {
    WaitForArrival("AllGather");
    CheckMpi(MPI_Allgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, comm_), "MPI_Allgather");
    return;
  }
  MPI_Request request;
  CheckMpi(MPI_Iallgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, comm_, &request), "MPI_Iallgather");
  Wait(&request, "AllGather");
}

void MpiProcessGroup::Broadcast(void* data, int64_t bytes, int root) {
  UC_CHECK(root >= 0 && root < size_, "Broadcast root %d of a group of %d", root, size_);
  if (!non_blocking()) WaitForArrival("Broadcast");
  auto* p = static_cast<std::byte*>(data);
  for (int64_t offset = 0; offset < bytes; offset += kMaxChunkBytes) {
    const int n = ChunkCount(bytes - offset);
    if (!non_blocking()) {
      CheckMpi(MPI_Bcast(p + offset, n, MPI_BYTE, root, comm_), "MPI_Bcast");
      continue;
    }
    MPI_Request request;
    CheckMpi(MPI_Ibcast(p + offset, n, MPI_BYTE, root, comm_, &request), "MPI_Ibcast");
    Wait(&request, "Broadcast");
  }
}

void MpiProcessGroup::Send(const void* data, int64_t bytes, int dst, int tag) {
  UC_CHECK(dst >= 0 && dst < size_, "Send to rank %d of a group of %d", dst, size_);
  const auto* p = static_cast<const std::byte*>(data);
  for (int64_t offset = 0; offset < bytes || offset == 0; offset += kMaxChunkBytes) {
    MPI_Request request;
    CheckMpi(MPI_Isend(p + offset, ChunkCount(bytes - offset), MPI_BYTE, dst, tag, comm_, &request),
             "MPI_Isend");
    Wait(&request, "Send");
    if (bytes == 0) break;
  }
}

void MpiProcessGroup::Recv(void* data, int64_t bytes, int src, int tag) {
  UC_CHECK(src >= 0 && src < size_, "Recv from rank %d of a group of %d", src, size_);
  auto* p = static_cast<std::byte*>(data);
  for (int64_t offset = 0; offset < bytes || offset == 0; offset += kMaxChunkBytes) {
    const int expected = ChunkCount(bytes - offset);
    // Wait for the message to arrive, then take exactly that message (matched probe).
    MPI_Message message;
    MPI_Status status;
    PollUntil(
        [&] {
          int found = 0;
          CheckMpi(MPI_Improbe(src, tag, comm_, &found, &message, &status), "MPI_Improbe");
          return found != 0;
        },
        "Recv");
    int incoming = 0;
    CheckMpi(MPI_Get_count(&status, MPI_BYTE, &incoming), "MPI_Get_count");
    UC_CHECK(incoming == expected,
             "[rank %d] Recv from group rank %d (tag %d) expected %d bytes, the message has %d",
             WorldRankForMessages(), src, tag, expected, incoming);
    CheckMpi(MPI_Mrecv(p + offset, expected, MPI_BYTE, &message, MPI_STATUS_IGNORE), "MPI_Mrecv");
    if (bytes == 0) break;
  }
}

void MpiProcessGroup::Barrier() {
  MPI_Request request;
  CheckMpi(MPI_Ibarrier(comm_, &request), "MPI_Ibarrier");
  Wait(&request, "Barrier");
}

}  // namespace uc::distributed
