// File: artifact.h
// -----------------------------------------------------------------------------
// Probe artifacts: a trained probe's weights file says what it was made for, in its metadata
// (safetensors __metadata__, or the "metadata" object of a .json file; all values strings):
//
//   "undercurrent.probe_version"  "1"
//   "model"        the fingerprint of the model whose activations trained it, as JSON text
//                  (engine::ModelFingerprint: shape, tokenizer size, final-norm hash)
//   "layers"       JSON list of the layers it was trained on, e.g. "[4]"
//   "tensor_type"  the site: "residual_stream", "attn_out", "mlp_out", "final_norm"
//   "point", "threshold", "trained"   informational
//
// examples/train_linear_probe.py writes them. When a probe loads such a file, CheckArtifact
// compares it with where it is deployed (ProbeEnv): another model (any fingerprint field that
// differs, the context length aside), a point layer it was not trained on, or another site. By
// ProbeEnv::artifact_policy a mismatch is ignored, logged as a warning (default), or refused
// (InvalidArgument naming the file and every mismatch). Files without metadata always load.
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "base/status.h"
#include "probe/probes/probe.h"

namespace uc::probe {

// "" when the metadata agrees with env (or says nothing checkable), else every mismatch, e.g.
// "trained on another model (hidden_size 64, here 576); trained on layers [4], deployed at
// layer 2".
std::string ArtifactMismatches(const std::map<std::string, std::string>& metadata,
                               const ProbeEnv& env);

// Applies env.artifact_policy to ArtifactMismatches for `file`.
Status CheckArtifact(const std::map<std::string, std::string>& metadata,
                     const std::filesystem::path& file, const ProbeEnv& env);

// "ignore" | "warn" | "refuse"; InvalidArgument otherwise.
StatusOr<ArtifactPolicy> ParseArtifactPolicy(const std::string& name);

}  // namespace uc::probe
