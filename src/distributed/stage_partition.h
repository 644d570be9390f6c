// File: stage_partition.h
// -----------------------------------------------------------------------------
// Which decoder layers each pipeline stage owns (vLLM's get_pp_indices). Stage s owns the
// global layers [start, end); the ranges are contiguous, in stage order, and cover
// [0, num_layers). Layer indices stay global in every topology.
//
// Even split: num_layers / pp_size each; the remainder goes one layer each to the stages just
// before the last, walking backwards (the last stage also runs the final norm and the LM head):
//   5 layers, PP 2 -> [0,3) [3,5);  PP 3 -> [0,2) [2,4) [4,5);  PP 4 -> [0,1) [1,2) [2,4) [4,5)
// Override: UNDERCURRENT_PP_LAYER_PARTITION="3,2" gives the per-stage counts explicitly.
#pragma once

#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace uc::distributed {

inline constexpr char kPpLayerPartitionEnv[] = "UNDERCURRENT_PP_LAYER_PARTITION";

// [start, end) per stage. `override_env` is the value of UNDERCURRENT_PP_LAYER_PARTITION (empty:
// even split): a comma-separated list of pp_size integers, each >= 1, summing to num_layers
// (spaces around entries allowed). InvalidArgument, naming the variable and the values, when
// the override is malformed or pp_size / num_layers are out of range (every stage needs at
// least one layer).
StatusOr<std::vector<std::pair<int, int>>> PartitionLayers(int num_layers, int pp_size,
                                                           std::string_view override_env);

// The value of UNDERCURRENT_PP_LAYER_PARTITION in the environment, or "" when unset.
std::string_view PpLayerPartitionFromEnv();

}  // namespace uc::distributed
