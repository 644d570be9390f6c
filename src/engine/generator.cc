#include "engine/generator.h"

#include <algorithm>
#include <cstring>

#include "base/logging.h"
#include "engine/scheduling/kv_cache_plan.h"
#include "engine/stop_matcher.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/loaders.h"
#include "worker/sampler.h"

namespace uc::engine {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

bool Contains(const std::vector<int32_t>& ids, int32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
  }
  return "?";
}

double GenerationTimings::prefill_tokens_per_second() const {
  return prefill_seconds > 0 ? prompt_tokens / prefill_seconds : 0.0;
}

double GenerationTimings::decode_tokens_per_second() const {
  return decode_seconds > 0 && generated_tokens > 1 ? (generated_tokens - 1) / decode_seconds : 0.0;
}

StatusOr<int> ResolveMaxModelLen(const models::ModelConfig& config, int requested) {
  if (requested < 0) {
    return InvalidArgumentError("max_model_len must be >= 0, got " + std::to_string(requested));
  }
  int len = requested > 0 ? requested : config.max_position_embeddings;
  if (len > config.max_position_embeddings && config.learned_positions) {
    return InvalidArgumentError("max_model_len " + std::to_string(len) + " exceeds the " +
                                std::to_string(config.max_position_embeddings) +
                                " positions the model has learned embeddings for "
                                "(max_position_embeddings); use at most that");
  }
  if (len > config.max_position_embeddings) {
    UC_LOG(WARNING) << "max_model_len " << len << " exceeds the model's max_position_embeddings "
                    << config.max_position_embeddings;
  }
  return len;
}

Status CheckTokenizerFits(const tokenizer::Tokenizer& tokenizer, const models::ModelConfig& config,
                          const std::filesystem::path& model_path) {
  if (tokenizer.vocab_size() <= config.vocab_size) return OkStatus();
  return InvalidArgumentError(
      model_path.string() + ": tokenizer has " + std::to_string(tokenizer.vocab_size()) +
      " tokens but the model's vocab_size is " + std::to_string(config.vocab_size));
}

StatusOr<std::unique_ptr<tokenizer::Tokenizer>> LoadTokenizerFor(
    const models::Checkpoint& checkpoint, const std::optional<fs::path>& override_path) {
  if (override_path.has_value()) {
    if (checkpoint.format == models::CheckpointFormat::kLlama2c ||
        override_path->extension() == ".bin") {
      return tokenizer::LoadLlama2cTokenizer(*override_path, checkpoint.config.vocab_size);
    }
    return tokenizer::LoadTokenizer(*override_path);
  }
  switch (checkpoint.format) {
    case models::CheckpointFormat::kGguf:
      return tokenizer::LoadGgufTokenizer(*checkpoint.gguf);
    case models::CheckpointFormat::kHuggingFace:
      return tokenizer::LoadTokenizer(checkpoint.path);
    case models::CheckpointFormat::kLlama2c: {
      const fs::path dir = checkpoint.path.parent_path();
      for (const fs::path& name :
           {fs::path("tokenizer.bin"),
            fs::path("tok" + std::to_string(checkpoint.config.vocab_size) + ".bin")}) {
        if (fs::exists(dir / name)) {
          return tokenizer::LoadLlama2cTokenizer(dir / name, checkpoint.config.vocab_size);
        }
      }
      return NotFoundError(checkpoint.path.string() +
                           ": no tokenizer beside this llama2.c checkpoint (looked for "
                           "tokenizer.bin and tok" +
                           std::to_string(checkpoint.config.vocab_size) +
                           ".bin); pass one with --tokenizer");
    }
  }
  return InternalError("unknown checkpoint format");
}

StatusOr<std::unique_ptr<Generator>> Generator::Open(const GeneratorOptions& options) {
  DeploymentOptions deployment_options;
  deployment_options.model_path = options.model_path;
  deployment_options.num_threads = options.num_threads;
  deployment_options.load = options.load;
  UC_ASSIGN_OR_RETURN(std::unique_ptr<Deployment> deployment,
                      Deployment::Create(deployment_options));
  return OpenDriver(options, std::move(deployment));
}

