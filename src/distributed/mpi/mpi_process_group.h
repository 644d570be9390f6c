// File: mpi_process_group.h
// -----------------------------------------------------------------------------
// ProcessGroup over an MPI communicator that never sits in a blocking MPI wait while a peer
// may still be far away: a blocking wait spins a whole core for as long as it waits
// (measured: 98-100% for an idle rank in MPI_Bcast, even with mpi_yield_when_idle).
//
// How each call waits (WaitPolicy::collective_mode, default kNonBlocking):
//   collectives   the MPI_I* collective itself, polled. Every wait stays observable, so the
//                 driver's watchdog also sees a rank that stops in the middle of a collective.
//                 kArriveThenBlocking instead polls MPI_Ibarrier and then runs the blocking
//                 collective, keeping Open MPI's tuned algorithms (libnbc measured 2-3x slower
//                 here); but a rank stopped between the barrier and the collective leaves its
//                 peers in an unwatched blocking wait (seen in the SIGSTOP test), so it is
//                 opt-in.
//   Recv          MPI_Improbe polled until the message is there, then MPI_Mrecv.
//   Send          MPI_Isend, polled.
//   Barrier       MPI_Ibarrier, polled.
// Polling: MPI_Test (or MPI_Improbe) in a loop that first spins, yielding the core between
// polls, for spin_seconds (a peer that is nearly there costs no sleep), then sleeps between
// polls for sleep_fraction of the time waited so far, within [min_sleep_seconds,
// max_sleep_seconds]: the added latency is at most ~10% of the wait (capped at 1 ms), and a
// rank idle for seconds polls once a millisecond, using about 2% of a core. Before each sleep
// the WaitObserver, if any, is consulted.
//
// MPI errors (MPI_ERRORS_RETURN is set on the world, and inherited) are fatal: the message names
// the rank, the call and MPI's error string, then the fatal hook calls MPI_Abort.
// Messages larger than INT_MAX bytes are sent in chunks (AllGather: UC_CHECK instead).
#pragma once

#include <mpi.h>

#include "distributed/process_group.h"

namespace uc::distributed {

enum class CollectiveMode {
  kArriveThenBlocking,  // poll MPI_Ibarrier, then the blocking collective (faster, see above)
  kNonBlocking,         // poll the MPI_I* collective itself (default: every wait is watched)
};

struct WaitPolicy {
  double spin_seconds = 50e-6;       // poll without sleeping for this long first
  double sleep_fraction = 0.1;       // then sleep this fraction of the time waited so far,
  double min_sleep_seconds = 20e-6;  //   but at least this
  double max_sleep_seconds = 1e-3;   //   and at most this
  CollectiveMode collective_mode = CollectiveMode::kNonBlocking;
};

class MpiProcessGroup final : public ProcessGroup {
 public:
  // Takes ownership of `comm` (MPI_Comm_free in the destructor unless MPI is finalized, or
  // comm is MPI_COMM_WORLD / MPI_COMM_SELF).
  explicit MpiProcessGroup(MPI_Comm comm, WaitPolicy policy = WaitPolicy());
  ~MpiProcessGroup() override;
  MpiProcessGroup(const MpiProcessGroup&) = delete;
  MpiProcessGroup& operator=(const MpiProcessGroup&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void AllReduceSum(float* data, int64_t count) override;
  void AllGather(const void* send, int64_t bytes, void* recv) override;
  void Broadcast(void* data, int64_t bytes, int root) override;
  void Send(const void* data, int64_t bytes, int dst, int tag) override;
  void Recv(void* data, int64_t bytes, int src, int tag) override;
  void Barrier() override;
  void SetWaitObserver(WaitObserver observer) override { observer_ = std::move(observer); }

  void set_wait_policy(const WaitPolicy& policy) { policy_ = policy; }
  MPI_Comm comm() const { return comm_; }

 private:
  // Calls test() (which runs an MPI_Test-like poll and returns true when done) until it
  // succeeds: spin, then proportional sleeps, consulting the observer. Defined in the .cc.
  template <typename Test>
  void PollUntil(const Test& test, const char* op);
  void Wait(MPI_Request* request, const char* op);
  // Returns once every rank of the group has entered the call `op` (polled MPI_Ibarrier).
  void WaitForArrival(const char* op);
  bool non_blocking() const { return policy_.collective_mode == CollectiveMode::kNonBlocking; }

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  WaitPolicy policy_;
  WaitObserver observer_;
};

}  // namespace uc::distributed
