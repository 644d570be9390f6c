// File: scheduler.h
// -----------------------------------------------------------------------------
// Scheduler: the one scheduler of a deployment (vLLM v1's unified token-budget scheduler).
// Each step it decides which sequences run and how many of their tokens, within
// `max_num_seqs` and `max_num_batched_tokens`, and returns a SchedulerOutput that every rank
// executes.
//
// Policy, in order each step:
//   1. Running sequences, oldest first. Each gets the tokens it has not computed yet (one for a
//      decode step; a chunk of at most `max_prefill_chunk` for a prompt being prefilled), as far
//      as the token budget allows. When its KV blocks cannot grow, the newest running sequence
//      is preempted (blocks freed, its computed tokens forgotten, back to the front of the
//      waiting queue to be recomputed later) until it fits — or it is itself the newest and is
//      preempted.
//   2. If nothing was preempted this step: waiting sequences in FCFS order (preempted ones
//      first, by arrival) while there is budget, a sequence slot and KV blocks for the chunk.
//      The queue head is never skipped for a later request, so no request starves — except
//      for the steering cap: a sequence whose steering config would make more than
//      max_steering_configs distinct configs run at once is passed over until one finishes.
// With a sliding window on every layer (sliding_window > 0), a running sequence's blocks that
// lie wholly before the window of its next token are given back before each step's allocation
// (vLLM's sliding-window manager), so a sequence holds at most MaxBlocksHeld blocks however long
// it grows, and may outgrow the whole cache.
// Held sequences (Hold: a probe escalated and waits for an answer) are not scheduled until
// Release and do not count against max_num_seqs; they keep their blocks, but preemption takes
// them like any running sequence, and before any other when a waiting sequence needs blocks.
// A recomputed sequence runs prompt + generated tokens as prefill; the last chunk samples the
// next new token. A sequence whose chunk reaches the end of its known tokens has `sample` set;
// the engine then calls AppendToken with the sampled id (and Finish when it stops).
//
// Testable without a model: it only sees token ids. Thread-compatible: one thread (the engine
// loop) calls every method.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "engine/scheduling/block_manager.h"
#include "worker/sampling_params.h"
#include "worker/scheduler_output.h"

namespace uc::engine {

struct SchedulerConfig {
  int max_num_seqs = 64;             // sequences in one step at most
  int max_num_batched_tokens = 512;  // tokens in one step at most, all sequences together
  int max_prefill_chunk = 256;       // prompt tokens of one sequence in one step at most
  int max_model_len = 2048;          // positions one sequence may reach
  // > 0: every layer attends to at most this many positions (itself included; the largest
  // window when layers differ), so KV blocks before a sequence's window are given back. 0: no
  // layer or not every layer slides (Gemma's global layers need the whole prefix).
  int sliding_window = 0;
  // Distinct steering configs among running sequences at most (so in any one step); 0: no
  // limit. A waiting sequence whose config would exceed it stays waiting while later ones —
  // unsteered, or steered by a config already running — go ahead of it.
  int max_steering_configs = 0;
  // Automatic prefix caching (block_manager.h): a sequence admitted for the first time starts
  // from the longest run of registered full blocks of its tokens (its last token is always
  // computed), and full blocks are registered once computed. Needs sliding_window == 0.
  bool enable_prefix_caching = false;
};

// How one sequence uses the prefix cache: `read` lets its first admission start from cached
// blocks, `write` registers its computed full blocks; `key` goes into every block hash
// (everything besides the tokens that changes the KV: steering, a tenant's salt).
struct PrefixCacheUse {
  bool read = false;
  bool write = false;
  // Also when it is recomputed after a preemption. Off where the positions it ran before
  // matter (probes: blocks another sequence registered could cover positions it never ran).
  bool read_on_recompute = false;
  BlockHash key;
};

// The most KV blocks of `block_size` one sequence of `num_tokens` tokens holds at once: all of
// them without a window; with one, those of the window of its first new token plus a chunk of
// up to `max_chunk` tokens (at most one more for the alignment). REQUIRES: the sizes >= 1 (the
// window >= 0).
int MaxBlocksHeld(int num_tokens, int block_size, int sliding_window, int max_chunk);

enum class SequenceStatus { kWaiting, kRunning, kPreempted, kFinished };

// Read-only view of one sequence, for the engine and tests.
struct SequenceInfo {
  uint64_t seq_id = 0;
  SequenceStatus status = SequenceStatus::kWaiting;
  int num_prompt_tokens = 0;
  int num_tokens = 0;           // prompt + generated
  int num_computed_tokens = 0;  // in the KV cache
  int num_preemptions = 0;
  int num_cached_tokens = 0;  // served from the prefix cache at its first admission
  std::vector<int32_t> block_table;
};

class Scheduler {
 public:
  // REQUIRES: every config field >= 1; block_manager outlives the scheduler and no one else
  // allocates from it.
  Scheduler(const SchedulerConfig& config, BlockManager* block_manager);

