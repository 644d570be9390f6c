#include "worker/worker.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <future>
#include <map>

#include "base/logging.h"
#include "worker/byte_codec.h"

namespace uc::worker {
namespace {
using internal::ByteReader;
using internal::ByteWriter;

constexpr int kResultTag = 101;
constexpr int kAckTag = 102;
constexpr int kCaptureTag = 103;

// Copies the rows a step's capture items ask for, for the items this rank owns; nothing else.
class CaptureHooks : public models::ForwardHooks {
 public:
  // Each owned item's rows are models::SiteWidth of its site wide.
  CaptureHooks(const std::vector<CaptureItem>& items, std::vector<bool> owned,
               const models::ModelConfig& config)
      : items_(items), owned_(std::move(owned)), captured_(items.size()) {
    for (size_t i = 0; i < items_.size(); ++i) {
      if (!owned_[i]) continue;
      const int64_t width = models::SiteWidth(static_cast<models::Site>(items_[i].site), config);
      captured_[i] =
          Tensor::Empty({static_cast<int64_t>(items_[i].rows.size()), width}, DType::kF32);
    }
  }
  bool Wants(models::TapPoint point) const override {
    for (size_t i = 0; i < items_.size(); ++i) {
      if (owned_[i] && Same(items_[i], point)) return true;
    }
    return false;
  }
  void Observe(models::TapPoint point, std::span<const int32_t> positions,
               const Tensor& activation) override {
    for (size_t i = 0; i < items_.size(); ++i) {
      if (!owned_[i] || !Same(items_[i], point)) continue;
      Tensor& out = captured_[i];
      for (size_t j = 0; j < items_[i].rows.size(); ++j) {
        const int32_t r = items_[i].rows[j];
        UC_CHECK(r >= 0 && r < activation.dim(0) && r < static_cast<int64_t>(positions.size()),
                 "capture row %d outside a batch of %lld", r,
                 static_cast<long long>(activation.dim(0)));
        UC_CHECK(activation.dim(1) == out.dim(1), "tap %s: rows of %lld values, expected %lld",
                 point.ToString().c_str(), static_cast<long long>(activation.dim(1)),
                 static_cast<long long>(out.dim(1)));
        std::memcpy(out.row(static_cast<int64_t>(j)), activation.row(r),
                    static_cast<size_t>(out.row_bytes()));
      }
    }
  }
  std::vector<Tensor>& captured() { return captured_; }

 private:
  static bool Same(const CaptureItem& item, models::TapPoint point) {
    return item.layer == point.layer && item.site == static_cast<uint8_t>(point.site);
  }

  const std::vector<CaptureItem>& items_;
  std::vector<bool> owned_;
  std::vector<Tensor> captured_;
};

}  // namespace

std::string StepCommand::Serialize() const {
  ByteWriter w;
  w.Put(kind);
  w.Put(capacity);
  w.Put(params.temperature);
  w.Put(params.top_k);
  w.Put(params.top_p);
  w.Put(params.min_p);
  w.Put<uint8_t>(params.seed.has_value());
  w.Put<uint64_t>(params.seed.value_or(0));
  w.PutInts(ids);
  w.PutInts(positions);
  w.Put(output);
  w.Put(num_blocks);
  w.Put(block_size);
  w.PutString(payload);
  return w.Take();
}

StatusOr<StepCommand> StepCommand::Parse(const std::string& bytes) {
  StepCommand c;
  ByteReader r(bytes);
  uint8_t has_seed = 0;
  uint64_t seed = 0;
  const bool ok = r.Get(c.kind) && r.Get(c.capacity) && r.Get(c.params.temperature) &&
                  r.Get(c.params.top_k) && r.Get(c.params.top_p) && r.Get(c.params.min_p) &&
                  r.Get(has_seed) && r.Get(seed) && r.GetInts(c.ids) && r.GetInts(c.positions) &&
                  r.Get(c.output) && r.Get(c.num_blocks) && r.Get(c.block_size) &&
                  r.GetString(c.payload) && r.done();
  if (!ok) return InvalidArgumentError("malformed step command");
  if (has_seed) c.params.seed = seed;
  return c;
}

std::string RankInfo::Describe() const {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "rank %d (pp stage %d, tp rank %d, host %s, layers [%d, %d))",
                rank, pp_rank, tp_rank, host.c_str(), layer_start, layer_end);
  return buf;
}

