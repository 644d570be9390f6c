#include "distributed/parallel_state.h"

#include <algorithm>
#include <array>
#include <mutex>
#include <string>

#include "base/check.h"

namespace uc::distributed {
namespace {

// Layout dimensions, outermost first: ExternalDP, DP, PP, PCP, TP.
constexpr int kExternalDpDim = 0, kDpDim = 1, kPpDim = 2, kPcpDim = 3, kTpDim = 4;

std::array<int, 5> LayoutSizes(const ParallelConfig& c) {
  return {c.external_data_parallel_size, c.data_parallel_size, c.pipeline_parallel_size,
          c.prefill_context_parallel_size, c.tensor_parallel_size};
}

std::string DescribeSizes(const ParallelConfig& c) {
  return "tensor_parallel_size " + std::to_string(c.tensor_parallel_size) +
         " * pipeline_parallel_size " + std::to_string(c.pipeline_parallel_size) +
         " * data_parallel_size " + std::to_string(c.data_parallel_size) +
         " * prefill_context_parallel_size " + std::to_string(c.prefill_context_parallel_size) +
         " * external_data_parallel_size " + std::to_string(c.external_data_parallel_size);
}

std::mutex g_mu;
std::unique_ptr<ParallelState> g_state;  // guarded by g_mu

ParallelState& GlobalState() {
  std::lock_guard<std::mutex> lock(g_mu);
  UC_CHECK(g_state != nullptr,
           "model parallel groups are not initialized "
           "(call InitializeModelParallel first)");
  return *g_state;
}

}  // namespace

int ParallelConfig::world_size() const {
  int n = 1;
  for (int s : LayoutSizes(*this)) n *= s;
  return n;
}

const char* GroupKindName(GroupKind kind) {
  switch (kind) {
    case GroupKind::kWorld:
      return "world";
    case GroupKind::kTensorParallel:
      return "tp";
    case GroupKind::kPipelineParallel:
      return "pp";
    case GroupKind::kDataParallel:
      return "dp";
    case GroupKind::kPrefillContextParallel:
      return "pcp";
  }
  return "?";
}

std::vector<std::vector<int>> GroupRanks(const ParallelConfig& config, GroupKind kind) {
  const std::array<int, 5> sizes = LayoutSizes(config);
  for (int s : sizes) UC_CHECK(s >= 1, "GroupRanks: %s", DescribeSizes(config).c_str());
  const int world = config.world_size();
  if (kind == GroupKind::kWorld) {
    std::vector<int> all(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) all[r] = r;
    return {all};
  }
  int cut = kTpDim;
  if (kind == GroupKind::kPipelineParallel) cut = kPpDim;
  if (kind == GroupKind::kDataParallel) cut = kDpDim;
  if (kind == GroupKind::kPrefillContextParallel) cut = kPcpDim;
  std::array<int, 5> stride{};
  stride[kTpDim] = 1;
  for (int d = kTpDim - 1; d >= 0; --d) stride[d] = stride[d + 1] * sizes[d + 1];
  // vLLM: all_ranks.transpose(cut, tp).reshape(-1, size[cut]) — the cut dimension becomes the
  // innermost, the TP dimension takes its place, and groups follow the remaining order.
  std::array<int, 5> order = {kExternalDpDim, kDpDim, kPpDim, kPcpDim, kTpDim};
  std::swap(order[cut], order[kTpDim]);
  std::vector<std::vector<int>> groups;
  std::array<int, 5> coord{};
  for (int outer = 0; outer < world / sizes[cut]; ++outer) {
    int rest = outer;
    for (int k = 3; k >= 0; --k) {
      coord[order[k]] = rest % sizes[order[k]];
      rest /= sizes[order[k]];
    }
    std::vector<int> group;
    for (int i = 0; i < sizes[cut]; ++i) {
      coord[cut] = i;
      int rank = 0;
      for (int d = 0; d < 5; ++d) rank += coord[d] * stride[d];
      group.push_back(rank);
    }
    groups.push_back(std::move(group));
  }
  return groups;
}

Status ValidateParallelConfig(const ParallelConfig& config, int world_size) {
  for (int s : LayoutSizes(config)) {
    if (s < 1)
      return InvalidArgumentError("every parallel size must be >= 1: " + DescribeSizes(config));
  }
  if (config.world_size() != world_size) {
    return InvalidArgumentError("world size " + std::to_string(world_size) + " does not equal " +
                                DescribeSizes(config) + " = " +
                                std::to_string(config.world_size()));
  }
  return OkStatus();
}

StatusOr<ParallelState> ParallelState::Create(const ParallelConfig& config, Backend& backend) {
  UC_RETURN_IF_ERROR(ValidateParallelConfig(config, backend.world_size()));
  ParallelState state;
  state.config_ = config;
  const int rank = backend.world_rank();
  // Every rank creates the kinds in the same order (NewGroup is collective over the world).
  const std::pair<GroupKind, std::unique_ptr<GroupCoordinator>*> kinds[] = {
      {GroupKind::kWorld, &state.world_},
      {GroupKind::kTensorParallel, &state.tp_},
      {GroupKind::kPrefillContextParallel, &state.pcp_},
      {GroupKind::kPipelineParallel, &state.pp_},
      {GroupKind::kDataParallel, &state.dp_},
  };
  for (const auto& [kind, slot] : kinds) {
    for (std::vector<int>& ranks : GroupRanks(config, kind)) {
      if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) continue;
      StatusOr<std::unique_ptr<ProcessGroup>> group = backend.NewGroup(ranks);
      if (!group.ok()) {
        return group.status().Annotate(std::string("creating the ") + GroupKindName(kind) +
                                       " group");
      }
      *slot = std::make_unique<GroupCoordinator>(std::move(ranks), rank, backend.local_rank(),
                                                 std::move(group).value(), GroupKindName(kind));
      break;
    }
  }
  return state;
}

