// File: steering.h
// -----------------------------------------------------------------------------
// Control vectors: directions added to the residual stream after decoder blocks, for every token
// (llama.cpp's control vectors, repeng's export). The vector for block N is added to that
// block's output, so the residual stream after layer N — what a `residual_stream` probe at layer
// N sees, and what every later layer reads — includes it; the same layer's `attn_out` and
// `mlp_out` are the blocks' own outputs, without it.
//
// Files (the format from the extension):
//   .gguf         llama.cpp's control-vector GGUF: general.architecture = "controlvector",
//                 one 1-D float tensor `direction.N` of hidden_size values per steered block N
//   .safetensors  the same tensor names
//   .npy          a float32 or float64 array [num_layers, hidden_size]: row N for block N
//                 (all-zero rows steer nothing)
// Several files add up, each times its scale; a layer range keeps only the blocks inside it
// (inclusive, llama.cpp's --control-vector-layer-range). Every problem is an InvalidArgument
// naming the file and, where there is one, the tensor: a wrong length, a block outside the
// model, a non-finite value, a GGUF of another architecture, an unknown extension.
#pragma once

#include <filesystem>
#include <map>
#include <vector>

#include "base/status.h"
#include "models/forward_hooks.h"

namespace uc::models {

struct ControlVectorFile {
  std::filesystem::path path;
  float scale = 1.0f;
};

struct SteeringOptions {
  std::vector<ControlVectorFile> files;
  // Blocks [layer_start, layer_end] only (inclusive); -1: no bound on that side.
  int layer_start = -1;
  int layer_end = -1;
  bool empty() const { return files.empty(); }
};

// Block index -> [hidden_size] vector. Blocks with no vector are absent.
using LayerVectors = std::map<int, std::vector<float>>;

// The directions in one file, unscaled, checked against the model's sizes.
StatusOr<LayerVectors> ReadControlVectorFile(const std::filesystem::path& path, int hidden_size,
                                             int num_layers);

// The sum over options.files of scale * direction per block, restricted to the layer range.
// InvalidArgument for a bad file (see above) or a range outside [0, num_layers) or reversed.
StatusOr<LayerVectors> LoadControlVectors(const SteeringOptions& options, int hidden_size,
                                          int num_layers);

// Making vectors (undercurrent steer-vector): a contrastive direction from the activations of
// positive and negative examples at one layer, rows [n, hidden] each.
//   kMeanDiff  mean(positive) - mean(negative) (unnormalized; CAA's vector)
//   kPcaDiff   repeng's pca_diff: the first principal component of the paired differences
//              positive[i] - negative[i] (centered, unit length), its sign chosen so that
//              positives project above their negatives in most pairs
// InvalidArgument when a side is empty, rows differ in length, or kPcaDiff has unpaired rows
// or fewer than 2 pairs.
enum class VectorMethod { kMeanDiff, kPcaDiff };
StatusOr<std::vector<float>> ContrastiveDirection(VectorMethod method,
                                                  const std::vector<std::vector<float>>& positive,
                                                  const std::vector<std::vector<float>>& negative);

// Writes llama.cpp's control-vector GGUF (what repeng's export_gguf writes and
// ReadControlVectorFile reads): general.architecture = controlvector, controlvector.model_hint,
// controlvector.layer_count, one F32 tensor direction.N per block. llama.cpp never applies
// direction.0 (it steers blocks 1 and up); the file keeps it anyway.
Status WriteControlVectorGguf(const std::filesystem::path& path, const LayerVectors& vectors,
                              const std::string& model_hint);

// Per-request steering of one forward call (built by the worker from the step's registered
// configs): each entry adds `vector` at (layer, site) to the batch rows `rows`, scaled by
// `scale`, or with norm_match by scale × ‖stream_row‖ / ‖vector‖ (‖stream_row‖: the norm of the
// residual stream right after that site, before this addition). Rows are ascending; a row may
// appear in several entries (their additions are applied in entry order, so each row's result
// depends only on its own entries, never on the rest of the batch).
struct SteeringAdd {
  int layer = 0;
  Site site = Site::kResidPost;
  const float* vector = nullptr;  // [hidden_size]; owned by the caller, outlives the call
  float scale = 1.0f;
  bool norm_match = false;
  float inv_vector_norm = 0.0f;  // 1 / ‖vector‖, for norm_match
  std::vector<int32_t> rows = {};
};

struct BatchSteering {
  std::vector<SteeringAdd> adds;
  bool empty() const { return adds.empty(); }
};

}  // namespace uc::models
