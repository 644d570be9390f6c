// File: batching_workload.h
// -----------------------------------------------------------------------------
// The continuous-batching workload shared by the engine's integration and multi-process tests:
// many requests of mixed prompt lengths (several longer than a prefill chunk), mixed output
// lengths, greedy and seeded sampling, stop strings — and its oracle, each request run alone
// through the one-request Generator.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "engine/generator.h"
#include "engine/llm.h"

namespace uc::testing {

// `n` requests for the bundled stories260K model.
std::vector<engine::GenerateRequest> BatchingWorkload(int n);

// Each request alone, in order, through `solo` (text prompts tokenized the same way).
std::map<std::string, engine::GenerationResult> RunAlone(
    engine::Generator& solo, const std::vector<engine::GenerateRequest>& requests);

// Expects every batched result to equal the request run alone: the same generated ids, text
// and finish reason.
void ExpectSameAsAlone(const std::vector<engine::GenerateResult>& batched,
                       const std::map<std::string, engine::GenerationResult>& alone);

}  // namespace uc::testing
