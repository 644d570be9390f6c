#include "engine/scheduling/scheduler.h"

#include <algorithm>
#include <string>
#include <utility>

#include "base/check.h"

namespace uc::engine {
namespace {

bool Contains(const std::vector<uint32_t>& ids, uint32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

int MaxBlocksHeld(int num_tokens, int block_size, int sliding_window, int max_chunk) {
  UC_CHECK(num_tokens >= 0 && block_size >= 1 && sliding_window >= 0 && max_chunk >= 1,
           "MaxBlocksHeld(%d, %d, %d, %d)", num_tokens, block_size, sliding_window, max_chunk);
  const int64_t all = (int64_t{num_tokens} + block_size - 1) / block_size;
  if (sliding_window == 0) return static_cast<int>(all);
  // Positions [start - window + 1, start + chunk): window - 1 + chunk of them, on at most one
  // block more than they fill.
  const int64_t span = int64_t{sliding_window} - 1 + max_chunk;
  return static_cast<int>(std::min(all, (span + block_size - 1) / block_size + 1));
}

Scheduler::Scheduler(const SchedulerConfig& config, BlockManager* block_manager)
    : config_(config), blocks_(block_manager) {
  UC_CHECK(block_manager != nullptr, "Scheduler needs a BlockManager");
  UC_CHECK(config.max_num_seqs >= 1, "max_num_seqs is %d", config.max_num_seqs);
  UC_CHECK(config.max_num_batched_tokens >= 1, "max_num_batched_tokens is %d",
           config.max_num_batched_tokens);
  UC_CHECK(config.max_prefill_chunk >= 1, "max_prefill_chunk is %d", config.max_prefill_chunk);
  UC_CHECK(config.max_model_len >= 1, "max_model_len is %d", config.max_model_len);
  UC_CHECK(config.sliding_window >= 0, "sliding_window is %d", config.sliding_window);
  UC_CHECK(config.max_steering_configs >= 0, "max_steering_configs is %d",
           config.max_steering_configs);
}

int Scheduler::MaxBlocksHeld(int num_tokens) const {
  return engine::MaxBlocksHeld(num_tokens, blocks_->block_size(), config_.sliding_window,
                               std::min(config_.max_prefill_chunk, config_.max_num_batched_tokens));
}

Status Scheduler::AddSequence(uint64_t seq_id, std::vector<int32_t> prompt_ids,
                              const worker::SamplingParams& params, uint32_t steering_id,
                              const PrefixCacheUse& cache) {
  if (seqs_.count(seq_id) != 0) {
    return InvalidArgumentError("sequence id " + std::to_string(seq_id) + " is already in use");
  }
  if (prompt_ids.empty()) {
    return InvalidArgumentError("sequence " + std::to_string(seq_id) +
                                ": the prompt is empty; it needs at least one token");
  }
  const int num_prompt = static_cast<int>(prompt_ids.size());
  if (prompt_ids.size() >= static_cast<size_t>(config_.max_model_len)) {
    return InvalidArgumentError(
        "sequence " + std::to_string(seq_id) + ": prompt has " + std::to_string(prompt_ids.size()) +
        " tokens; the context (max_model_len) is " + std::to_string(config_.max_model_len) +
        ", leaving no room to generate");
  }
  if (MaxBlocksHeld(num_prompt) > blocks_->num_blocks()) {
    return InvalidArgumentError("sequence " + std::to_string(seq_id) + ": prompt has " +
                                std::to_string(num_prompt) + " tokens, needing " +
                                std::to_string(MaxBlocksHeld(num_prompt)) + " KV blocks of " +
                                std::to_string(blocks_->block_size()) + " tokens; the cache has " +
                                std::to_string(blocks_->num_blocks()));
  }
  auto seq = std::make_unique<Sequence>();
  seq->seq_id = seq_id;
  seq->arrival = next_arrival_++;
  seq->token_ids = std::move(prompt_ids);
  seq->num_prompt_tokens = num_prompt;
  seq->params = params;
  seq->steering_id = steering_id;
  if (config_.enable_prefix_caching) seq->cache = cache;
  waiting_.push_back(seq.get());
  seqs_.emplace(seq_id, std::move(seq));
  return OkStatus();
}

worker::SchedulerOutput Scheduler::Schedule() {
  worker::SchedulerOutput out;
  out.step = step_++;
  out.finished_seq_ids = std::move(finished_since_last_);
  finished_since_last_.clear();
  for (const uint64_t id : out.finished_seq_ids) seqs_.erase(id);
  // Every chunk scheduled so far has run on every rank: their full blocks can be shared.
  for (Sequence* seq : running_) RegisterComputed(seq);

  int budget = config_.max_num_batched_tokens;
  bool preempted = false;
  // 1. Running sequences, oldest first. Victims are taken from the back (the newest), so a
  // sequence already scheduled this step never loses its blocks, and the oldest one only
  // yields when it is alone -- where it always fits (CheckSchedulable).
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* seq = running_[i];
    if (seq->held) {
      ++i;
      continue;
    }
    CheckSchedulable(*seq);
    ReleaseOutOfWindow(seq);
    const int n = ChunkSize(*seq, budget);
    const int end = seq->num_computed_tokens + n;
    bool fits = blocks_->Allocate(seq->block_table, end);
    while (!fits && running_.back() != seq) {
      Preempt(running_.back(), out);
      preempted = true;
      fits = blocks_->Allocate(seq->block_table, end);
    }
    if (!fits) {  // `seq` is the newest running sequence: it yields its own blocks
      Preempt(seq, out);
      preempted = true;
      break;
    }
    AddChunk(seq, n, out);
    budget -= n;
    ++i;
  }

  // 2. Waiting sequences in FCFS order. After a preemption the cache is short, and admitting
  // new work would only lead to preempting it again.
  std::vector<uint32_t> configs;  // distinct steering configs running
  for (const Sequence* seq : running_) {
    if (seq->steering_id != 0 && !Contains(configs, seq->steering_id)) {
      configs.push_back(seq->steering_id);
    }
  }
  size_t next = 0;
  int held_running = 0;
  for (const Sequence* seq : running_) held_running += seq->held ? 1 : 0;
  while (!preempted && next < waiting_.size() && budget > 0 &&
         num_running() - held_running < config_.max_num_seqs) {
    Sequence* seq = waiting_[next];
    if (seq->held) {
      ++next;
      continue;
    }
    const bool new_config = seq->steering_id != 0 && !Contains(configs, seq->steering_id);
    if (new_config && config_.max_steering_configs > 0 &&
        static_cast<int>(configs.size()) >= config_.max_steering_configs) {
      ++next;  // waits for a config slot; later sequences may go ahead
      continue;
    }
    CheckSchedulable(*seq);
    MatchPrefix(seq);
    const int n = ChunkSize(*seq, budget);
    const int end = seq->num_computed_tokens + n;
    bool fits = blocks_->Allocate(seq->block_table, end);
    while (!fits && PreemptHeld(out)) {  // held sequences yield their blocks first
      --held_running;
      fits = blocks_->Allocate(seq->block_table, end);
    }
    if (!fits) {  // never skip for lack of blocks; the matched prefix is matched again later
      if (seq->num_computed_tokens > 0) {
        prefix_hits_ -= seq->num_computed_tokens;
        prefix_queries_ -= seq->num_tokens();
        blocks_->Free(seq->block_table);
        seq->num_computed_tokens = 0;
        seq->num_registered = 0;
      }
      break;
    }
    if (seq->num_preemptions == 0) seq->num_cached_tokens = seq->num_computed_tokens;
    // A preempted held sequence went back into the queue, maybe before `seq`.
    next = static_cast<size_t>(std::find(waiting_.begin(), waiting_.end(), seq) - waiting_.begin());
    if (new_config) configs.push_back(seq->steering_id);
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(next));
    seq->status = SequenceStatus::kRunning;
    const auto pos =
        std::upper_bound(running_.begin(), running_.end(), seq->arrival,
                         [](int64_t arrival, const Sequence* s) { return arrival < s->arrival; });
    running_.insert(pos, seq);
    AddChunk(seq, n, out);
    budget -= n;
  }
  return out;
}

void Scheduler::AppendToken(uint64_t seq_id, int32_t token) {
  Sequence* seq = Find(seq_id);
  // A held sequence may have been preempted while its sampled token was withheld.
  UC_CHECK(seq != nullptr && (seq->status == SequenceStatus::kRunning ||
                              (seq->held && seq->status == SequenceStatus::kPreempted)),
           "AppendToken(%llu): not a running sequence", static_cast<unsigned long long>(seq_id));
  UC_CHECK(seq->awaiting_token, "AppendToken(%llu): it was not scheduled with sample set",
           static_cast<unsigned long long>(seq_id));
  UC_CHECK(seq->num_tokens() < config_.max_model_len,
           "AppendToken(%llu): the sequence already holds max_model_len (%d) tokens",
           static_cast<unsigned long long>(seq_id), config_.max_model_len);
  seq->token_ids.push_back(token);
  seq->awaiting_token = false;
}

void Scheduler::AppendFinalToken(uint64_t seq_id, int32_t token) {
  AppendToken(seq_id, token);
  Find(seq_id)->final_feed = true;
}

bool Scheduler::Finish(uint64_t seq_id) {
  Sequence* seq = Find(seq_id);
  if (seq == nullptr || seq->status == SequenceStatus::kFinished) return false;
  if (seq->status == SequenceStatus::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), seq));
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), seq));
  }
  if (seq->status == SequenceStatus::kRunning) RegisterComputed(seq);  // its chunks have run
  blocks_->Free(seq->block_table);
  if (seq->held) --num_held_;
  seq->held = false;
  seq->status = SequenceStatus::kFinished;
  seq->awaiting_token = false;
  finished_since_last_.push_back(seq_id);
  return true;
}

