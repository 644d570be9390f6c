// File: inspect_model_command.h
// -----------------------------------------------------------------------------
// `undercurrent inspect-model PATH [--format text|json] [--emit-spec FILE] [--tensors]
// [--backend hf|vllm|all|undercurrent] [--trust-remote-code] [--revision REV]`: what a model is
// (architecture, layers, hidden size, heads, KV heads, vocabulary, which layers slide), every
// tensor's stored type (a count per type; --tensors lists name, type and shape) and what a probe
// spec can capture from it: residual_stream, attn_out and mlp_out at layers 0..L-1 (attn_out and
// mlp_out are what each block adds to the residual stream, after Gemma's post-norms), final_norm
// at layer L, kv not at all (with the reason); plus a suggested starting point (the middle
// layer's residual_stream at prompt[-1]). Reads the configuration and the tensor index
// (config.json / safetensors headers, GGUF metadata, the llama2.c header), never the weights.
//
// The JSON form keeps Undercurrent v0.1's keys (model, model_class, model_type, num_layers,
// hidden_size, num_attention_heads, vocab_size, weights_loaded, verified, note, support,
// suggested) and adds format, num_key_value_heads, head_dim, intermediate_size,
// max_position_embeddings, attention (sliding window, sliding and global layers, RoPE bases,
// q/k norm, logit soft-cap), tensor_types and tensors ({name, shape, type}). support holds our
// table under "undercurrent" and, as v0.1 scripts read it, the same table under each of v0.1's
// backend keys that --backend names (default all: "hf" and "vllm"): one engine captures for every
// backend here. Each entry has v0.1's status
// ("yes"/"no") and reason, plus the capturable layer range and a description.
//
// v0.1's other flags are accepted so its scripts run unchanged: --trust-remote-code does
// nothing (no model code is ever run), --revision is ignored with a note on stderr (models are
// local files, never a Hub revision).
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
#include <vector>

#include "models/checkpoint.h"

namespace uc::cli {

// The report for the model at `path` with this configuration (the JSON form above).
// `v0_1_backends`: v0.1's backend keys ("hf", "vllm") to add beside "undercurrent".
nlohmann::ordered_json ModelReport(const std::string& path, models::CheckpointFormat format,
                                   const models::ModelConfig& config,
                                   const std::vector<std::string>& v0_1_backends = {"hf", "vllm"});
// The text form of ModelReport.
std::string ModelReportText(const nlohmann::ordered_json& report);
// The commented starter spec (YAML) for a report.
std::string StarterSpec(const nlohmann::ordered_json& report);

// Registers the subcommand on `app`.
void AddInspectModelCommand(CLI::App& app);

}  // namespace uc::cli
