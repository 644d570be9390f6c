// File: quantize_command.h
// -----------------------------------------------------------------------------
// `undercurrent quantize IN OUT --type T [--force] [--threads N]`: converts a GGUF file or a
// Hugging Face directory (Llama family, SentencePiece tokenizer.model) into a GGUF file of type
// q4_k_m, q5_k_m, q6_k, q8_0, q4_0, q4_1, q5_0, q5_1, f16, bf16 or f32, with llama.cpp's
// per-tensor type mix and ggml's reference quantizers byte for byte (convert/quantize.h).
// Prints one line per output tensor type (count, bytes) and the total. An existing OUT is
// replaced only with --force; the file is written as OUT.tmp and renamed, so a failure never
// leaves a partial OUT. Exit 0 on success, 1 on bad input (named), 2 on a usage error.
#pragma once

#include <CLI/CLI.hpp>

namespace uc::cli {

void AddQuantizeCommand(CLI::App& app);

}  // namespace uc::cli
