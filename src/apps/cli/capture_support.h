// File: capture_support.h
// -----------------------------------------------------------------------------
// The pieces of `undercurrent capture` (capture_command.h) below the command itself: reading
// the prompts file with its labels, the fingerprint members that tie a dataset to its inputs,
// serving prompts through the engine in file order, turning records into dataset rows, and
// the progress display.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/fingerprint.h"
#include "base/status.h"
#include "engine/llm.h"
#include "engine/model_fingerprint.h"
#include "engine/prompts_file.h"
#include "probe/datasets/dataset_writer.h"
#include "probe/probes/probe.h"

namespace uc::cli {

// The prompts file, read once (engine/prompts_file.h).
using engine::PromptSet;
using engine::ReadPromptSet;

// 64-bit FNV-1a (base/fingerprint.h); Hex as 16 lowercase digits.
using uc::Fnv1a64;
inline std::string Hex(uint64_t v) { return Hex64(v); }

// The sampling defaults of the command line, as stored in a dataset fingerprint.
nlohmann::json SamplingJson(const worker::SamplingParams& p);
// What identifies the model for a dataset (with the context length, which bounds prompts).
using engine::ModelFingerprint;

// Runs requests [begin, end) through `engine` in waves: the requests of wave w, indices
// [w * wave, (w + 1) * wave), are added together to an idle engine and run to completion
// before the next wave starts. Continuous batching works inside a wave; the wave boundaries
// make every step's batch a function of the prompts file and the engine flags alone, so a
// resumed run computes bit-for-bit the activations an uninterrupted one does (the kernels'
// rounding depends on the batch). The wave holding `begin` starts at its first prompt; prompts
// before `begin` are run again but not delivered. Each request goes to `deliver` in file order
// once its wave is done: its final output, or (output null) the status that rejected it. A
// failing `deliver` stops the run and is returned. `after_step` (may be null) runs after
// every engine step with the number of requests finished in this call so far.
using Deliver =
    std::function<Status(int64_t index, const Status& rejected, engine::RequestOutput* output)>;
Status ServeInWaves(engine::LLMEngine& engine, const std::vector<engine::GenerateRequest>& requests,
                    int64_t begin, int64_t wave, const Deliver& deliver,
                    const std::function<void(int64_t finished)>& after_step);

// One prompt's dataset rows from its records (already in dataset order) and final output: the
// token of each row comes from the prompt or the generated ids.
probe::DatasetPrompt MakeDatasetPrompt(int64_t index, const engine::GenerateRequest& request,
                                       const nlohmann::json& label,
                                       std::vector<probe::ActivationRecord> records,
                                       const engine::RequestOutput& output,
                                       const tokenizer::Tokenizer& tokenizer);

// Progress on stderr: a bar redrawn in place on a terminal ("auto" on a TTY, or "bar"), else a
// plain line every few seconds ("lines"), or nothing ("none"); with prompts/s and records/s of
// this run. `skipped` prompts were done by an earlier run.
class CaptureProgress {
 public:
  CaptureProgress(const std::string& mode, int64_t total, int64_t skipped);
  // Redraws when due (every 0.1 s for the bar, 5 s for lines), or now when `force`.
  void Update(int64_t prompts_done, int64_t records, int shards, bool force = false);
  // Ends the bar's line.
  void Done();

 private:
  using Clock = std::chrono::steady_clock;
  int64_t total_;
  int64_t skipped_;
  Clock::time_point start_;
  Clock::time_point last_;
  bool bar_ = false;
  bool enabled_ = true;
};

}  // namespace uc::cli
