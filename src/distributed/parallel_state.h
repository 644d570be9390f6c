// File: parallel_state.h
// -----------------------------------------------------------------------------
// Parallel state (vLLM's parallel_state module): cuts the job's global ranks into the
// tensor-, pipeline-, data- and prefill-context-parallel groups and holds one GroupCoordinator
// per kind.
//
// Rank layout, exactly vLLM's: global ranks are laid out ExternalDP × DP × PP × PCP × TP, TP
// fastest, i.e. rank = (((e·DP + d)·PP + p)·PCP + c)·TP + t. So a TP group is TP consecutive
// ranks, a PP group strides by TP·PCP, a DP group by PP·PCP·TP. Example, world 8 = DP 2 × PP 2 ×
// TP 2: tp [[0,1],[2,3],[4,5],[6,7]], pp [[0,2],[1,3],[4,6],[5,7]],
// dp [[0,4],[2,6],[1,5],[3,7]] (vLLM's group order: the other coordinates in layout order
// after swapping the cut dimension with TP).
//
// Two ways to hold the state:
//   - ParallelState::Create(config, backend) returns an object; tests run one per thread.
//   - InitializeModelParallel(config, backend) keeps one process-wide instance (vLLM's
//     initialize_model_parallel) read back with GetTpGroup() etc.; a second call fails until
//     DestroyModelParallel(). Only code above layers/ may use the globals: layers take a
//     GroupCoordinator& explicitly.
// Creating the groups is collective over the world: every rank calls with the same config.
#pragma once

#include <memory>
#include <vector>

#include "base/status.h"
#include "distributed/group_coordinator.h"
#include "distributed/process_group.h"

namespace uc::distributed {

struct ParallelConfig {
  int tensor_parallel_size = 1;
  int pipeline_parallel_size = 1;
  int data_parallel_size = 1;
  int prefill_context_parallel_size = 1;
  int external_data_parallel_size = 1;

  // Product of the five sizes: the world size the config needs.
  int world_size() const;
};

enum class GroupKind {
  kWorld,
  kTensorParallel,
  kPipelineParallel,
  kDataParallel,
  kPrefillContextParallel,
};

// "world", "tp", "pp", "dp", "pcp" (vLLM's group names).
const char* GroupKindName(GroupKind kind);

// Every group of one kind, each sorted ascending, in vLLM's order (see the file comment).
// REQUIRES: every size in `config` >= 1 (checked).
std::vector<std::vector<int>> GroupRanks(const ParallelConfig& config, GroupKind kind);

// InvalidArgument unless every size is >= 1 and their product equals `world_size`; the message
// names each size.
Status ValidateParallelConfig(const ParallelConfig& config, int world_size);

class ParallelState {
 public:
  // Validates `config` against backend.world_size() (InvalidArgument naming the sizes), then
  // creates the groups in the order world, tp, pcp, pp, dp (collective over the world).
  static StatusOr<ParallelState> Create(const ParallelConfig& config, Backend& backend);

  ParallelState(ParallelState&&) = default;
  ParallelState& operator=(ParallelState&&) = default;

  const ParallelConfig& config() const { return config_; }
  // The coordinators live on the heap: their addresses stay valid when the state is moved.
  GroupCoordinator& world_group() const { return *world_; }
  GroupCoordinator& tp_group() const { return *tp_; }
  GroupCoordinator& pp_group() const { return *pp_; }
  GroupCoordinator& dp_group() const { return *dp_; }
  GroupCoordinator& pcp_group() const { return *pcp_; }
  GroupCoordinator& group(GroupKind kind) const;

  // Installs `observer` on every group (the driver's step watchdog).
  void SetWaitObserver(const WaitObserver& observer);

 private:
  ParallelState() = default;

  ParallelConfig config_;
  std::unique_ptr<GroupCoordinator> world_, tp_, pp_, dp_, pcp_;
};

// Process-wide instance. Thread-safe to call, but meant for the main thread at start-up.
// Returns the stored state, or FailedPrecondition if one is already initialized, or the error
// of ParallelState::Create. The pointer stays valid until DestroyModelParallel().
StatusOr<ParallelState*> InitializeModelParallel(const ParallelConfig& config, Backend& backend);
// Destroys the process-wide state (no-op when there is none). Call before MpiRuntime::Finalize.
void DestroyModelParallel();
bool ModelParallelIsInitialized();

// REQUIRES: ModelParallelIsInitialized() (UC_CHECK).
ParallelState& GetParallelState();
GroupCoordinator& GetWorldGroup();
GroupCoordinator& GetTpGroup();
GroupCoordinator& GetPpGroup();
GroupCoordinator& GetDpGroup();
GroupCoordinator& GetPcpGroup();

}  // namespace uc::distributed
