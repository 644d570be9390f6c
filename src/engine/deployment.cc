#include "engine/deployment.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "distributed/stage_partition.h"
#include "distributed/thread_process_group.h"

namespace uc::engine {
namespace {

// What every rank tells every other after loading: where it sits and whether it loaded.
struct RankRecord {
  int32_t ok = 0;
  int32_t rank = 0, tp_rank = 0, pp_rank = 0, layer_start = 0, layer_end = 0;
  char host[64] = {};
  char error[1024] = {};
};

std::string Hostname() {
  char name[64] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

void CopyString(const std::string& s, char* dst, size_t size) {
  const size_t n = std::min(s.size(), size - 1);
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

worker::RankInfo ToInfo(const RankRecord& r) {
  return {r.rank, r.tp_rank, r.pp_rank, r.layer_start, r.layer_end, r.host};
}

}  // namespace

Status ValidateParallelism(const models::ModelConfig& c, int tp, int pp,
                           const std::string& source) {
  auto fail = [&](const std::string& what) { return InvalidArgumentError(source + ": " + what); };
  if (tp < 1 || pp < 1) return fail("tensor and pipeline parallel sizes must be >= 1");
  if (c.num_attention_heads % tp != 0) {
    return fail("num_attention_heads " + std::to_string(c.num_attention_heads) +
                " is not divisible by tensor_parallel_size " + std::to_string(tp));
  }
  if (c.num_key_value_heads % tp != 0 && tp % c.num_key_value_heads != 0) {
    return fail("num_key_value_heads " + std::to_string(c.num_key_value_heads) +
                " and tensor_parallel_size " + std::to_string(tp) + " do not divide one another");
  }
  // The MLP's intermediate dimension splits in whole quantization blocks, as evenly as they
  // allow (layers::SplitInUnits); the model's loader names a tensor whose blocks are too few.
  if (c.intermediate_size > 0 && c.intermediate_size < tp) {
    return fail("intermediate_size " + std::to_string(c.intermediate_size) +
                " is smaller than tensor_parallel_size " + std::to_string(tp));
  }
  // The vocabulary splits in ceil(vocab_size / tp) rows a rank, the last ranks fewer (GPT-2's
  // 50257, Granite's 49155; layers::VocabShardFor).
  if (c.vocab_size < tp) {
    return fail("vocab_size " + std::to_string(c.vocab_size) +
                " is smaller than tensor_parallel_size " + std::to_string(tp));
  }
  if (pp > c.num_hidden_layers) {
    return fail("pipeline_parallel_size " + std::to_string(pp) + " exceeds num_hidden_layers " +
                std::to_string(c.num_hidden_layers));
  }
  return OkStatus();
}

Deployment::~Deployment() {
  worker_.reset();
  model_.reset();
  state_.reset();
}

StatusOr<std::unique_ptr<Deployment>> Deployment::Create(const DeploymentOptions& options,
                                                         distributed::Backend* backend) {
  std::unique_ptr<Deployment> d(new Deployment());
  if (backend == nullptr) {
    d->local_backend_ = std::make_unique<distributed::ThreadBackend>(
        std::make_shared<distributed::ThreadGroupState>(1), 0);
    backend = d->local_backend_.get();
  }
  distributed::ParallelConfig config;
  config.tensor_parallel_size = options.tensor_parallel_size;
  config.pipeline_parallel_size = options.pipeline_parallel_size;
  UC_RETURN_IF_ERROR(distributed::ValidateParallelConfig(config, backend->world_size()));
  UC_ASSIGN_OR_RETURN(distributed::ParallelState state,
                      distributed::ParallelState::Create(config, *backend));
  d->state_ = std::make_unique<distributed::ParallelState>(std::move(state));

  RankRecord mine;
  mine.rank = d->state_->world_group().rank();
  mine.tp_rank = d->state_->tp_group().rank_in_group();
  mine.pp_rank = d->state_->pp_group().rank_in_group();
  CopyString(Hostname(), mine.host, sizeof(mine.host));
  const Status loaded = d->Load(options);
  mine.ok = loaded.ok();
  if (d->model_ != nullptr) {
    mine.layer_start = d->model_->parallel().layer_start;
    mine.layer_end = d->model_->parallel().layer_end;
  }
  if (!loaded.ok()) CopyString(loaded.message(), mine.error, sizeof(mine.error));

  // Every rank learns every rank's outcome, so a failure anywhere fails everywhere.
  const int world = d->state_->world_group().world_size();
  std::vector<RankRecord> all(world);
  if (world == 1) {
    all[0] = mine;
  } else {
    d->state_->world_group().process_group()->AllGather(&mine, sizeof(mine), all.data());
  }
  std::string errors;
  std::vector<worker::RankInfo> infos;
  for (const RankRecord& r : all) {
    infos.push_back(ToInfo(r));
    if (r.ok) continue;
    if (!errors.empty()) errors += "; ";
    errors += world == 1 ? std::string(r.error) : infos.back().Describe() + ": " + r.error;
  }
  if (!errors.empty()) return InvalidArgumentError(errors);
  d->worker_ = std::make_unique<worker::Worker>(d->model_.get(), d->state_.get(), d->pool_.get(),
                                                std::move(infos), options.step_timeout_seconds);
  return d;
}

Status Deployment::Load(const DeploymentOptions& options) {
  UC_ASSIGN_OR_RETURN(checkpoint_, models::OpenCheckpoint(options.model_path));
  const models::ModelConfig& config = checkpoint_.config;
  const int tp = options.tensor_parallel_size, pp = options.pipeline_parallel_size;
  UC_RETURN_IF_ERROR(ValidateParallelism(config, tp, pp, options.model_path.string()));
  UC_ASSIGN_OR_RETURN(auto stages,
                      distributed::PartitionLayers(config.num_hidden_layers, pp,
                                                   distributed::PpLayerPartitionFromEnv()));
  models::ParallelContext parallel;
  parallel.tp_group = &state_->tp_group();
  parallel.pp_rank = state_->pp_group().rank_in_group();
  parallel.pp_size = pp;
  parallel.layer_start = stages[parallel.pp_rank].first;
  parallel.layer_end = stages[parallel.pp_rank].second;
  UC_ASSIGN_OR_RETURN(model_, models::CausalLM::Load(checkpoint_, parallel, options.load));
  int threads = options.num_threads;
  if (threads <= 0) {
    // The ranks share the host's cores (one host, or ranks spread evenly over hosts).
    threads = std::max(1, ThreadPool::HardwareConcurrency() / state_->world_group().world_size());
  }
  pool_ = std::make_unique<ThreadPool>(threads);
  return OkStatus();
}

}  // namespace uc::engine
