// File: model_fingerprint.h
// -----------------------------------------------------------------------------
// What identifies a served model for the artifacts made from it (activation datasets, trained
// probes, calibrated specs): its shape, tokenizer size, context length and an FNV-1a hash of
// its final-norm weights (cheap to read, and different in any two trained models):
//   {"architecture", "hidden_size", "intermediate_size", "num_hidden_layers",
//    "num_attention_heads", "num_key_value_heads", "vocab_size", "tokenizer_vocab_size",
//    "max_model_len", "norm_weight_fnv1a64"}
// The context length is the serving configuration's; comparisons of models leave it out.
#pragma once

#include <nlohmann/json.hpp>

#include "engine/llm_engine.h"

namespace uc::engine {

nlohmann::json ModelFingerprint(LLMEngine& engine);

}  // namespace uc::engine