Worker::Worker(models::CausalLM* model, distributed::ParallelState* state, ThreadPool* pool,
               std::vector<RankInfo> ranks, double step_timeout_seconds)
    : model_(model),
      state_(state),
      pool_(pool),
      ranks_(std::move(ranks)),
      step_timeout_seconds_(step_timeout_seconds) {
  for (const RankInfo& r : ranks_) {
    if (r.pp_rank == state_->config().pipeline_parallel_size - 1 && r.tp_rank == 0) {
      result_rank_ = r.rank;
    }
  }
  if (is_driver()) {
    // Every group the driver waits in gets a watchdog naming the ranks it waits for.
    for (auto kind : {distributed::GroupKind::kWorld, distributed::GroupKind::kTensorParallel,
                      distributed::GroupKind::kPipelineParallel}) {
      distributed::GroupCoordinator& group = state_->group(kind);
      WatchStep(group, -1);
    }
  }
}

bool Worker::is_driver() const { return state_->world_group().rank() == 0; }

bool Worker::is_result_rank() const { return state_->world_group().rank() == result_rank_; }

// Installs the observer that turns a silent rank into an error naming it. waiting_for >= 0
// names one rank (a point-to-point receive); otherwise the other members of `group`.
void Worker::WatchStep(distributed::GroupCoordinator& group, int waiting_for) {
  if (group.world_size() == 1) return;
  std::vector<int> peers;
  if (waiting_for >= 0) {
    peers.push_back(waiting_for);
  } else {
    for (int r : group.ranks()) {
      if (r != group.rank()) peers.push_back(r);
    }
  }
  const double timeout = step_timeout_seconds_;
  const std::string group_name = group.name();
  group.SetWaitObserver([this, peers, timeout, group_name](std::string_view op, double waited) {
    if (waited < timeout) return true;
    std::string who;
    for (int r : peers) {
      if (!who.empty()) who += ", ";
      who += r < static_cast<int>(ranks_.size()) ? ranks_[r].Describe() : std::to_string(r);
    }
    std::fprintf(stderr,
                 "error: step %lld: %s over the %s group did not complete within %.1f s; "
                 "no progress from %s (hung, stopped or unreachable)\n",
                 static_cast<long long>(step_), std::string(op).c_str(), group_name.c_str(),
                 timeout, who.c_str());
    std::fflush(stderr);
    return false;
  });
}

void Worker::Forward(const StepCommand& command, StepResult& result, bool& has_result) {
  const models::ParallelContext& parallel = model_->parallel();
  models::IntermediateTensors input, output;
  RecvFromPreviousStage(input);
  const bool all_logits = command.output == StepCommand::Output::kAllLogits;
  const int64_t m = static_cast<int64_t>(command.positions.size());
  Tensor logits;
  const bool want_logits = command.output != StepCommand::Output::kNone;
  if (model_->has_logits() && want_logits) {
    logits = Tensor::Empty({all_logits ? m : 1, model_->config().vocab_size}, DType::kF32);
  }
  const models::LogitsRequest request = !want_logits ? models::LogitsRequest::kNone
                                        : all_logits ? models::LogitsRequest::kAll
                                                     : models::LogitsRequest::kLast;
  model_->ForwardStage(command.ids, command.positions, cache_,
                       parallel.is_first_stage() ? nullptr : &input, &output, request,
                       model_->has_logits() && want_logits ? &logits : nullptr, pool_);
  SendToNextStage(output);
  if (!is_result_rank() || !want_logits) return;
  has_result = true;
  if (command.output == StepCommand::Output::kSample) {
    UC_CHECK(sampler_ != nullptr, "kForward/kSample before kStartSequence");
    result.token = sampler_->Sample({logits.data<float>(), static_cast<size_t>(logits.numel())});
  } else {
    result.logits = logits;
  }
}

void Worker::RecvFromPreviousStage(models::IntermediateTensors& input) {
  if (model_->parallel().is_first_stage()) return;
  distributed::GroupCoordinator& pp = state_->pp_group();
  std::map<std::string, Tensor> received = pp.RecvTensorDict(pp.rank_in_group() - 1);
  input.hidden_states = received["hidden_states"];
  input.residual = received["residual"];
}

void Worker::SendToNextStage(const models::IntermediateTensors& output) {
  if (model_->parallel().is_last_stage()) return;
  distributed::GroupCoordinator& pp = state_->pp_group();
  pp.SendTensorDict({{"hidden_states", output.hidden_states}, {"residual", output.residual}},
                    pp.rank_in_group() + 1);
}

