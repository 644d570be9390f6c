// File: capture_command.h
// -----------------------------------------------------------------------------
// `undercurrent capture`: run every prompt of a JSONL file through the batched engine (any
// TP/PP topology) and write the activations a spec names into a resumable safetensors dataset
// (format in probe/dataset_writer.h) that Python reads with numpy alone.
//
//   undercurrent capture --model M --spec S.yaml --prompts P.jsonl --out DIR
//       [--dtype float32|bf16] [--shard-size 64MiB] [--tp N --pp N] [engine/sampling flags]
//       [--progress auto|bar|lines|none] [--json] [--bench]
//
// Rerunning the same command after a crash or Ctrl-C resumes: prompts already committed are
// skipped and the result is the dataset an uninterrupted run writes. A sampled prompt (with
// temperature > 0) that has no seed gets one derived from its id, so every capture is
// reproducible. --bench first generates the same prompts with no capture, then captures, and
// reports both throughputs (a ratio measured in the same run).
#pragma once

#include <CLI/CLI.hpp>

namespace uc::cli {

// Registers the subcommand on `app`. argc/argv are the process's, for re-executing under mpirun.
void AddCaptureCommand(CLI::App& app, int argc, char** argv);

}  // namespace uc::cli