StatusOr<std::unique_ptr<Generator>> Generator::OpenDriver(const GeneratorOptions& options,
                                                           std::unique_ptr<Deployment> deployment) {
  UC_CHECK(deployment != nullptr && deployment->is_driver(), "OpenDriver needs rank 0");
  std::unique_ptr<Generator> gen(new Generator());
  gen->deployment_ = std::move(deployment);
  const Status status = gen->Init(options);
  if (!status.ok()) {
    gen->deployment_->worker().Shutdown();
    return status;
  }
  return gen;
}

Generator::~Generator() {
  if (deployment_ != nullptr) deployment_->worker().Shutdown();
}

Status Generator::Init(const GeneratorOptions& options) {
  UC_ASSIGN_OR_RETURN(tokenizer_, LoadTokenizerFor(checkpoint(), options.tokenizer_path));
  const models::ModelConfig& config = this->config();
  UC_RETURN_IF_ERROR(CheckTokenizerFits(*tokenizer_, config, options.model_path));
  prefill_chunk_ = std::max(1, options.prefill_chunk);
  // The engine's decision for one sequence at its default block size: the same budget gives
  // the same context (the cache here is one contiguous sequence, allocated per request).
  KvCacheRequest request;
  request.max_model_len = options.max_model_len;
  request.kv_cache_bytes = options.kv_cache_bytes;
  request.block_size = kDefaultKvBlockSize;
  request.max_chunk = prefill_chunk_;
  UC_ASSIGN_OR_RETURN(const KvCachePlan plan, PlanKvCacheFor(*deployment_, request));
  if (plan.fitted) {
    UC_LOG(WARNING) << plan.note;
  }
  max_model_len_ = plan.max_model_len;
  return OkStatus();
}

Status Generator::CheckPrompt(const std::vector<int32_t>& ids) const {
  if (ids.empty()) return InvalidArgumentError("the prompt is empty (no tokens)");
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= config().vocab_size) {
      return InvalidArgumentError("prompt token " + std::to_string(i) + " has id " +
                                  std::to_string(ids[i]) + ", outside the vocabulary [0, " +
                                  std::to_string(config().vocab_size) + ")");
    }
  }
  if (static_cast<int>(ids.size()) > max_model_len_) {
    return InvalidArgumentError("the prompt has " + std::to_string(ids.size()) +
                                " tokens, more than the context length " +
                                std::to_string(max_model_len_) + " (see --max-model-len)");
  }
  return OkStatus();
}

int32_t Generator::Prefill(const std::vector<int32_t>& ids, int capacity,
                           const worker::SamplingParams& params) {
  worker::Worker& worker = deployment_->worker();
  worker::StepCommand start;
  start.kind = worker::StepCommand::Kind::kStartSequence;
  start.capacity = capacity;
  start.params = params;
  worker.Run(start);
  int32_t token = -1;
  for (size_t begin = 0; begin < ids.size(); begin += prefill_chunk_) {
    const size_t n = std::min<size_t>(prefill_chunk_, ids.size() - begin);
    worker::StepCommand chunk;
    chunk.ids.assign(ids.begin() + begin, ids.begin() + begin + n);
    for (size_t i = 0; i < n; ++i) chunk.positions.push_back(static_cast<int32_t>(begin + i));
    const bool last = begin + n == ids.size();
    chunk.output = last ? worker::StepCommand::Output::kSample : worker::StepCommand::Output::kNone;
    token = worker.Run(chunk).token;
  }
  return token;
}

StatusOr<GenerationResult> Generator::Generate(std::string_view prompt,
                                               const worker::SamplingParams& params,
                                               const TextCallback& on_text) {
  std::vector<int32_t> ids =
      tokenizer_->Encode(prompt, tokenizer_->add_bos_token(), /*parse_special=*/true);
  return GenerateFromIds(std::move(ids), params, on_text);
}

