// File: thread_process_group.h
// -----------------------------------------------------------------------------
// ProcessGroup over N threads of one process (lmdeploy's thread_comm idea), so parallel layers
// can be tested without MPI: each rank is a thread, and rank r's inputs are a function of r so
// that it knows the expected result.
//
//   auto state = std::make_shared<ThreadGroupState>(4);     // once
//   RunOnThreads(4, [&](int rank) {                          // one thread per rank
//     ThreadProcessGroup group(state, rank);
//     group.AllReduceSum(data, n);
//   });
//
// RunWithThreadGroup() does this and hands each thread a GroupCoordinator; ThreadBackend plugs
// threads into ParallelState::Create for whole-topology tests.
//
// Collectives rendezvous on a mutex + condition variable and copy directly between the ranks'
// buffers; Send copies into a mailbox and returns (buffered). Every collective checks that all
// ranks called the same operation with the same size (UC_CHECK), so a mismatched test fails
// loudly instead of hanging.
#pragma once

#include <functional>
#include <memory>
#include <span>

#include "distributed/group_coordinator.h"
#include "distributed/process_group.h"

namespace uc::distributed {

// The state shared by the N ThreadProcessGroups of one group. Thread-safe.
class ThreadGroupState {
 public:
  // REQUIRES: size >= 1.
  explicit ThreadGroupState(int size);
  ~ThreadGroupState();
  ThreadGroupState(const ThreadGroupState&) = delete;
  ThreadGroupState& operator=(const ThreadGroupState&) = delete;

  int size() const { return size_; }

 private:
  friend class ThreadProcessGroup;
  friend class ThreadBackend;
  struct Impl;
  int size_;
  std::unique_ptr<Impl> impl_;
};

// One rank's handle on a ThreadGroupState. Use it from one thread.
class ThreadProcessGroup final : public ProcessGroup {
 public:
  // REQUIRES: 0 <= rank < state->size(); at most one ThreadProcessGroup per (state, rank).
  ThreadProcessGroup(std::shared_ptr<ThreadGroupState> state, int rank);

  int rank() const override { return rank_; }
  int size() const override { return state_->size(); }
  void AllReduceSum(float* data, int64_t count) override;
  void AllGather(const void* send, int64_t bytes, void* recv) override;
  void Broadcast(void* data, int64_t bytes, int root) override;
  void Send(const void* data, int64_t bytes, int dst, int tag) override;
  void Recv(void* data, int64_t bytes, int src, int tag) override;
  void Barrier() override;
  // Consulted about every 10 ms while waiting; false aborts the process (UC_CHECK).
  void SetWaitObserver(WaitObserver observer) override { observer_ = std::move(observer); }

 private:
  // Publishes this rank's pointer for collective `op` of `bytes` and waits for every rank.
  void Arrive(const char* op, int64_t bytes, const void* ptr);
  void WaitAll(const char* op);

  std::shared_ptr<ThreadGroupState> state_;
  int rank_;
  WaitObserver observer_;
};

// Backend whose world is the threads sharing `world` (thread `world_rank` owns this object).
// local_rank() == world_rank() (one host). NewGroup matches the k-th call of every member
// thread, as MPI_Comm_split does.
class ThreadBackend final : public Backend {
 public:
  ThreadBackend(std::shared_ptr<ThreadGroupState> world, int world_rank);

  int world_rank() const override { return world_rank_; }
  int world_size() const override { return world_->size(); }
  int local_rank() const override { return world_rank_; }
  StatusOr<std::unique_ptr<ProcessGroup>> NewGroup(std::span<const int> ranks) override;

 private:
  std::shared_ptr<ThreadGroupState> world_;
  int world_rank_;
  int64_t num_splits_ = 0;  // NewGroup calls made by this rank
};

// Runs fn(rank) for rank in [0, world_size) on world_size threads and joins them all.
void RunOnThreads(int world_size, const std::function<void(int rank)>& fn);

// Runs fn on `size` threads, each with a GroupCoordinator over one shared ThreadGroupState
// (global ranks 0..size-1, local_rank = rank). For tests of parallel layers.
void RunWithThreadGroup(int size, const std::function<void(GroupCoordinator& group)>& fn);

}  // namespace uc::distributed