// Every rank lays the batch out the same way from the same SchedulerOutput: sequence s's
// tokens are rows [offset_s, offset_s + n_s), in the order scheduled.
models::BatchSteering Worker::BuildSteering(const SchedulerOutput& output) {
  for (uint32_t id : output.dropped_steering) steering_.erase(id);
  for (const SteeringRegistration& reg : output.new_steering) {
    StatusOr<SteeringConfig> config = SteeringConfig::Parse(reg.config);
    UC_CHECK(config.ok(), "steering config %u: %s", reg.id, config.status().ToString().c_str());
    RegisteredSteering entry;
    for (const SteeringVector& v : config->vectors) {
      double sum = 0.0;
      for (float x : v.values) sum += static_cast<double>(x) * x;
      entry.inv_norms.push_back(sum > 0.0 ? static_cast<float>(1.0 / std::sqrt(sum)) : 0.0f);
    }
    entry.config = *std::move(config);
    steering_[reg.id] = std::move(entry);
  }
  models::BatchSteering batch;
  // (config id, vector index) -> entry of batch.adds, so sequences sharing a config share adds.
  std::map<std::pair<uint32_t, size_t>, size_t> index;
  int32_t row = 0;
  for (const ScheduledSequence& s : output.scheduled) {
    const int32_t first_row = row;
    row += s.num_tokens();
    if (s.steering_id == 0) continue;
    const auto it = steering_.find(s.steering_id);
    UC_CHECK(it != steering_.end(), "sequence %llu uses steering config %u, never registered",
             static_cast<unsigned long long>(s.seq_id), s.steering_id);
    const RegisteredSteering& reg = it->second;
    for (size_t vi = 0; vi < reg.config.vectors.size(); ++vi) {
      const SteeringVector& v = reg.config.vectors[vi];
      std::vector<int32_t>* rows = nullptr;
      for (int32_t j = 0; j < s.num_tokens(); ++j) {
        const int32_t pos = s.start_pos + j;
        if (!s.SteeringActive(v.group, pos) || !v.AppliesTo(pos, s.num_prompt_tokens)) continue;
        if (rows == nullptr) {
          const auto [slot, added] = index.try_emplace({s.steering_id, vi}, batch.adds.size());
          if (added) {
            batch.adds.push_back({.layer = v.layer,
                                  .site = v.site,
                                  .vector = v.values.data(),
                                  .scale = v.scale,
                                  .norm_match = v.norm_match,
                                  .inv_vector_norm = reg.inv_norms[vi]});
          }
          rows = &batch.adds[slot->second].rows;
        }
        rows->push_back(first_row + j);
      }
    }
  }
  return batch;
}

