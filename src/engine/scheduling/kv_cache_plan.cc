#include "engine/scheduling/kv_cache_plan.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <utility>

#include "engine/generator.h"
#include "engine/scheduling/scheduler.h"

namespace uc::engine {
namespace {

std::atomic<int64_t> g_reserved_kv_bytes{0};

// Without a readable MemAvailable the automatic budget is the old fixed default.
constexpr int64_t kFallbackKvCacheBytes = int64_t{1} << 30;

std::string Mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

// The longest sequence (<= limit) whose blocks fit in `num_blocks`; 0 when none does.
int LongestThatFits(const KvCacheInputs& in, int64_t num_blocks, int limit) {
  int lo = 0, hi = limit;
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (MaxBlocksHeld(mid, in.block_size, in.sliding_window, in.max_chunk) <= num_blocks) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// "the KV cache budget of X per rank" with where it came from.
std::string BudgetPhrase(const KvCacheInputs& in, int64_t budget, bool automatic) {
  if (in.num_kv_blocks > 0) {
    return std::to_string(in.num_kv_blocks) + " KV blocks of " + std::to_string(in.block_size) +
           " tokens";
  }
  std::string s = "the KV cache budget of " + Mib(budget) + " per rank";
  if (automatic) {
    s += " (automatic: 1/" + std::to_string(kAutoKvShareDivisor) + " of the " +
         Mib(in.available_bytes) + " available to the rank)";
  }
  return s;
}

// A number read from the first line of `path`; -1 when absent or not a number ("max").
int64_t ReadNumber(const char* path) {
  std::ifstream file(path);
  long long value = -1;
  if (!(file >> value)) return -1;
  return value;
}

}  // namespace

std::string KvCachePlan::Describe() const {
  char line[256];
  std::snprintf(line, sizeof(line),
                "KV cache: %lld blocks of %d tokens (%s per rank%s); maximum concurrency %.2f "
                "requests of %d tokens",
                static_cast<long long>(num_blocks), block_size,
                Mib(num_blocks * block_bytes).c_str(), automatic ? ", sized automatically" : "",
                static_cast<double>(num_blocks) / static_cast<double>(blocks_per_seq),
                max_model_len);
  return line;
}

StatusOr<KvCachePlan> PlanKvCache(const KvCacheInputs& in) {
  if (in.block_bytes < 1 || in.block_size < 1 || in.max_num_seqs < 1 || in.max_chunk < 1 ||
      in.sliding_window < 0 || in.model_max_len < 1) {
    return InvalidArgumentError("KV cache inputs out of range (block_bytes " +
                                std::to_string(in.block_bytes) + ", block_size " +
                                std::to_string(in.block_size) + ", max_num_seqs " +
                                std::to_string(in.max_num_seqs) + ", model context " +
                                std::to_string(in.model_max_len) + ")");
  }
  if (in.max_model_len < 0) {
    return InvalidArgumentError("max_model_len must be >= 0, got " +
                                std::to_string(in.max_model_len));
  }
  if (in.kv_cache_bytes < 0 || in.num_kv_blocks < 0) {
    return InvalidArgumentError("the KV cache size must be >= 0 (0: automatic)");
  }
  const bool explicit_len = in.max_model_len > 0;
  KvCachePlan plan;
  plan.block_bytes = in.block_bytes;
  plan.block_size = in.block_size;
  plan.max_model_len = explicit_len ? in.max_model_len : in.model_max_len;
  auto blocks_for = [&](int len) -> int64_t {
    return MaxBlocksHeld(len, in.block_size, in.sliding_window, in.max_chunk);
  };
  plan.blocks_per_seq = blocks_for(plan.max_model_len);
  const int64_t useful = plan.blocks_per_seq * in.max_num_seqs;
  if (in.num_kv_blocks > 0) {
    plan.budget_bytes = in.num_kv_blocks * in.block_bytes;
    plan.num_blocks = in.num_kv_blocks;
  } else {
    plan.automatic = in.kv_cache_bytes == 0;
    if (!plan.automatic) {
      plan.budget_bytes = in.kv_cache_bytes;
    } else if (in.available_bytes <= 0) {
      plan.budget_bytes = kFallbackKvCacheBytes;
    } else {
      const int64_t one_seq = plan.blocks_per_seq * in.block_bytes;
      plan.budget_bytes =
          std::min(in.available_bytes / kAutoKvShareDivisor, std::max(kAutoKvCacheCap, one_seq));
    }
    plan.num_blocks = std::min(plan.budget_bytes / in.block_bytes, useful);
  }
  if (plan.num_blocks >= plan.blocks_per_seq) return plan;

  const int holds = LongestThatFits(in, plan.num_blocks, plan.max_model_len);
  const std::string budget = BudgetPhrase(in, plan.budget_bytes, plan.automatic);
  if (explicit_len) {
    return InvalidArgumentError(budget + " holds " + std::to_string(holds) +
                                " tokens, less than one sequence of max_model_len " +
                                std::to_string(plan.max_model_len) + " (" +
                                Mib(plan.blocks_per_seq * in.block_bytes) +
                                "); raise --kv-cache-memory or lower --max-model-len");
  }
  const int floor = std::min(in.model_max_len, kMinFittedContext);
  if (holds < floor) {
    return InvalidArgumentError(
        budget + " holds " + std::to_string(holds) + " tokens, less than the model's context of " +
        std::to_string(in.model_max_len) +
        (floor < in.model_max_len
             ? " and less than " + std::to_string(floor) + " (the shortest context fitted to it)"
             : std::string()) +
        "; raise --kv-cache-memory" +
        (holds > 0 ? ", or set --max-model-len " + std::to_string(holds) + " or less"
                   : std::string()));
  }
  plan.fitted = true;
  plan.max_model_len = holds;
  plan.blocks_per_seq = blocks_for(holds);
  plan.num_blocks = std::min(plan.num_blocks, plan.blocks_per_seq * in.max_num_seqs);
  plan.note = "max_model_len " + std::to_string(holds) + ", less than the model's " +
              std::to_string(in.model_max_len) + ": that is what " + budget +
              " holds (--kv-cache-memory raises it; --max-model-len sets a shorter context)";
  return plan;
}

StatusOr<KvCachePlan> PlanKvCacheFor(Deployment& deployment, const KvCacheRequest& request) {
  const models::ModelConfig& config = deployment.checkpoint().config;
  UC_RETURN_IF_ERROR(ResolveMaxModelLen(config, request.max_model_len).status());
  const std::vector<worker::RankInfo>& ranks = deployment.worker().ranks();
  int max_layers = 1;
  int64_t ranks_on_host = 0;
  for (const worker::RankInfo& r : ranks) {
    max_layers = std::max(max_layers, r.layer_end - r.layer_start);
    ranks_on_host += r.host == ranks.front().host;
  }
  KvCacheInputs in;
  in.block_size = request.block_size;
  in.block_bytes = int64_t{2} * max_layers * request.block_size *
                   deployment.model().kv_size_per_rank() * static_cast<int64_t>(sizeof(float));
  in.model_max_len = config.max_position_embeddings;
  in.max_model_len = request.max_model_len;
  in.kv_cache_bytes = request.kv_cache_bytes;
  in.num_kv_blocks = request.num_kv_blocks;
  in.max_num_seqs = request.max_num_seqs;
  in.sliding_window = config.MaxWindow();
  in.max_chunk = request.max_chunk;
  if (request.kv_cache_bytes == 0 && request.num_kv_blocks == 0) {
    in.available_bytes =
        AutoAvailableBytes(AvailableMemoryBytes(), ReservedKvCacheBytes(), ranks_on_host);
  }
  return PlanKvCache(in);
}

int64_t AutoAvailableBytes(int64_t available, int64_t reserved, int64_t ranks_on_host) {
  if (available <= 0) return 0;
  return std::max<int64_t>(1, (available - reserved) / std::max<int64_t>(1, ranks_on_host));
}

int64_t ReservedKvCacheBytes() { return g_reserved_kv_bytes.load(); }

KvCacheReservation::KvCacheReservation(int64_t bytes) : bytes_(std::max<int64_t>(0, bytes)) {
  g_reserved_kv_bytes += bytes_;
}

KvCacheReservation::KvCacheReservation(KvCacheReservation&& other) noexcept
    : bytes_(std::exchange(other.bytes_, 0)) {}

KvCacheReservation& KvCacheReservation::operator=(KvCacheReservation&& other) noexcept {
  if (this != &other) {
    g_reserved_kv_bytes -= bytes_;
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

KvCacheReservation::~KvCacheReservation() { g_reserved_kv_bytes -= bytes_; }

int64_t AvailableMemoryBytes() {
  int64_t available = -1;
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string key;
    long long kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") {
      available = static_cast<int64_t>(kib) * 1024;
      break;
    }
  }
  if (available < 0) {
    const long pages = sysconf(_SC_AVPHYS_PAGES);
    const long page_size = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page_size > 0) available = int64_t{pages} * page_size;
  }
  // A container's limit: cgroup v2, then v1 (whose "no limit" is a number near 2^63).
  for (const auto& [limit_path, usage_path] :
       {std::pair{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
        std::pair{"/sys/fs/cgroup/memory/memory.limit_in_bytes",
                  "/sys/fs/cgroup/memory/memory.usage_in_bytes"}}) {
    const int64_t limit = ReadNumber(limit_path);
    const int64_t usage = ReadNumber(usage_path);
    if (limit <= 0 || limit >= (int64_t{1} << 60) || usage < 0) continue;
    const int64_t room = std::max<int64_t>(0, limit - usage);
    available = available < 0 ? room : std::min(available, room);
    break;
  }
  return std::max<int64_t>(0, available);
}

}  // namespace uc::engine
