// File: kv_cache_plan.h
// -----------------------------------------------------------------------------
// How much KV cache a deployment gets and how long one sequence may be: the one place where
// every command that runs a model (generate --prompt and --prompts, serve, capture, calibrate,
// bench, perplexity) decides it. The policy, in order:
//
//   1. The budget per rank. --kv-cache-memory when given (kv_cache_bytes > 0). Otherwise
//      automatic (vLLM's way: a share of the memory): a quarter of the memory available on the
//      driver's host once the weights are loaded (MemAvailable, within a cgroup's limit),
//      divided among that host's ranks, and at most max(4 GiB, one sequence of max_model_len),
//      so a small model on a big machine does not take tens of gigabytes. Never more than
//      max_num_seqs full-length sequences can use.
//   2. The context. --max-model-len when given (max_model_len > 0): a budget that cannot hold
//      one such sequence is an error naming --kv-cache-memory and --max-model-len. Otherwise the
//      model's max_position_embeddings, lowered to what the budget holds when it holds less
//      (llama.cpp's --fit does the same), but not below min(the model's, kMinFittedContext):
//      a cache too small for that is the same error. A lowered context is said in `note`, one
//      line for the log that names the flags that change it.
//
// Several engines in one process (the Python package's LLM objects, an embedder's): the caches
// are mapped lazily, so MemAvailable does not yet count what an open engine reserved. A
// process-wide account (KvCacheReservation) holds the bytes every open engine's cache reserved,
// and the automatic budget is sized from MemAvailable less that account: a second engine sizes
// from what the first left. What the first already touched is counted twice, which errs toward
// a smaller cache, never toward overcommitting memory.
//
// The decision is made once, on world rank 0 (the engine and the generator run there), which
// then allocates num_blocks on every rank; so every rank of a TP/PP deployment agrees.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "engine/deployment.h"

namespace uc::engine {

// KV slots per block unless a command says otherwise (--block-size).
inline constexpr int kDefaultKvBlockSize = 16;
// The automatic budget's share of the available memory, and its bound (the larger of this and
// one full-length sequence).
inline constexpr int64_t kAutoKvShareDivisor = 4;
inline constexpr int64_t kAutoKvCacheCap = int64_t{4} << 30;
// A context lowered to fit the cache is never shorter than this (nor than the model's):
// llama.cpp's --fit-ctx default.
inline constexpr int kMinFittedContext = 4096;

// Everything the decision depends on, as plain numbers (PlanKvCacheFor fills them from a
// deployment; unit tests write them directly).
struct KvCacheInputs {
  int64_t block_bytes = 0;  // one block of block_size slots on the rank with the most layers
  int block_size = kDefaultKvBlockSize;
  int model_max_len = 0;        // the model's max_position_embeddings
  int max_model_len = 0;        // requested (--max-model-len); 0: the model's, fitted to the cache
  int64_t kv_cache_bytes = 0;   // requested (--kv-cache-memory) per rank; 0: automatic
  int num_kv_blocks = 0;        // > 0: exactly this many blocks (tests, tuning); wins over bytes
  int max_num_seqs = 1;         // sequences the cache needs to hold at once at most
  int sliding_window = 0;       // ModelConfig::MaxWindow(): 0 when some layer sees everything
  int max_chunk = 256;          // prompt tokens of one sequence per step at most
  int64_t available_bytes = 0;  // memory this rank may use (automatic budget only)
};

struct KvCachePlan {
  int64_t num_blocks = 0;      // blocks on every rank
  int max_model_len = 0;       // the context every request gets
  int64_t budget_bytes = 0;    // the budget the blocks were cut from (per rank)
  int64_t blocks_per_seq = 0;  // blocks one sequence of max_model_len holds at most
  int64_t block_bytes = 0;     // one block on the rank with the most layers
  int block_size = 0;          // KV slots per block
  bool automatic = false;      // the budget was sized from the machine
  bool fitted = false;         // max_model_len was lowered from the model's to fit
  std::string note;            // when fitted: the log line saying so; else empty
  // "KV cache: N blocks of B tokens (X MiB per rank[, automatic]); maximum concurrency C
  // requests of L tokens" (the start-up log line).
  std::string Describe() const;
};

// The decision above. InvalidArgument (naming the flags that fix it) when the cache cannot hold
// one sequence of an explicit max_model_len, or of the fitted one's floor; or when an input is
// out of range (max_model_len < 0, kv_cache_bytes < 0, block_bytes < 1). Pure function.
StatusOr<KvCachePlan> PlanKvCache(const KvCacheInputs& in);

// What the user asked for (the flags), for PlanKvCacheFor.
struct KvCacheRequest {
  int max_model_len = 0;       // 0: the model's, fitted
  int64_t kv_cache_bytes = 0;  // 0: automatic
  int num_kv_blocks = 0;       // > 0: exactly
  int block_size = kDefaultKvBlockSize;
  int max_num_seqs = 1;
  int max_chunk = 256;
};

// PlanKvCache for `deployment` (driver only): block bytes from the rank with the most layers,
// the model's context and window, and — for the automatic budget — AutoAvailableBytes() of
// AvailableMemoryBytes() and this process's ReservedKvCacheBytes(). Warns (ResolveMaxModelLen) when
// max_model_len exceeds the model's.
StatusOr<KvCachePlan> PlanKvCacheFor(Deployment& deployment, const KvCacheRequest& request);

// Bytes this process could still allocate: /proc/meminfo's MemAvailable (sysconf's available
// physical pages where that is missing), lowered to the room left under a cgroup (v2 or v1)
// memory limit. 0 when nothing can be read.
int64_t AvailableMemoryBytes();

// What the automatic budget is sized from on each of `ranks_on_host` ranks: `available` (as
// AvailableMemoryBytes reads it) less `reserved` (the caches other engines of this process
// hold), shared among the ranks; at least 1 byte when `available` > 0 (a budget that then
// holds nothing is the usual error), 0 (unknown: the fixed fallback) when `available` <= 0.
int64_t AutoAvailableBytes(int64_t available, int64_t reserved, int64_t ranks_on_host);

// The KV cache bytes the open engines of this process reserved (the sum of the live
// KvCacheReservations). Thread-safe.
int64_t ReservedKvCacheBytes();

// One engine's entry in that account: adds `bytes` for as long as it lives. Movable.
class KvCacheReservation {
 public:
  KvCacheReservation() = default;
  explicit KvCacheReservation(int64_t bytes);
  KvCacheReservation(KvCacheReservation&& other) noexcept;
  KvCacheReservation& operator=(KvCacheReservation&& other) noexcept;
  KvCacheReservation(const KvCacheReservation&) = delete;
  KvCacheReservation& operator=(const KvCacheReservation&) = delete;
  ~KvCacheReservation();
  int64_t bytes() const { return bytes_; }

 private:
  int64_t bytes_ = 0;
};

}  // namespace uc::engine
