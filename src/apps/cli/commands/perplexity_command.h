// File: perplexity_command.h
// -----------------------------------------------------------------------------
// `undercurrent perplexity --model M --file TEXT [--ctx 512] [--chunks K]`: the model's
// perplexity on a text, by llama.cpp's method (engine/perplexity.h: chunks of --ctx tokens,
// each evaluated alone, the second half of each scored), so the number compares directly with
// `llama-perplexity -m M -f TEXT -c 512`. Prints the running estimate after each chunk on
// stderr and `Final estimate: PPL = X +/- E` on stdout (or one JSON object with --json).
// One process (no --tp / --pp). Exit 0 on success, 1 on bad input (named), 2 on a usage error.
#pragma once

#include <CLI/CLI.hpp>

namespace uc::cli {

void AddPerplexityCommand(CLI::App& app);

}  // namespace uc::cli
