// File: steer_vector_command.h
// -----------------------------------------------------------------------------
// `undercurrent steer-vector --model M --positive P.jsonl --negative N.jsonl [--layers A-B]
// [--method mean_diff|pca_diff] --out v.gguf`: computes a contrastive steering vector per layer
// from the residual stream at the last prompt token of each example (what a residual_stream
// probe at that layer reads, and where the vector is added back), and writes llama.cpp's
// control-vector GGUF (direction.N for block N), which `--control-vector`, `--steering-module`,
// a spec's `steering:` entry, llama.cpp and repeng all read.
//
// The prompt files are `generate --prompts` JSONL (prompt or prompt_ids per line; other fields
// ignored). mean_diff: mean(positive) - mean(negative). pca_diff (repeng's): the first principal
// component of the line-paired differences, unit length, signed so that positives project
// higher. Exit 0 on success, 1 on bad input (named), 2 on a usage error.
#pragma once

#include <CLI/CLI.hpp>

namespace uc::cli {

void AddSteerVectorCommand(CLI::App& app);

}  // namespace uc::cli
