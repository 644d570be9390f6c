// File: group_coordinator.h
// -----------------------------------------------------------------------------
// GroupCoordinator (vLLM's name): one communication group — its global ranks and this
// process's place in it — plus the collectives the model and the engine use, on Tensors.
// It wraps one ProcessGroup (the transport) and never touches it when the group has a single
// rank: every collective then returns at once with its input unchanged, so TP=1 / PP=1 run
// without any transport (and a size-1 coordinator may be built with a null ProcessGroup).
//
// Three ranks, defined here once for the whole project:
//   rank          the global rank, in [0, world size of the job)
//   local_rank    the rank among the processes on the same host (device/core assignment)
//   rank_in_group the index of this process in ranks(); layers slice weights by this one
// Example: 8 processes on 2 hosts (ranks 0-3 on host 0, 4-7 on host 1),
// tensor_parallel_size 4, pipeline_parallel_size 2:
//   rank | host | local_rank | tp group  | rank_in_group | pp group | rank_in_group
//     2  |  0   |     2      | [0 1 2 3] |       2       |  [2 6]   |       0
//     5  |  1   |     1      | [4 5 6 7] |       1       |  [1 5]   |       1
//     6  |  1   |     2      | [4 5 6 7] |       2       |  [2 6]   |       1
// With more than one host all three differ; slicing by `rank` or `local_rank` would load the
// wrong shard.
//
// Thread-compatible: one thread at a time (MPI is initialized FUNNELED). Layers keep a
// GroupCoordinator* that must outlive them (ParallelState owns the coordinators).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "distributed/process_group.h"
#include "tensor/tensor.h"

namespace uc::distributed {

class GroupCoordinator {
 public:
  // ranks: the group's global ranks, sorted ascending; rank: this process's global rank (one of
  // `ranks`); group: the transport for exactly these ranks, with group->rank() == the index of
  // `rank` in `ranks` (may be null when ranks.size() == 1). `name` ("tp", "pp", ...) is for
  // messages only. Violations are programming errors (UC_CHECK).
  GroupCoordinator(std::vector<int> ranks, int rank, int local_rank,
                   std::unique_ptr<ProcessGroup> group, std::string name = "");
  GroupCoordinator(GroupCoordinator&&) = default;
  GroupCoordinator& operator=(GroupCoordinator&&) = default;

  int rank() const { return rank_; }
  int local_rank() const { return local_rank_; }
  int rank_in_group() const { return rank_in_group_; }
  int world_size() const { return static_cast<int>(ranks_.size()); }
  const std::vector<int>& ranks() const { return ranks_; }
  const std::string& name() const { return name_; }
  // Global ranks; next/prev wrap around the group (vLLM).
  int first_rank() const { return ranks_.front(); }
  int last_rank() const { return ranks_.back(); }
  bool is_first_rank() const { return rank_ == first_rank(); }
  bool is_last_rank() const { return rank_ == last_rank(); }
  int next_rank() const { return ranks_[(rank_in_group_ + 1) % world_size()]; }
  int prev_rank() const { return ranks_[(rank_in_group_ + world_size() - 1) % world_size()]; }

  // Sums `t` over the group, in place. t: F32, any shape, the same on every rank.
  void AllReduce(Tensor& t);

  // Concatenates every rank's shard, in rank_in_group order, along `dim`:
  //   dim 0:          shard [m, ...]    -> full [world_size * m, ...]
  //   dim -1 / last:  shard [m, n_part] -> full [m, world_size * n_part] (columns interleaved:
  //                   full[i, r * n_part + j] = shard_r[i, j])
  // shard and full: same dtype (F32/F16/BF16 for the last dim; any dtype for dim 0), full
  // preallocated. With one rank, copies shard into full unless they alias.
  void AllGather(const Tensor& shard, Tensor& full, int dim);

  // Like AllGather, but only the rank with rank_in_group == dst_in_group receives `full`;
  // `full` is not touched (and may be undefined) elsewhere. Uses point-to-point messages.
  void Gather(const Tensor& shard, Tensor& full, int dst_in_group, int dim);

  // Copies t from the rank whose rank_in_group is root_in_group into t on every rank. t is
  // preallocated with the same shape and dtype everywhere.
  void Broadcast(Tensor& t, int root_in_group);

  // Variable-length bytes (a serialized SchedulerOutput): on return every rank's `bytes`
  // equals the root's. Two broadcasts (length, payload). Idle workers wait in this call with
  // the transport's backoff, so waiting costs a few percent of a core, not all of it.
  void BroadcastObject(std::string& bytes, int root_in_group);

  // Sends named tensors (e.g. IntermediateTensors{hidden_states, residual}) to one rank of the
  // group: a header (names, dtypes, shapes) then one message per tensor. Any dtype.
  // REQUIRES: dst_in_group != rank_in_group(); the peer calls RecvTensorDict(this rank).
  void SendTensorDict(const std::map<std::string, Tensor>& tensors, int dst_in_group);
  // Receives what SendTensorDict sent, into freshly allocated tensors.
  std::map<std::string, Tensor> RecvTensorDict(int src_in_group);

  void Barrier();

  // Forwards to the ProcessGroup (see WaitObserver). No-op for a one-rank group.
  void SetWaitObserver(WaitObserver observer);

  // The transport; null for a one-rank group built without one.
  ProcessGroup* process_group() { return group_.get(); }

 private:
  std::vector<int> ranks_;  // global ranks, ascending
  int rank_;
  int local_rank_;
  int rank_in_group_;
  std::unique_ptr<ProcessGroup> group_;
  std::string name_;
};

}  // namespace uc::distributed