  // Queues a new sequence. `params` is sent to the ranks with its first scheduled chunk;
  // `steering_id` (0: none) is the engine's registered steering config, copied into every chunk
  // and counted against max_steering_configs.
  // InvalidArgument (nothing queued) when: seq_id is already known (unfinished, or finished
  // but not yet reported in an output's finished_seq_ids); prompt_ids is empty;
  // prompt_ids.size() >= max_model_len; the prompt alone needs more KV blocks than exist.
  // `cache` says how it uses the prefix cache (ignored without enable_prefix_caching).
  Status AddSequence(uint64_t seq_id, std::vector<int32_t> prompt_ids,
                     const worker::SamplingParams& params, uint32_t steering_id = 0,
                     const PrefixCacheUse& cache = {});

  // Decides the next step. Sequences finished (Finish: a stop or an abort) since the previous
  // call are listed in finished_seq_ids. May return an output with nothing scheduled (nothing
  // to do, or nothing fits).
  worker::SchedulerOutput Schedule();

  // Schedule() counts every scheduled token as computed (the ranks run the whole output before
  // the next call). After execution, the engine reports the new token of each sequence whose
  // chunk had `sample` set. REQUIRES: seq_id was scheduled with sample in the last output.
  // REQUIRES (checked by the next Schedule()): every sequence that had `sample` set gets
  // AppendToken or Finish before the next Schedule(); the engine Finishes a sequence once it
  // holds max_model_len tokens (no position >= max_model_len is ever scheduled), and before
  // its tokens outgrow the whole cache (MaxBlocksHeld > num_blocks; moot when the cache holds
  // max_model_len tokens), since such a sequence could never be scheduled again.
  void AppendToken(uint64_t seq_id, int32_t token);
  // Ends a running/waiting/preempted sequence (stop condition, or abort): its blocks go back
  // to the free list now, and the next output tells the ranks. Returns false if unknown or
  // already finished. Finished ids stay reserved until the next Schedule() reports them.
  bool Finish(uint64_t seq_id);
  // Like AppendToken for a sequence that is done generating but whose last token must still
  // run through the model once (for probes that want its activation): the next chunk covers
  // it with `sample` unset, after which the engine calls Finish. The token may be the one that
  // reaches max_model_len.
  void AppendFinalToken(uint64_t seq_id, int32_t token);

  // Holding: `seq_id` is not scheduled until Release (see the top of this file). It may still
  // await the token it sampled last; AppendToken / AppendFinalToken / Finish then work even if
  // preemption took it meanwhile. False when unknown, finished, or already in that state.
  bool Hold(uint64_t seq_id);
  bool Release(uint64_t seq_id);
  int num_held() const { return num_held_; }

