// File: llm.h
// -----------------------------------------------------------------------------
// LLM: generate for many prompts at once, for embedders and the CLI (vLLM's `LLM` class). All
// prompts go into one LLMEngine and are served by continuous batching; results come back as
// each request finishes (through `on_finished`) and, in input order, from Generate.
//
//   UC_ASSIGN_OR_RETURN(auto llm, LLM::Open({.model_path = "models/stories260K"}));
//   std::vector<GenerateRequest> batch = {{"a", Prompt::Text("Once"), params}, ...};
//   for (const auto& result : llm->Generate(batch)) ...
//
// A request that fails validation gets its error in its result and never disturbs the others.
// Thread-compatible: one Generate at a time.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/llm_engine.h"

namespace uc::engine {

struct GenerateRequest {
  std::string id;
  Prompt prompt;
  worker::SamplingParams params;
  RequestSteering steering = {};  // per-request steering (none by default)
};

struct GenerateResult {
  std::string id;
  Status status;         // not OK: the request was rejected; `output` is empty
  RequestOutput output;  // the final output (finished = true) when status is OK
};

class LLM {
 public:
  static StatusOr<std::unique_ptr<LLM>> Open(const EngineOptions& options);
  // Takes an engine opened on the driver of a multi-rank deployment.
  explicit LLM(std::unique_ptr<LLMEngine> engine) : engine_(std::move(engine)) {}

  // Runs every request to completion. `on_finished` (may be null) sees each result as its
  // request finishes (rejected ones first); the return value lists them in input order.
  std::vector<GenerateResult> Generate(
      const std::vector<GenerateRequest>& requests,
      const std::function<void(const GenerateResult&)>& on_finished = nullptr);

  LLMEngine& engine() { return *engine_; }

 private:
  std::unique_ptr<LLMEngine> engine_;
};

}  // namespace uc::engine