void Worker::ExecuteBatch(const SchedulerOutput& output, StepResult& result, bool& has_result) {
  for (uint64_t id : output.finished_seq_ids) {
    samplers_.erase(id);
    constraints_.erase(id);
  }
  const models::BatchSteering steering = BuildSteering(output);
  if (output.scheduled.empty()) return;
  UC_CHECK(paged_cache_.num_blocks > 0, "engine step before the KV cache was initialized");
  const int bs = paged_cache_.block_size;
  int blocks_per_seq = 1;
  for (const ScheduledSequence& s : output.scheduled) {
    blocks_per_seq = std::max(blocks_per_seq, static_cast<int>(s.block_table.size()));
  }
  const int32_t m = output.total_tokens();
  std::vector<int32_t> ids, positions, slots, token_seq, tables, logit_rows;
  ids.reserve(m);
  positions.reserve(m);
  slots.reserve(m);
  token_seq.reserve(m);
  tables.assign(output.scheduled.size() * blocks_per_seq, 0);
  for (size_t si = 0; si < output.scheduled.size(); ++si) {
    const ScheduledSequence& s = output.scheduled[si];
    UC_CHECK(s.num_tokens() >= 1 &&
                 static_cast<int64_t>(s.block_table.size()) * bs >= int64_t{s.end_pos()},
             "sequence %llu: %d tokens from position %d with %zu blocks of %d",
             static_cast<unsigned long long>(s.seq_id), s.num_tokens(), s.start_pos,
             s.block_table.size(), bs);
    std::copy(s.block_table.begin(), s.block_table.end(), tables.begin() + si * blocks_per_seq);
    for (int32_t j = 0; j < s.num_tokens(); ++j) {
      const int32_t p = s.start_pos + j;
      ids.push_back(s.token_ids[j]);
      positions.push_back(p);
      slots.push_back(s.block_table[p / bs] * bs + p % bs);
      token_seq.push_back(static_cast<int32_t>(si));
    }
    const int32_t first_row = static_cast<int32_t>(ids.size()) - s.num_tokens();
    for (int32_t j = 0; j < s.num_prompt_logprob_rows(); ++j) logit_rows.push_back(first_row + j);
    if (s.sample) logit_rows.push_back(static_cast<int32_t>(ids.size()) - 1);
    if (s.new_params.has_value() && is_result_rank()) {
      samplers_[s.seq_id] = std::make_unique<Sampler>(*s.new_params);
      if (s.new_params->grammar.active()) StartConstraint(s.seq_id, s.new_params->grammar);
    }
  }
  // The grammar masks of this step's constrained samples are computed beside the forward pass.
  std::vector<std::pair<uint64_t, GrammarConstraint*>> constrained;
  if (is_result_rank() && !constraints_.empty()) {
    for (const ScheduledSequence& s : output.scheduled) {
      if (!s.sample) continue;
      auto it = constraints_.find(s.seq_id);
      if (it != constraints_.end()) constrained.emplace_back(s.seq_id, it->second.get());
    }
  }
  std::future<void> masks;
  if (!constrained.empty()) {
    masks = std::async(std::launch::async, [&constrained] {
      for (auto& [id, c] : constrained) c->FillMask();
    });
  }
  const models::ForwardBatch batch{
      ids,        positions,
      slots,      kernels::PagedKvLayout{bs, blocks_per_seq, tables, token_seq},
      logit_rows, steering.empty() ? nullptr : &steering};
  models::IntermediateTensors input, stage_output;
  RecvFromPreviousStage(input);
  Tensor logits;
  const int64_t rows = static_cast<int64_t>(logit_rows.size());
  if (model_->has_logits() && rows > 0) {
    logits = Tensor::Empty({rows, model_->config().vocab_size}, DType::kF32);
  }
  const int me = state_->world_group().rank();
  std::vector<bool> owned(output.capture.size(), false);
  bool any_owned = false;
  for (size_t i = 0; i < output.capture.size(); ++i) {
    const std::vector<int> ranks = CaptureRanks(output.capture[i], output.compare_tp_replicas);
    owned[i] = std::find(ranks.begin(), ranks.end(), me) != ranks.end();
    any_owned = any_owned || owned[i];
  }
  std::optional<CaptureHooks> hooks;
  if (any_owned) hooks.emplace(output.capture, owned, model_->config());
  model_->Forward(batch, paged_cache_, &input, &stage_output, logits.defined() ? &logits : nullptr,
                  pool_, hooks.has_value() ? &*hooks : nullptr);
  SendToNextStage(stage_output);
  if (masks.valid()) masks.get();
  if (hooks.has_value()) {
    result.captured = std::move(hooks->captured());
    has_result = true;
  }
  if (!is_result_rank() || rows == 0) return;
  has_result = true;
  const int64_t vocab = model_->config().vocab_size;
  auto row_of = [&](int64_t row) {
    return std::span<const float>(logits.data<float>() + row * vocab, static_cast<size_t>(vocab));
  };
  std::vector<SequenceLogprobs> logprobs;
  int64_t row = 0;
  for (const ScheduledSequence& s : output.scheduled) {
    SequenceLogprobs lp;
    lp.seq_id = s.seq_id;
    lp.first_prompt_position = s.start_pos + 1;
    // Row j predicts the token at position start_pos + j + 1: the chunk's next token, or the
    // prompt token just past the chunk.
    for (int32_t j = 0; j < s.num_prompt_logprob_rows(); ++j, ++row) {
      const int32_t target = j + 1 < s.num_tokens() ? s.token_ids[j + 1] : s.next_prompt_token;
      UC_CHECK(target >= 0 && target < vocab, "sequence %llu: prompt token %d for logprobs",
               static_cast<unsigned long long>(s.seq_id), target);
      lp.prompt.push_back(ComputeLogprobs(row_of(row), target, s.num_prompt_logprobs));
    }
    if (s.sample) {
      auto it = samplers_.find(s.seq_id);
      UC_CHECK(it != samplers_.end(), "sequence %llu sampled before its parameters arrived",
               static_cast<unsigned long long>(s.seq_id));
      GrammarConstraint* constraint = nullptr;
      if (!constrained.empty()) {
        auto c = constraints_.find(s.seq_id);
        if (c != constraints_.end()) {
          constraint = c->second.get();
          constraint->ApplyMask({logits.data<float>() + row * vocab, static_cast<size_t>(vocab)});
        }
      }
      const int32_t token = it->second->Sample(row_of(row));
      if (constraint != nullptr && !constraint->Accept(token)) {
        UC_LOG(WARNING) << "sequence " << s.seq_id << ": the grammar refused sampled token "
                        << token;
      }
      result.tokens.push_back(token);
      if (s.num_logprobs >= 0) {
        lp.has_sampled = true;
        lp.sampled = ComputeLogprobs(row_of(row), token, s.num_logprobs);
      }
      ++row;
    }
    if (s.wants_logprobs()) logprobs.push_back(std::move(lp));
  }
  if (output.wants_logprobs()) {
    result.logprobs = SerializeLogprobs(logprobs);
    result.has_logprobs = true;
  }
}