StatusOr<GenerationResult> Generator::GenerateFromIds(std::vector<int32_t> prompt_ids,
                                                      const worker::SamplingParams& params,
                                                      const TextCallback& on_text) {
  UC_RETURN_IF_ERROR(params.Validate());
  UC_RETURN_IF_ERROR(CheckPrompt(prompt_ids));
  GenerationResult result;
  result.prompt_ids = std::move(prompt_ids);
  const int prompt_len = static_cast<int>(result.prompt_ids.size());
  const int budget = std::min(params.max_tokens, max_model_len_ - prompt_len);
  result.timings.prompt_tokens = prompt_len;
  result.stop_reason = budget < params.max_tokens ? "max_model_len" : "max_tokens";
  if (budget <= 0) return result;

  std::vector<int32_t> eos_ids;
  if (!params.ignore_eos) {
    for (int id : config().eos_token_ids) eos_ids.push_back(id);
    for (int32_t id : tokenizer_->stop_ids()) eos_ids.push_back(id);
  }
  // Generated text that starts right after BOS is the start of the visible text.
  const bool at_start = prompt_len == 1 && result.prompt_ids[0] == tokenizer_->bos_id();
  tokenizer::IncrementalDecoder decoder(*tokenizer_, at_start);
  StopMatcher stops(params.stop);

  const auto start = Clock::now();
  int32_t id = Prefill(result.prompt_ids, prompt_len + budget, params);
  result.timings.prefill_seconds = SecondsSince(start);
  const auto decode_start = Clock::now();
  int32_t position = prompt_len;
  while (true) {
    result.output_ids.push_back(id);
    const bool is_eos = Contains(eos_ids, id);
    const bool is_stop_id = Contains(params.stop_token_ids, id);
    std::string text = (is_eos || is_stop_id) ? decoder.Flush() : decoder.Add(id);
    std::string released = stops.Push(text);
    if (is_eos || is_stop_id || stops.stopped()) {
      result.finish_reason = FinishReason::kStop;
      result.stop_reason = stops.stopped() ? "stop:" + stops.matched()
                           : is_stop_id    ? "stop_token:" + std::to_string(id)
                                           : "eos";
    }
    const bool last = result.finish_reason == FinishReason::kStop ||
                      static_cast<int>(result.output_ids.size()) >= budget;
    if (last && !stops.stopped()) released += stops.Push(decoder.Flush()) + stops.Flush();
    if (on_text && !released.empty() && !on_text(released)) {
      result.finish_reason = FinishReason::kAbort;
      result.stop_reason = "callback";
      break;
    }
    if (last) break;
    worker::StepCommand step;
    step.ids = {id};
    step.positions = {position};
    id = deployment_->worker().Run(step).token;
    ++position;
  }
  result.text = stops.released();
  result.timings.decode_seconds = SecondsSince(decode_start);
  result.timings.generated_tokens = static_cast<int>(result.output_ids.size());
  return result;
}

StatusOr<Tensor> Generator::ScoreAllPositions(const std::vector<int32_t>& ids) {
  UC_RETURN_IF_ERROR(CheckPrompt(ids));
  worker::Worker& worker = deployment_->worker();
  worker::StepCommand start;
  start.kind = worker::StepCommand::Kind::kStartSequence;
  start.capacity = static_cast<int32_t>(ids.size());
  worker.Run(start);
  const int64_t n = static_cast<int64_t>(ids.size());
  Tensor logits = Tensor::Empty({n, config().vocab_size}, DType::kF32);
  for (int64_t begin = 0; begin < n; begin += prefill_chunk_) {
    const int64_t len = std::min<int64_t>(prefill_chunk_, n - begin);
    worker::StepCommand chunk;
    chunk.ids.assign(ids.begin() + begin, ids.begin() + begin + len);
    for (int64_t i = 0; i < len; ++i) chunk.positions.push_back(static_cast<int32_t>(begin + i));
    chunk.output = worker::StepCommand::Output::kAllLogits;
    const worker::StepResult result = worker.Run(chunk);
    std::memcpy(logits.row(begin), result.logits.raw(),
                static_cast<size_t>(result.logits.nbytes()));
  }
  return logits;
}

}  // namespace uc::engine