StatusOr<SequenceInfo> Scheduler::Info(uint64_t seq_id) const {
  const Sequence* seq = Find(seq_id);
  if (seq == nullptr || seq->status == SequenceStatus::kFinished) {
    return NotFoundError("no unfinished sequence with id " + std::to_string(seq_id));
  }
  SequenceInfo info;
  info.seq_id = seq->seq_id;
  info.status = seq->status;
  info.num_prompt_tokens = seq->num_prompt_tokens;
  info.num_tokens = seq->num_tokens();
  info.num_computed_tokens = seq->num_computed_tokens;
  info.num_preemptions = seq->num_preemptions;
  info.num_cached_tokens = seq->num_cached_tokens;
  info.block_table = seq->block_table;
  return info;
}

void Scheduler::Preempt(Sequence* seq, worker::SchedulerOutput& out) {
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  blocks_->Free(seq->block_table);
  seq->num_computed_tokens = 0;
  seq->num_registered = 0;
  seq->status = SequenceStatus::kPreempted;
  ++seq->num_preemptions;
  ++num_preemptions_;
  out.preempted_seq_ids.push_back(seq->seq_id);
  InsertWaiting(seq);
}

bool Scheduler::Hold(uint64_t seq_id) {
  Sequence* seq = Find(seq_id);
  if (seq == nullptr || seq->status == SequenceStatus::kFinished || seq->held) return false;
  seq->held = true;
  ++num_held_;
  return true;
}

