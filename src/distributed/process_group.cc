#include "distributed/process_group.h"

#include <string>

namespace uc::distributed {

Status ValidateGroupRanks(std::span<const int> ranks, int world_rank, int world_size) {
  if (ranks.empty()) return InvalidArgumentError("a process group needs at least one rank");
  bool has_self = false;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= world_size) {
      return InvalidArgumentError("group rank " + std::to_string(ranks[i]) +
                                  " is outside the world [0, " + std::to_string(world_size) + ")");
    }
    if (i > 0 && ranks[i] <= ranks[i - 1]) {
      return InvalidArgumentError("group ranks must be sorted ascending and unique, got " +
                                  std::to_string(ranks[i - 1]) + " before " +
                                  std::to_string(ranks[i]));
    }
    has_self = has_self || ranks[i] == world_rank;
  }
  if (!has_self) {
    return InvalidArgumentError("world rank " + std::to_string(world_rank) +
                                " is not a member of the group it asked for");
  }
  return OkStatus();
}

}  // namespace uc::distributed