  bool HasUnfinished() const { return !waiting_.empty() || !running_.empty(); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int num_running() const { return static_cast<int>(running_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }
  // Prefix caching: tokens of first admissions that could read the cache, and of those, the
  // tokens served from it.
  int64_t prefix_cache_queries() const { return prefix_queries_; }
  int64_t prefix_cache_hits() const { return prefix_hits_; }
  const SchedulerConfig& config() const { return config_; }
  const BlockManager& block_manager() const { return *blocks_; }
  // MaxBlocksHeld for this scheduler's block size, window and chunk.
  int MaxBlocksHeld(int num_tokens) const;
  // NotFound for an unknown or finished id.
  StatusOr<SequenceInfo> Info(uint64_t seq_id) const;

 private:
  // Defined here (not only declared) so the implicit destructor compiles where it is used.
  struct Sequence {
    uint64_t seq_id = 0;
    int64_t arrival = 0;             // order of AddSequence calls
    std::vector<int32_t> token_ids;  // prompt, then generated tokens
    int num_prompt_tokens = 0;
    int num_computed_tokens = 0;  // in the KV cache; counted when scheduled
    std::vector<int32_t> block_table;
    SequenceStatus status = SequenceStatus::kWaiting;
    int num_preemptions = 0;
    worker::SamplingParams params;
    bool params_sent = false;  // new_params went out with its first chunk
    uint32_t steering_id = 0;
    bool awaiting_token = false;  // scheduled with sample; AppendToken or Finish comes next
    bool final_feed = false;      // its last token runs once more, without sampling
    bool held = false;            // Hold: not scheduled until Release
    PrefixCacheUse cache;
    std::vector<BlockHash> hashes;  // of its full blocks, as far as computed so far
    int num_registered = 0;         // leading blocks registered (or matched)
    int num_cached_tokens = 0;
    int num_tokens() const { return static_cast<int>(token_ids.size()); }
  };
  // Prefix caching: extends seq->hashes to its first `num_blocks` full blocks.
  void HashBlocks(Sequence* seq, int num_blocks);
  // Registers `seq`'s full blocks whose KV every rank has computed (num_computed_tokens, when
  // every scheduled chunk has run).
  void RegisterComputed(Sequence* seq);
  // A waiting sequence's first admission: takes the cached blocks of its prefix.
  void MatchPrefix(Sequence* seq);

  // Frees `seq`'s blocks, removes it from running_ and puts it at the right place of the
  // waiting queue; records it in out.preempted_seq_ids.
  void Preempt(Sequence* seq, worker::SchedulerOutput& out);
  void InsertWaiting(Sequence* seq);
  // Preempts the newest held running sequence; false when there is none.
  bool PreemptHeld(worker::SchedulerOutput& out);
  // Sliding window: gives back `seq`'s blocks that lie wholly before the window of its next
  // token (position num_computed_tokens).
  void ReleaseOutOfWindow(Sequence* seq);
  // Tokens `seq` runs this step: what it has not computed, capped by the chunk and `budget`.
  int ChunkSize(const Sequence& seq, int budget) const;
  // Appends `seq`'s next `num_tokens` tokens to `out` and counts them as computed.
  // REQUIRES: its block table already covers them.
  void AddChunk(Sequence* seq, int num_tokens, worker::SchedulerOutput& out);
  Sequence* Find(uint64_t seq_id) const;  // null when unknown
  // Checks the engine kept its side of the contract (see AppendToken) for `seq`.
  void CheckSchedulable(const Sequence& seq) const;

  SchedulerConfig config_;
  BlockManager* blocks_;
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> seqs_;
  std::deque<Sequence*> waiting_;   // arrival order (preempted ones re-inserted by arrival)
  std::vector<Sequence*> running_;  // arrival order
  std::vector<uint64_t> finished_since_last_;
  int64_t next_arrival_ = 0;
  int64_t step_ = 0;
  int64_t num_preemptions_ = 0;
  int num_held_ = 0;
  int64_t prefix_queries_ = 0;
  int64_t prefix_hits_ = 0;
};

}  // namespace uc::engine
