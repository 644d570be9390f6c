// File: bench_command.h
// -----------------------------------------------------------------------------
// `undercurrent bench --model PATH [--batch N] [--prompt-len N] [--max-tokens N]
// [--repetitions N] [--spec FILE] [--format text|json]`: prefill and decode throughput of one
// batch of random prompts through the serving engine (engine/batch_benchmark.h), the median of
// --repetitions runs after a warm-up, optionally with a probe spec attached so its cost shows.
// Token ids are random, so a model without a tokenizer works (give --tokenizer for one that
// ships none). Exit 0 on success, 1 when the model or spec cannot be loaded, 2 on a usage
// error.
#pragma once

#include <CLI/CLI.hpp>

namespace uc::cli {

// Registers the subcommand on `app`.
void AddBenchCommand(CLI::App& app);

}  // namespace uc::cli
