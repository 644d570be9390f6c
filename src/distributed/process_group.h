// File: process_group.h
// -----------------------------------------------------------------------------
// ProcessGroup: a fixed set of ranks that take part in collectives together, addressed by their
// rank in the group (0 .. size()-1). It is the transport seam under GroupCoordinator: raw bytes
// and floats only, no tensors, no global ranks. Implementations:
//   - ThreadProcessGroup (thread_process_group.h): N threads in one process, for unit tests of
//     parallel layers;
//   - MpiProcessGroup (mpi/mpi_process_group.h): processes over an MPI communicator, waiting
//     with non-blocking calls, MPI_Test polling and a backoff sleep.
// A Backend creates the groups of one world (vLLM's new_group / MPI_Comm_split).
//
// Semantics shared by every implementation:
//   - Collectives must be called by every rank of the group in the same order with matching
//     sizes (as in MPI). A mismatch is a programming error.
//   - Transport failures are fatal (UC_CHECK; under MPI the fatal hook calls MPI_Abort): inside
//     a step the other ranks are already waiting, so an error cannot be "returned" (STYLE 3.3).
//   - Every rank gets the same all-reduce result: the thread implementation sums in rank order
//     on every rank; Open MPI's reduction algorithms give every rank identical values (MPI
//     advises this, without requiring it).
//   - Thread-compatible: one thread at a time may call into a given group.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>

#include "base/status.h"

namespace uc::distributed {

// Consulted while a ProcessGroup call waits for its peers, from the waiting thread, after a
// short initial spin (~50 µs) and then before every sleep between polls (MPI: at most every
// millisecond once a wait is long; threads: every 10 ms). `op` names the call ("AllReduceSum",
// "Broadcast", "Recv", ...); `waited_seconds` is the time spent in this call so far.
// Return true to keep waiting, false to give up: the group then prints
// "[rank R] <op> abandoned after <s> s by the wait observer" and terminates the job (MPI:
// MPI_Abort(MPI_COMM_WORLD, kWaitAbandonedExitCode); threads: a failed check, i.e. abort()).
// This is the hook for the driver's per-step watchdog: a rank that hangs never completes the
// collective, so the observer is the only place that still runs. Keep it cheap and
// non-blocking; it must not call into any ProcessGroup.
using WaitObserver = std::function<bool(std::string_view op, double waited_seconds)>;

// Exit status of the job when a wait observer gives up (same as timeout(1)).
inline constexpr int kWaitAbandonedExitCode = 124;

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  // This process's (or thread's) rank in the group, in [0, size()).
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place: data[i] = sum over ranks of data[i]. `count` floats on every rank.
  virtual void AllReduceSum(float* data, int64_t count) = 0;
  // recv: size() * bytes, rank r's `send` at offset r * bytes. `recv` must not overlap `send`.
  virtual void AllGather(const void* send, int64_t bytes, void* recv) = 0;
  // Copies `bytes` from root's `data` into every other rank's `data`.
  virtual void Broadcast(void* data, int64_t bytes, int root) = 0;
  // Point to point. A Send may return before the matching Recv is posted (buffered) or not
  // (rendezvous, MPI for large messages): never rely on either. Messages between one pair with
  // one tag arrive in order. REQUIRES: the Recv names the same `bytes` as the Send.
  // Tags: [0, kReservedTagBase) are for callers; GroupCoordinator uses the tags above.
  virtual void Send(const void* data, int64_t bytes, int dst, int tag) = 0;
  virtual void Recv(void* data, int64_t bytes, int src, int tag) = 0;
  virtual void Barrier() = 0;

  // Installs (or, with an empty function, removes) the observer consulted while waiting.
  virtual void SetWaitObserver(WaitObserver observer) = 0;

  // First tag reserved for GroupCoordinator's own messages. MPI guarantees tags up to 32767.
  static constexpr int kReservedTagBase = 30000;
};

// Creates the ProcessGroups of one world of ranks (the MPI world, or N threads).
class Backend {
 public:
  virtual ~Backend() = default;

  virtual int world_rank() const = 0;
  virtual int world_size() const = 0;
  // Rank among the ranks on this host (MPI: MPI_Comm_split_type SHARED).
  virtual int local_rank() const = 0;

  // Collective over the whole world: every world rank calls NewGroup the same number of times
  // in the same order, each passing the group it belongs to, and the groups of one call are
  // disjoint (a partition of the world, like one kind of vLLM group). Returns this rank's
  // group, in which rank i of `ranks` has rank_in_group i.
  // REQUIRES: `ranks` sorted ascending, unique, within [0, world_size()), containing
  // world_rank() (else InvalidArgument).
  virtual StatusOr<std::unique_ptr<ProcessGroup>> NewGroup(std::span<const int> ranks) = 0;
};

// Shared validation of a NewGroup argument (InvalidArgument naming the offending value).
Status ValidateGroupRanks(std::span<const int> ranks, int world_rank, int world_size);

}  // namespace uc::distributed
