// File: scheduler_output.h
// -----------------------------------------------------------------------------
// SchedulerOutput: what the one scheduler (engine/scheduling/scheduler.h) decides for one step, and
// the one message the driver broadcasts to every rank each step. Every rank builds the same batch
// from it: the scheduled sequences' tokens are concatenated in order, so batch row r maps to one
// (sequence, position) on every rank and stage. Plain value types; Serialize/Parse are exact
// inverses.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "worker/sampling_params.h"

namespace uc::worker {

// One sequence's part of a step.
struct ScheduledSequence {
  uint64_t seq_id = 0;
  // Tokens run this step, at positions start_pos, start_pos + 1, ... of the sequence. For a
  // prefill chunk (or a recompute after preemption) several; for a decode step one.
  std::vector<int32_t> token_ids;
  int32_t start_pos = 0;  // = tokens of this sequence already in the KV cache
  // KV blocks of the sequence, covering at least positions [0, start_pos + token_ids.size()).
  std::vector<int32_t> block_table;
  int32_t num_prompt_tokens = 0;  // positions < this are prompt, the rest generated
  // True when this step reaches the end of the sequence's known tokens: the last stage samples
  // one new token for it. False for a prefill chunk that is not the last.
  bool sample = false;
  // Set the first time a sequence is scheduled (and only then): how the last stage samples it.
  std::optional<SamplingParams> new_params;
  // Steering: the registered config (SchedulerOutput::new_steering) of this sequence; 0: none.
  // steering_windows: per vector group g, positions [w[2g], w[2g+1]) are steered (a group past
  // the end: always); empty: every group at every position.
  uint32_t steering_id = 0;
  std::vector<int32_t> steering_windows;
  // Logprobs (worker/logprobs.h), set by the engine every step: >= 0 returns the sampled
  // token's logprob with that many top entries; num_prompt_logprobs >= 0 also those of the
  // prompt tokens this chunk's rows predict (positions start_pos + 1 ... up to the prompt's
  // end), next_prompt_token being the prompt token at end_pos() (-1 past the prompt).
  int32_t num_logprobs = -1;
  int32_t num_prompt_logprobs = -1;
  int32_t next_prompt_token = -1;

  // Whether group `group` of the steering applies at `position`.
  bool SteeringActive(int group, int32_t position) const {
    const size_t i = static_cast<size_t>(group) * 2;
    if (i + 1 >= steering_windows.size()) return true;
    return steering_windows[i] <= position && position < steering_windows[i + 1];
  }

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t end_pos() const { return start_pos + num_tokens(); }
  // The rows of this chunk whose logits give prompt logprobs: positions
  // [start_pos, min(end_pos(), num_prompt_tokens - 1)) (none without num_prompt_logprobs).
  int32_t num_prompt_logprob_rows() const {
    if (num_prompt_logprobs < 0) return 0;
    const int32_t end = end_pos() < num_prompt_tokens - 1 ? end_pos() : num_prompt_tokens - 1;
    return end > start_pos ? end - start_pos : 0;
  }
  // Whether the last stage returns logprobs for this sequence this step.
  bool wants_logprobs() const {
    return num_prompt_logprob_rows() > 0 || (sample && num_logprobs >= 0);
  }
};

// A steering config (worker/steering_config.h, serialized) the ranks keep under `id` until a
// later output drops it. Ids are never reused.
struct SteeringRegistration {
  uint32_t id = 0;
  std::string config;
};

// Rows of one tap point a probe wants this step: the activation of batch rows `rows` at
// (layer, site). Only the rank that owns the layer (TP rank 0 of its stage, or every TP rank
// with compare_tp_replicas) copies them; nothing else is copied.
struct CaptureItem {
  int32_t layer = 0;          // global decoder layer; num_hidden_layers for the final norm
  uint8_t site = 0;           // models::Site
  std::vector<int32_t> rows;  // ascending batch rows
};

struct SchedulerOutput {
  int64_t step = 0;
  std::vector<ScheduledSequence> scheduled;  // batch order
  // Sequences finished or aborted since the previous step: every rank drops their state
  // (samplers). Their KV blocks are already back on the scheduler's free list.
  std::vector<uint64_t> finished_seq_ids;
  // Sequences preempted this step (KV freed; they will be recomputed). Informational.
  std::vector<uint64_t> preempted_seq_ids;
  // Steering configs used from this step on (registered before the batch runs), and configs
  // no longer used by any sequence (dropped before the batch runs). A step's sequences use at
  // most SchedulerConfig::max_steering_configs distinct ids.
  std::vector<SteeringRegistration> new_steering;
  std::vector<uint32_t> dropped_steering;
  // Activations to capture this step (empty: nothing is copied).
  std::vector<CaptureItem> capture;
  // Debug: every TP rank captures and the driver checks the replicas are identical.
  bool compare_tp_replicas = false;

  int32_t total_tokens() const;
  int32_t num_sampled() const;
  bool wants_logprobs() const;  // any sequence's
  bool empty() const { return scheduled.empty() && finished_seq_ids.empty(); }

  std::string Serialize() const;
  static StatusOr<SchedulerOutput> Parse(const std::string& bytes);
};

}  // namespace uc::worker
