// File: batch_benchmark.h
// -----------------------------------------------------------------------------
// Throughput of one batch through an LLMEngine, for benchmarks (`undercurrent bench`,
// bench/probe_bench): `batch` requests of `prompt_tokens` random ids each, all added at once,
// greedy, `max_tokens` generated each with EOS ignored, stepped until all finish.
//
//   prefill tokens/s = batch × prompt_tokens / (time until every request has its first token)
//   decode tokens/s  = tokens generated after that point / (time from that point to the end)
//
// Each request's first token comes out of its prefill. When the prompts take several steps
// (chunked prefill), requests that started early already decode alongside the others' prefill;
// that work is counted in the prefill time. Prompts are seeded by `seed`, so runs compare.
// Thread-compatible: one measurement at a time on an engine.
#pragma once

#include <cstdint>
#include <functional>

#include "engine/llm_engine.h"

namespace uc::engine {

struct BatchShape {
  int batch = 8;
  int prompt_tokens = 128;
  int max_tokens = 32;
};

struct BatchThroughput {
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
  int64_t prompt_tokens = 0;     // batch × prompt_tokens
  int64_t generated_tokens = 0;  // all requests, including each first token
  int64_t decode_tokens = 0;     // generated after every request had its first token
  double prefill_tokens_per_second() const {
    return prefill_seconds > 0 ? prompt_tokens / prefill_seconds : 0.0;
  }
  double decode_tokens_per_second() const {
    return decode_seconds > 0 ? decode_tokens / decode_seconds : 0.0;
  }
};

// Runs one batch to completion. REQUIRES: the engine has no unfinished requests; shape values
// >= 1 and prompt_tokens + max_tokens within the engine's context length. Fails (with the
// engine's message) when a request is rejected.
// `steering` (may be null) gives request b's steering.
StatusOr<BatchThroughput> MeasureBatch(
    LLMEngine& engine, const BatchShape& shape, uint32_t seed,
    const std::function<RequestSteering(int b)>& steering = nullptr);

}  // namespace uc::engine
