#include "distributed/stage_partition.h"

#include <charconv>
#include <cstdlib>
#include <string>

namespace uc::distributed {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

Status PartitionError(std::string_view value, const std::string& why) {
  return InvalidArgumentError(std::string(kPpLayerPartitionEnv) + "=\"" + std::string(value) +
                              "\": " + why);
}

// Parses the explicit per-stage layer counts.
StatusOr<std::vector<int>> ParseOverride(std::string_view value, int num_layers, int pp_size) {
  std::vector<int> counts;
  std::string_view rest = value;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = Trim(rest.substr(0, comma));
    int n = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), n);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size()) {
      return PartitionError(value, "entry \"" + std::string(item) + "\" is not an integer");
    }
    if (n < 1) {
      return PartitionError(value, "entry " + std::to_string(n) +
                                       " is below 1; every stage needs at least one layer");
    }
    counts.push_back(n);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (static_cast<int>(counts.size()) != pp_size) {
    return PartitionError(value, "has " + std::to_string(counts.size()) +
                                     " entries but pipeline_parallel_size is " +
                                     std::to_string(pp_size));
  }
  int64_t sum = 0;
  for (int n : counts) sum += n;
  if (sum != num_layers) {
    return PartitionError(value, "entries sum to " + std::to_string(sum) + " but the model has " +
                                     std::to_string(num_layers) + " layers");
  }
  return counts;
}

}  // namespace

StatusOr<std::vector<std::pair<int, int>>> PartitionLayers(int num_layers, int pp_size,
                                                           std::string_view override_env) {
  if (pp_size < 1) {
    return InvalidArgumentError("pipeline_parallel_size must be >= 1, got " +
                                std::to_string(pp_size));
  }
  if (num_layers < pp_size) {
    return InvalidArgumentError("pipeline_parallel_size " + std::to_string(pp_size) +
                                " exceeds the number of layers " + std::to_string(num_layers) +
                                "; every stage needs at least one layer");
  }
  std::vector<int> counts;
  if (!Trim(override_env).empty()) {
    UC_ASSIGN_OR_RETURN(counts, ParseOverride(override_env, num_layers, pp_size));
  } else {
    // vLLM get_pp_indices: the remainder goes to stages -2, -3, ... (the last stage also
    // runs the final norm and the LM head).
    counts.assign(static_cast<size_t>(pp_size), num_layers / pp_size);
    const int remaining = num_layers % pp_size;
    for (int i = 2; i < remaining + 2; ++i) counts[pp_size - i] += 1;
  }
  std::vector<std::pair<int, int>> ranges;
  int start = 0;
  for (int n : counts) {
    ranges.emplace_back(start, start + n);
    start += n;
  }
  return ranges;
}

std::string_view PpLayerPartitionFromEnv() {
  const char* value = std::getenv(kPpLayerPartitionEnv);
  return value == nullptr ? std::string_view() : std::string_view(value);
}

}  // namespace uc::distributed
