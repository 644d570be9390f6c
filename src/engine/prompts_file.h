// File: prompts_file.h
// -----------------------------------------------------------------------------
// The JSONL prompt files of `undercurrent generate --prompts` (and later `capture`): one JSON
// object per line with
//   id          string or integer (required, unique)
//   prompt      string — or prompt_ids, an array of token ids (exactly one of the two)
//   max_tokens, temperature, top_k, top_p, min_p, seed, stop (string or array of strings),
//   stop_token_ids, ignore_eos   optional; default to the command line's values
//   label       optional, any JSON value (kept for datasets; ignored by generate)
// Blank lines are skipped. Every problem in the file is reported at once, each as
// `FILE:LINE: ...` naming the field, with the nearest known field for a misspelt one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/llm.h"

namespace uc::engine {

// The largest prompts file read (it is parsed in memory).
inline constexpr int64_t kMaxPromptsFileBytes = int64_t{4} << 30;

// Reads and parses a prompts file: a regular file (a FIFO or device is refused, naming it) of
// at most kMaxPromptsFileBytes.
StatusOr<std::vector<GenerateRequest>> ReadPromptsFile(const std::filesystem::path& path,
                                                       const worker::SamplingParams& defaults);
// Parses the same lines from memory; `name` is used in messages.
StatusOr<std::vector<GenerateRequest>> ParsePrompts(std::string_view text, const std::string& name,
                                                    const worker::SamplingParams& defaults);

// A prompts file read once (`capture`, `calibrate`, the Python package's calibrate): its
// requests, each line's label, and a hash of its bytes.
struct PromptSet {
  std::vector<GenerateRequest> requests;
  std::vector<nlohmann::json> labels;  // [requests.size()]; null where a line has none
  uint64_t hash = 0;                   // FNV-1a of the file's bytes
};

// Reads and validates the prompts file (ParsePrompts: every problem as FILE:LINE). A sampled
// request (temperature > 0) without a seed gets one derived from its id, so that a rerun
// regenerates the same tokens.
StatusOr<PromptSet> ReadPromptSet(const std::string& path, const worker::SamplingParams& defaults);

// "512MiB", "2GiB", "1.5G", "1000000" (bytes) -> bytes. InvalidArgument otherwise.
StatusOr<int64_t> ParseByteSize(std::string_view text);

}  // namespace uc::engine
