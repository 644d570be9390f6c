#include "engine/batch_benchmark.h"

#include <chrono>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace uc::engine {

StatusOr<BatchThroughput> MeasureBatch(LLMEngine& engine, const BatchShape& shape, uint32_t seed,
                                       const std::function<RequestSteering(int b)>& steering) {
  using Clock = std::chrono::steady_clock;
  std::mt19937 rng(seed);
  const int vocab = engine.config().vocab_size;
  const Clock::time_point start = Clock::now();
  for (int b = 0; b < shape.batch; ++b) {
    // Id 1 first (BOS in Llama vocabularies), then ids past the usual specials.
    std::vector<int32_t> ids = {1};
    for (int i = 1; i < shape.prompt_tokens; ++i) {
      ids.push_back(static_cast<int32_t>(3 + rng() % static_cast<uint32_t>(vocab - 3)));
    }
    worker::SamplingParams params;
    params.temperature = 0.0f;
    params.max_tokens = shape.max_tokens;
    params.ignore_eos = true;
    UC_RETURN_IF_ERROR(engine.AddRequest("bench-" + std::to_string(seed) + "-" + std::to_string(b),
                                         Prompt::Ids(ids), params,
                                         steering ? steering(b) : RequestSteering()));
  }
  BatchThroughput result;
  result.prompt_tokens = int64_t{shape.batch} * shape.prompt_tokens;
  std::set<std::string> started;  // requests that have their first token
  Clock::time_point prefill_done = start;
  while (engine.HasUnfinished()) {
    const std::vector<RequestOutput> outputs = engine.Step();
    const bool decoding = static_cast<int>(started.size()) == shape.batch;
    for (const RequestOutput& out : outputs) {
      const auto n = static_cast<int64_t>(out.new_token_ids.size());
      result.generated_tokens += n;
      if (decoding) result.decode_tokens += n;
      if (n > 0) started.insert(out.request_id);
    }
    if (!decoding && static_cast<int>(started.size()) == shape.batch) prefill_done = Clock::now();
  }
  const Clock::time_point end = Clock::now();
  result.prefill_seconds = std::chrono::duration<double>(prefill_done - start).count();
  result.decode_seconds = std::chrono::duration<double>(end - prefill_done).count();
  return result;
}

}  // namespace uc::engine