GroupCoordinator& ParallelState::group(GroupKind kind) const {
  switch (kind) {
    case GroupKind::kWorld:
      return *world_;
    case GroupKind::kTensorParallel:
      return *tp_;
    case GroupKind::kPipelineParallel:
      return *pp_;
    case GroupKind::kDataParallel:
      return *dp_;
    case GroupKind::kPrefillContextParallel:
      return *pcp_;
  }
  UC_CHECK(false, "unknown GroupKind %d", static_cast<int>(kind));
}

void ParallelState::SetWaitObserver(const WaitObserver& observer) {
  for (GroupCoordinator* g : {world_.get(), tp_.get(), pp_.get(), dp_.get(), pcp_.get()}) {
    g->SetWaitObserver(observer);
  }
}

StatusOr<ParallelState*> InitializeModelParallel(const ParallelConfig& config, Backend& backend) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_state != nullptr) {
    return FailedPreconditionError(
        "model parallel groups are already initialized; call DestroyModelParallel() first");
  }
  UC_ASSIGN_OR_RETURN(ParallelState state, ParallelState::Create(config, backend));
  g_state = std::make_unique<ParallelState>(std::move(state));
  return g_state.get();
}

void DestroyModelParallel() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_state.reset();
}

bool ModelParallelIsInitialized() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_state != nullptr;
}

ParallelState& GetParallelState() { return GlobalState(); }
GroupCoordinator& GetWorldGroup() { return GlobalState().world_group(); }
GroupCoordinator& GetTpGroup() { return GlobalState().tp_group(); }
GroupCoordinator& GetPpGroup() { return GlobalState().pp_group(); }
GroupCoordinator& GetDpGroup() { return GlobalState().dp_group(); }
GroupCoordinator& GetPcpGroup() { return GlobalState().pcp_group(); }

}  // namespace uc::distributed