bool Scheduler::Release(uint64_t seq_id) {
  Sequence* seq = Find(seq_id);
  if (seq == nullptr || seq->status == SequenceStatus::kFinished || !seq->held) return false;
  seq->held = false;
  --num_held_;
  return true;
}

bool Scheduler::PreemptHeld(worker::SchedulerOutput& out) {
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    if ((*it)->held) {
      Preempt(*it, out);
      return true;
    }
  }
  return false;
}

void Scheduler::InsertWaiting(Sequence* seq) {
  const auto pos =
      std::upper_bound(waiting_.begin(), waiting_.end(), seq->arrival,
                       [](int64_t arrival, const Sequence* s) { return arrival < s->arrival; });
  waiting_.insert(pos, seq);
}

void Scheduler::ReleaseOutOfWindow(Sequence* seq) {
  if (config_.sliding_window == 0) return;
  // The next token, at position num_computed_tokens, reads keys from position
  // num_computed_tokens - window + 1 on (kernels::AttentionShape::FirstPosition).
  const int first_needed = seq->num_computed_tokens - config_.sliding_window + 1;
  if (first_needed <= 0) return;
  const int count =
      std::min(first_needed / blocks_->block_size(), static_cast<int>(seq->block_table.size()));
  blocks_->FreeLeading(seq->block_table, count);
}

