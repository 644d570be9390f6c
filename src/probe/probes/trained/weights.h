// File: weights.h
// -----------------------------------------------------------------------------
// Probe weights from the files researchers write in Python, read once when a probe type is
// created and then shared, immutable, by every probe instance:
//
//   .safetensors  named F32/F16/BF16 tensors: the vector under the first of `names` present
//                 (e.g. "weight"), an optional scalar "bias" ([] or [1])
//   .npy          one float32 or float64 little-endian array (format versions 1-3; C or
//                 Fortran order); holds the vector only, no bias
//   .json         {"<name>": [...], "bias": b} with a name from `names`, or a plain array
//
// A "vector" is 1-D, or 2-D with one dimension equal to 1 ([1, n] as torch's nn.Linear(n, 1)
// stores it, or [n, 1]). Errors name the file and the tensor or key, and say what was expected.
// Stateless functions; thread-safe.
//
//   UC_ASSIGN_OR_RETURN(VectorWeights w, LoadVectorWeights(dir / "probe.safetensors"));
//   // w.weight: [hidden_size], w.bias: set if the file has one
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "io/safetensors/safetensors.h"

namespace uc::probe {

struct VectorWeights {
  std::vector<float> weight;   // [n]
  std::optional<double> bias;  // set when the file has one
  // The artifact metadata (artifact.h): safetensors __metadata__, or a .json file's "metadata"
  // object (non-string values as JSON text); empty for .npy.
  std::map<std::string, std::string> metadata;
};

// Loads a vector (and optional bias), the format chosen by the extension (.safetensors, .npy,
// .json; InvalidArgument for others). `names`: the tensor / key names the vector may have,
// tried in order.
StatusOr<VectorWeights> LoadVectorWeights(const std::filesystem::path& path,
                                          const std::vector<std::string>& names = {"weight"});

// Reads a .npy file holding a vector (see above). InvalidArgument naming the file for a bad
// magic, header, dtype (only <f4, <f8), shape, or truncated data.
StatusOr<std::vector<float>> ReadNpyVector(const std::filesystem::path& path);

// Parses the contents of a .npy file; `source` names it in errors.
StatusOr<std::vector<float>> ParseNpyVector(std::string_view bytes, std::string_view source);

// y = W x + b: one dense layer read from a safetensors file as PREFIX.weight ([out, in], or
// [in] meaning out = 1) and PREFIX.bias ([out], or [] when out = 1; zeros when absent).
struct DenseWeights {
  int64_t out_features = 0;
  int64_t in_features = 0;
  std::vector<float> weight;  // [out_features, in_features], row-major
  std::vector<float> bias;    // [out_features]
};
StatusOr<DenseWeights> ReadDense(const io::SafetensorsFile& file, std::string_view prefix);

}  // namespace uc::probe
