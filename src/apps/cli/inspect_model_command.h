// File: inspect_model_command.h
// -----------------------------------------------------------------------------
// `undercurrent inspect-model PATH [--format text|json] [--emit-spec FILE]`: what a model is
// (architecture, layers, hidden size, heads, KV heads, vocabulary) and what a probe spec can
// capture from it: residual_stream, attn_out and mlp_out at layers 0..L-1, final_norm at layer L,
// kv not at all (with the reason); plus a suggested starting point (the middle layer's
// residual_stream at prompt[-1]). Reads the configuration only (config.json, GGUF metadata or
// the llama2.c header), never the weights.
//
// The JSON form keeps Undercurrent v0.1's keys (model, model_class, model_type, num_layers,
// hidden_size, num_attention_heads, vocab_size, weights_loaded, verified, note, support,
// suggested) and adds format, num_key_value_heads, head_dim, intermediate_size and
// max_position_embeddings; support has one backend, "undercurrent", whose entries also carry
// the capturable layer range.
//
// --emit-spec FILE writes a commented starter spec (one inline single_shot point at the
// suggested layer, probe_type my_probe) that our spec parser accepts; it is checked by parsing
// before it is written. Exit 0 on success, 1 when the model cannot be read or FILE cannot be
// written, 2 on a usage error.
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "models/checkpoint.h"

namespace uc::cli {

// The report for the model at `path` with this configuration (the JSON form above).
nlohmann::ordered_json ModelReport(const std::string& path, models::CheckpointFormat format,
                                   const models::ModelConfig& config);
// The text form of ModelReport.
std::string ModelReportText(const nlohmann::ordered_json& report);
// The commented starter spec (YAML) for a report.
std::string StarterSpec(const nlohmann::ordered_json& report);

// Registers the subcommand on `app`.
void AddInspectModelCommand(CLI::App& app);

}  // namespace uc::cli