void Worker::StartConstraint(uint64_t seq_id, const GrammarSpec& spec) {
  UC_CHECK(grammar_backend_ != nullptr,
           "sequence %llu has a grammar but this rank has no grammar backend",
           static_cast<unsigned long long>(seq_id));
  StatusOr<std::shared_ptr<const CompiledGrammar>> grammar = grammar_backend_->Compile(spec);
  // The engine compiled the same spec when it accepted the request: this is a cache lookup.
  UC_CHECK(grammar.ok(), "sequence %llu: %s", static_cast<unsigned long long>(seq_id),
           grammar.status().ToString().c_str());
  constraints_[seq_id] =
      std::make_unique<GrammarConstraint>(*grammar, static_cast<int>(model_->config().vocab_size));
}

void Worker::InitializeCache(int num_blocks, int block_size) {
  StepCommand command;
  command.kind = StepCommand::Kind::kInitCache;
  command.num_blocks = num_blocks;
  command.block_size = block_size;
  Run(command);
}

std::vector<int32_t> Worker::ExecuteModel(const SchedulerOutput& output,
                                          std::vector<Tensor>* captured,
                                          std::vector<SequenceLogprobs>* logprobs) {
  StepCommand command;
  command.kind = StepCommand::Kind::kExecute;
  command.payload = output.Serialize();
  command.output =
      output.num_sampled() > 0 ? StepCommand::Output::kSample : StepCommand::Output::kNone;
  command.capacity = output.num_sampled();
  executing_ = &output;
  StepResult result = Run(command);
  executing_ = nullptr;
  if (captured != nullptr) {
    *captured = std::move(result.captured);
    captured->resize(output.capture.size());
  }
  if (logprobs != nullptr) {
    logprobs->clear();
    if (result.has_logprobs) {
      StatusOr<std::vector<SequenceLogprobs>> parsed = ParseLogprobs(result.logprobs);
      UC_CHECK(parsed.ok(), "%s", parsed.status().ToString().c_str());
      *logprobs = std::move(parsed).value();
    }
  }
  return std::move(result.tokens);
}

std::vector<int> Worker::CaptureRanks(const CaptureItem& item, bool all_tp) const {
  const int num_layers = model_->config().num_hidden_layers;
  const bool final_norm = item.site == static_cast<uint8_t>(models::Site::kFinalNorm);
  UC_CHECK(final_norm ? item.layer == num_layers : (item.layer >= 0 && item.layer < num_layers),
           "capture of layer %d (site %d) in a model of %d layers", item.layer, item.site,
           num_layers);
  const int last_stage = state_->config().pipeline_parallel_size - 1;
  std::vector<int> ranks;
  for (const RankInfo& r : ranks_) {
    const bool owns = final_norm ? r.pp_rank == last_stage
                                 : (r.layer_start <= item.layer && item.layer < r.layer_end);
    if (owns && (r.tp_rank == 0 || all_tp)) ranks.push_back(r.rank);
  }
  std::stable_sort(ranks.begin(), ranks.end(),
                   [&](int a, int b) { return ranks_[a].tp_rank < ranks_[b].tp_rank; });
  return ranks;
}

