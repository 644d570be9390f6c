#include "worker/worker.h"

#include <cstdio>
#include <cstring>

#include "base/logging.h"

namespace uc::worker {
namespace {

constexpr int kResultTag = 101;
constexpr int kAckTag = 102;

class ByteWriter {
 public:
  template <typename T>
  void Put(const T& v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void PutInts(const std::vector<int32_t>& v) {
    Put<uint32_t>(static_cast<uint32_t>(v.size()));
    out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int32_t));
  }
  void PutString(const std::string& s) {
    Put<uint32_t>(static_cast<uint32_t>(s.size()));
    out_ += s;
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class ByteReader {
 public:
  explicit ByteReader(const std::string& in) : in_(in) {}
  template <typename T>
  bool Get(T& v) {
    if (pos_ + sizeof(T) > in_.size()) return false;
    std::memcpy(&v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool GetInts(std::vector<int32_t>& v) {
    uint32_t n = 0;
    if (!Get(n) || pos_ + size_t{n} * sizeof(int32_t) > in_.size()) return false;
    v.resize(n);
    std::memcpy(v.data(), in_.data() + pos_, n * sizeof(int32_t));
    pos_ += n * sizeof(int32_t);
    return true;
  }
  bool GetString(std::string& s) {
    uint32_t n = 0;
    if (!Get(n) || pos_ + n > in_.size()) return false;
    s.assign(in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  const std::string& in_;
  size_t pos_ = 0;
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
                  r.Get(c.output) && r.done();
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
  distributed::GroupCoordinator& pp = state_->pp_group();
  models::IntermediateTensors input, output;
  if (!parallel.is_first_stage()) {
    std::map<std::string, Tensor> received = pp.RecvTensorDict(pp.rank_in_group() - 1);
    input.hidden_states = received["hidden_states"];
    input.residual = received["residual"];
  }
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
  if (!parallel.is_last_stage()) {
    pp.SendTensorDict({{"hidden_states", output.hidden_states}, {"residual", output.residual}},
                      pp.rank_in_group() + 1);
  }
  if (!is_result_rank() || !want_logits) return;
  has_result = true;
  if (command.output == StepCommand::Output::kSample) {
    UC_CHECK(sampler_ != nullptr, "kForward/kSample before kStartSequence");
    result.token = sampler_->Sample({logits.data<float>(), static_cast<size_t>(logits.numel())});
  } else {
    result.logits = logits;
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
    if (result.has_value() && command->kind == StepCommand::Kind::kForward) {
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