void Scheduler::HashBlocks(Sequence* seq, int num_blocks) {
  const int bs = blocks_->block_size();
  while (static_cast<int>(seq->hashes.size()) < num_blocks) {
    const size_t b = seq->hashes.size();
    const std::span<const int32_t> tokens(seq->token_ids.data() + b * bs, static_cast<size_t>(bs));
    const std::optional<BlockHash> parent =
        b == 0 ? std::nullopt : std::optional<BlockHash>(seq->hashes.back());
    seq->hashes.push_back(HashBlock(parent, tokens, seq->cache.key));
  }
}

void Scheduler::RegisterComputed(Sequence* seq) {
  if (!seq->cache.write) return;
  const int full = seq->num_computed_tokens / blocks_->block_size();
  if (full <= seq->num_registered) return;
  HashBlocks(seq, full);
  for (int b = seq->num_registered; b < full; ++b) {
    blocks_->Register(seq->block_table[b], seq->hashes[b]);
  }
  seq->num_registered = full;
}

void Scheduler::MatchPrefix(Sequence* seq) {
  if (!seq->cache.read || seq->num_computed_tokens != 0 || !seq->block_table.empty()) return;
  if (seq->num_preemptions > 0 && !seq->cache.read_on_recompute) return;
  // The last token always runs: it is the one that samples.
  const int full = (seq->num_tokens() - 1) / blocks_->block_size();
  HashBlocks(seq, full);
  const int matched =
      blocks_->Match(std::span<const BlockHash>(seq->hashes.data(), full), seq->block_table);
  seq->num_computed_tokens = matched * blocks_->block_size();
  seq->num_registered = matched;
  prefix_queries_ += seq->num_tokens();
  prefix_hits_ += seq->num_computed_tokens;
}

int Scheduler::ChunkSize(const Sequence& seq, int budget) const {
  const int remaining = seq.num_tokens() - seq.num_computed_tokens;
  return std::min({remaining, config_.max_prefill_chunk, budget});
}

void Scheduler::AddChunk(Sequence* seq, int num_tokens, worker::SchedulerOutput& out) {
  const int start = seq->num_computed_tokens;
  const int end = start + num_tokens;
  UC_CHECK(num_tokens >= 1 && end <= seq->num_tokens(), "chunk of %d tokens", num_tokens);
  UC_CHECK(end <= config_.max_model_len, "sequence %llu: position %d >= max_model_len %d",
           static_cast<unsigned long long>(seq->seq_id), end - 1, config_.max_model_len);
  UC_CHECK(static_cast<int>(seq->block_table.size()) >= blocks_->BlocksFor(end),
           "block table does not cover %d tokens", end);
  worker::ScheduledSequence s;
  s.seq_id = seq->seq_id;
  s.token_ids.assign(seq->token_ids.begin() + start, seq->token_ids.begin() + end);
  s.start_pos = start;
  s.block_table = seq->block_table;
  s.num_prompt_tokens = seq->num_prompt_tokens;
  s.sample = end == seq->num_tokens() && !seq->final_feed;
  s.steering_id = seq->steering_id;
  if (!seq->params_sent) {
    s.new_params = seq->params;
    seq->params_sent = true;
  }
  seq->num_computed_tokens = end;
  seq->awaiting_token = s.sample;
  out.scheduled.push_back(std::move(s));
}

Scheduler::Sequence* Scheduler::Find(uint64_t seq_id) const {
  const auto it = seqs_.find(seq_id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

void Scheduler::CheckSchedulable(const Sequence& seq) const {
  const auto id = static_cast<unsigned long long>(seq.seq_id);
  UC_CHECK(!seq.awaiting_token,
           "sequence %llu sampled a token in the previous step but got neither AppendToken nor "
           "Finish",
           id);
  UC_CHECK(seq.num_computed_tokens < seq.num_tokens(), "sequence %llu has nothing to compute", id);
  UC_CHECK(seq.num_tokens() < config_.max_model_len || seq.final_feed,
           "sequence %llu holds max_model_len (%d) tokens and can generate no more; the engine "
           "must Finish it",
           id, config_.max_model_len);
  UC_CHECK(MaxBlocksHeld(seq.num_tokens()) <= blocks_->num_blocks(),
           "sequence %llu holds %d tokens, more than the whole KV cache (%d blocks of %d) can "
           "hold; the engine must Finish it before it outgrows the cache",
           id, seq.num_tokens(), blocks_->num_blocks(), blocks_->block_size());
}

}  // namespace uc::engine