// Receives, from every other capturing rank, its items concatenated in plan order. Keeps TP
// rank 0's copy; when comparing replicas, the others must equal it bit for bit.
void Worker::GatherCaptures(const SchedulerOutput& output, StepResult& result) {
  const size_t n = output.capture.size();
  auto width_of = [&](size_t i) {
    return models::SiteWidth(static_cast<models::Site>(output.capture[i].site), model_->config());
  };
  result.captured.resize(n);
  std::vector<std::vector<int>> owners(n);
  for (size_t i = 0; i < n; ++i) {
    owners[i] = CaptureRanks(output.capture[i], output.compare_tp_replicas);
  }
  distributed::GroupCoordinator& world = state_->world_group();
  distributed::ProcessGroup& pg = *world.process_group();
  // Ranks ascend, and TP rank 0 of a stage has the lowest world rank of that stage, so the
  // primary copy of each item arrives before its replicas.
  for (int r = 1; r < world.world_size(); ++r) {
    std::vector<size_t> items;
    int64_t floats = 0;
    for (size_t i = 0; i < n; ++i) {
      if (std::find(owners[i].begin(), owners[i].end(), r) == owners[i].end()) continue;
      items.push_back(i);
      floats += static_cast<int64_t>(output.capture[i].rows.size()) * width_of(i);
    }
    if (items.empty()) continue;
    std::vector<float> buffer(static_cast<size_t>(floats));
    WatchStep(world, r);
    pg.Recv(buffer.data(), static_cast<int64_t>(buffer.size() * sizeof(float)), r, kCaptureTag);
    const float* p = buffer.data();
    for (size_t i : items) {
      const int64_t rows = static_cast<int64_t>(output.capture[i].rows.size());
      const int64_t width = width_of(i);
      Tensor t = Tensor::Empty({rows, width}, DType::kF32);
      std::memcpy(t.raw(), p, static_cast<size_t>(t.nbytes()));
      p += rows * width;
      if (owners[i].front() == r) {
        result.captured[i] = std::move(t);
        continue;
      }
      const Tensor& primary = result.captured[i];
      UC_CHECK(primary.defined() &&
                   std::memcmp(t.raw(), primary.raw(), static_cast<size_t>(t.nbytes())) == 0,
               "TP replicas disagree: layer %d site %d captured on %s differs from %s",
               output.capture[i].layer, output.capture[i].site, ranks_[r].Describe().c_str(),
               ranks_[owners[i].front()].Describe().c_str());
    }
  }
}

void Worker::SendCaptures(const StepResult& result, distributed::ProcessGroup& pg) {
  std::vector<float> buffer;
  for (const Tensor& t : result.captured) {
    if (!t.defined()) continue;
    buffer.insert(buffer.end(), t.data<float>(), t.data<float>() + t.numel());
  }
  if (!buffer.empty()) {
    pg.Send(buffer.data(), static_cast<int64_t>(buffer.size() * sizeof(float)), 0, kCaptureTag);
  }
}

std::optional<StepResult> Worker::Execute(const StepCommand& command) {
  StepResult result;
  bool has_result = false;
  switch (command.kind) {
    case StepCommand::Kind::kStartSequence:
      cache_ = model_->NewKvCache(command.capacity);
      if (is_result_rank()) sampler_ = std::make_unique<Sampler>(command.params);
      break;
    case StepCommand::Kind::kForward:
      Forward(command, result, has_result);
      break;
    case StepCommand::Kind::kInitCache:
      paged_cache_ = models::KvCache();
      paged_cache_ = model_->NewPagedKvCache(command.num_blocks, command.block_size);
      samplers_.clear();
      constraints_.clear();
      break;
    case StepCommand::Kind::kExecute: {
      StatusOr<SchedulerOutput> output = SchedulerOutput::Parse(command.payload);
      UC_CHECK(output.ok(), "rank %d: %s", state_->world_group().rank(),
               output.status().ToString().c_str());
      ExecuteBatch(*output, result, has_result);
      break;
    }
    case StepCommand::Kind::kShutdown:
      break;
  }
  if (has_result) return result;
  return std::nullopt;
}

StepResult Worker::Run(const StepCommand& command) {
  UC_CHECK(is_driver(), "Worker::Run is for the driver (world rank 0)");
  ++step_;
  distributed::GroupCoordinator& world = state_->world_group();
  if (world.world_size() > 1) {
    std::string bytes = command.Serialize();
    world.BroadcastObject(bytes, 0);
  }
  std::optional<StepResult> local = Execute(command);
  if (world.world_size() == 1) return local.value_or(StepResult());
  StepResult result = local.value_or(StepResult());
  distributed::ProcessGroup& pg = *world.process_group();
  if (command.kind == StepCommand::Kind::kExecute && result_rank_ != 0 &&
      command.output == StepCommand::Output::kSample) {
    WatchStep(world, result_rank_);
    result.tokens.resize(static_cast<size_t>(command.capacity));
    pg.Recv(result.tokens.data(), result.tokens.size() * sizeof(int32_t), result_rank_, kResultTag);
  }
  if (command.kind == StepCommand::Kind::kExecute && result_rank_ != 0 && executing_ != nullptr &&
      executing_->wants_logprobs()) {
    WatchStep(world, result_rank_);
    int64_t size = 0;
    pg.Recv(&size, sizeof(size), result_rank_, kResultTag);
    result.logprobs.resize(static_cast<size_t>(size));
    if (size > 0) pg.Recv(result.logprobs.data(), size, result_rank_, kResultTag);
    result.has_logprobs = true;
  }
  if (command.kind == StepCommand::Kind::kExecute && executing_ != nullptr &&
      !executing_->capture.empty()) {
    GatherCaptures(*executing_, result);
  }
  if (command.kind == StepCommand::Kind::kForward && result_rank_ != 0 &&
      command.output != StepCommand::Output::kNone) {
    WatchStep(world, result_rank_);
    if (command.output == StepCommand::Output::kSample) {
      pg.Recv(&result.token, sizeof(result.token), result_rank_, kResultTag);
    } else {
      const int64_t rows = command.output == StepCommand::Output::kAllLogits
                               ? static_cast<int64_t>(command.positions.size())
                               : 1;
      result.logits = Tensor::Empty({rows, model_->config().vocab_size}, DType::kF32);
      pg.Recv(result.logits.raw(), result.logits.nbytes(), result_rank_, kResultTag);
    }
  }
  // Every rank acknowledges the step, so a silent one is named here.
  for (int r = 1; r < world.world_size(); ++r) {
    WatchStep(world, r);
    int64_t ack = 0;
    pg.Recv(&ack, sizeof(ack), r, kAckTag);
    UC_CHECK(ack == step_, "rank %d acknowledged step %lld during step %lld", r,
             static_cast<long long>(ack), static_cast<long long>(step_));
  }
  WatchStep(world, -1);
  return result;
}

void Worker::Loop() {
  UC_CHECK(!is_driver(), "Worker::Loop is for ranks other than the driver");
  distributed::GroupCoordinator& world = state_->world_group();
  distributed::ProcessGroup& pg = *world.process_group();
  while (true) {
    std::string bytes;
    world.BroadcastObject(bytes, 0);
    StatusOr<StepCommand> command = StepCommand::Parse(bytes);
    UC_CHECK(command.ok(), "rank %d: %s", world.rank(), command.status().ToString().c_str());
    ++step_;
    std::optional<StepResult> result = Execute(*command);
    if (result.has_value() && command->kind == StepCommand::Kind::kExecute) {
      if (!result->tokens.empty()) {
        pg.Send(result->tokens.data(), result->tokens.size() * sizeof(int32_t), 0, kResultTag);
      }
      if (result->has_logprobs) {
        const int64_t size = static_cast<int64_t>(result->logprobs.size());
        pg.Send(&size, sizeof(size), 0, kResultTag);
        if (size > 0) pg.Send(result->logprobs.data(), size, 0, kResultTag);
      }
      SendCaptures(*result, pg);
    } else if (result.has_value() && command->kind == StepCommand::Kind::kForward) {
      if (command->output == StepCommand::Output::kSample) {
        pg.Send(&result->token, sizeof(result->token), 0, kResultTag);
      } else {
        pg.Send(result->logits.raw(), result->logits.nbytes(), 0, kResultTag);
      }
    }
    const int64_t ack = step_;
    pg.Send(&ack, sizeof(ack), 0, kAckTag);
    if (command->kind == StepCommand::Kind::kShutdown) return;
  }
}

void Worker::Shutdown() {
  if (!is_driver() || shut_down_) return;
  shut_down_ = true;
  StepCommand command;
  command.kind = StepCommand::Kind::kShutdown;
  Run(command);
}

}  // namespace uc::worker
