#include "models/steering.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "io/gguf/gguf.h"
#include "io/gguf/gguf_writer.h"
#include "io/mapped_file.h"
#include "io/safetensors/safetensors.h"
#include "io/tensor_source.h"

namespace uc::models {
namespace {

constexpr std::string_view kDirectionPrefix = "direction.";

Status FileError(const std::filesystem::path& path, const std::string& what) {
  return InvalidArgumentError(path.string() + ": " + what);
}

// Checks one block's vector (its index and values) and stores it.
Status AddDirection(const std::filesystem::path& path, const std::string& what, int layer,
                    std::vector<float> values, int hidden_size, int num_layers, LayerVectors& out) {
  if (layer < 0 || layer >= num_layers) {
    return FileError(path, what + " is for block " + std::to_string(layer) +
                               "; the model has blocks 0 to " + std::to_string(num_layers - 1));
  }
  if (static_cast<int64_t>(values.size()) != hidden_size) {
    return FileError(path, what + " has " + std::to_string(values.size()) +
                               " values; the model's hidden size is " +
                               std::to_string(hidden_size));
  }
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return FileError(path, what + " has a non-finite value at index " + std::to_string(i));
    }
  }
  if (!out.emplace(layer, std::move(values)).second) {
    return FileError(path, what + ": block " + std::to_string(layer) + " appears twice");
  }
  return OkStatus();
}

// "direction.N" -> N; -1 when the name has another form.
int DirectionLayer(std::string_view name) {
  if (name.substr(0, kDirectionPrefix.size()) != kDirectionPrefix) return -1;
  const std::string_view digits = name.substr(kDirectionPrefix.size());
  int layer = -1;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), layer);
  if (ec != std::errc() || end != digits.data() + digits.size() || digits.empty()) return -1;
  return layer;
}

StatusOr<LayerVectors> ReadTensorFile(const std::filesystem::path& path,
                                      const io::TensorSource& source, int hidden_size,
                                      int num_layers) {
  LayerVectors out;
  for (const std::string& name : source.TensorNames()) {
    const int layer = DirectionLayer(name);
    if (layer < 0) {
      return FileError(path, "tensor '" + name +
                                 "' is not a control vector direction (expected names "
                                 "direction.N, N the block it steers)");
    }
    UC_ASSIGN_OR_RETURN(Tensor t, source.Get(name));
    if (t.rank() != 1 ||
        !(t.dtype() == DType::kF32 || t.dtype() == DType::kF16 || t.dtype() == DType::kBF16)) {
      return FileError(path, "tensor '" + name + "' is " + std::string(DTypeName(t.dtype())) + " " +
                                 ShapeToString(t.shape()) + "; a direction is a 1-D float tensor");
    }
    UC_RETURN_IF_ERROR(AddDirection(path, "tensor '" + name + "'", layer, t.ToFloatVector(),
                                    hidden_size, num_layers, out));
  }
  if (out.empty()) return FileError(path, "holds no direction.N tensor");
  return out;
}

StatusOr<LayerVectors> ReadGguf(const std::filesystem::path& path, int hidden_size,
                                int num_layers) {
  UC_ASSIGN_OR_RETURN(std::shared_ptr<const io::GgufFile> gguf, io::GgufFile::Open(path));
  if (gguf->Find("general.architecture") != nullptr) {
    UC_ASSIGN_OR_RETURN(std::string arch, gguf->GetString("general.architecture"));
    if (arch != "controlvector") {
      return FileError(path, "is a GGUF of architecture '" + arch +
                                 "', not a control vector (general.architecture = "
                                 "controlvector)");
    }
  }
  return ReadTensorFile(path, *gguf, hidden_size, num_layers);
}

StatusOr<LayerVectors> ReadSafetensors(const std::filesystem::path& path, int hidden_size,
                                       int num_layers) {
  UC_ASSIGN_OR_RETURN(std::shared_ptr<const io::SafetensorsFile> file,
                      io::SafetensorsFile::Open(path));
  return ReadTensorFile(path, *file, hidden_size, num_layers);
}

// The value of `key` in a .npy header dict ("{'descr': '<f4', 'fortran_order': False,
// 'shape': (5, 64), }"), up to the next top-level comma or the closing brace.
std::string HeaderValue(std::string_view header, std::string_view key) {
  const std::string quoted = "'" + std::string(key) + "':";
  const size_t at = header.find(quoted);
  if (at == std::string_view::npos) return "";
  size_t i = at + quoted.size();
  while (i < header.size() && header[i] == ' ') ++i;
  int depth = 0;
  size_t j = i;
  for (; j < header.size(); ++j) {
    const char c = header[j];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
  }
  return std::string(header.substr(i, j - i));
}

StatusOr<LayerVectors> ReadNpy(const std::filesystem::path& path, int hidden_size, int num_layers) {
  UC_ASSIGN_OR_RETURN(std::shared_ptr<const io::MappedFile> file, io::MappedFile::Open(path));
  const auto* bytes = reinterpret_cast<const unsigned char*>(file->data());
  const size_t size = file->size();
  static constexpr unsigned char kMagic[] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (size < 10 || std::memcmp(bytes, kMagic, sizeof(kMagic)) != 0) {
    return FileError(path, "is not a .npy file (no \\x93NUMPY magic)");
  }
  const int major = bytes[6];
  size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = bytes[8] | (size_t{bytes[9]} << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) return FileError(path, "truncated .npy header");
    header_len =
        bytes[8] | (size_t{bytes[9]} << 8) | (size_t{bytes[10]} << 16) | (size_t{bytes[11]} << 24);
    header_start = 12;
  } else {
    return FileError(path, ".npy format version " + std::to_string(major) + " is not supported");
  }
  if (header_start + header_len > size) return FileError(path, "truncated .npy header");
  const std::string_view header(reinterpret_cast<const char*>(bytes) + header_start, header_len);
  const std::string descr = HeaderValue(header, "descr");
  const std::string order = HeaderValue(header, "fortran_order");
  const std::string shape = HeaderValue(header, "shape");
  const bool f32 = descr == "'<f4'", f64 = descr == "'<f8'";
  if (!f32 && !f64) {
    return FileError(path, "array dtype " + descr + "; expected little-endian float32 or float64");
  }
  if (order != "False") return FileError(path, "a Fortran-ordered array is not supported");
  long long rows = -1, cols = -1;
  // At most one row per block (fewer: the blocks past them are not steered).
  if (std::sscanf(shape.c_str(), "(%lld, %lld)", &rows, &cols) != 2 || rows < 0 ||
      rows > num_layers || cols != hidden_size) {
    return FileError(path, "array shape " + shape + "; expected (num_layers, hidden_size) = (" +
                               std::to_string(num_layers) + ", " + std::to_string(hidden_size) +
                               ")");
  }
  const size_t width = f32 ? 4 : 8;
  const size_t data_start = header_start + header_len;
  if (data_start + static_cast<size_t>(rows * cols) * width > size) {
    return FileError(path, "truncated: the array needs " + std::to_string(rows * cols * width) +
                               " bytes of data");
  }
  LayerVectors out;
  for (long long r = 0; r < rows; ++r) {
    std::vector<float> values(static_cast<size_t>(cols));
    bool any = false;
    for (long long c = 0; c < cols; ++c) {
      const unsigned char* at = bytes + data_start + static_cast<size_t>(r * cols + c) * width;
      if (f32) {
        std::memcpy(&values[c], at, 4);
      } else {
        double d;
        std::memcpy(&d, at, 8);
        values[c] = static_cast<float>(d);
      }
      any = any || values[c] != 0.0f;
    }
    if (!any) continue;
    UC_RETURN_IF_ERROR(AddDirection(path, "row " + std::to_string(r), static_cast<int>(r),
                                    std::move(values), hidden_size, num_layers, out));
  }
  return out;
}

}  // namespace

StatusOr<LayerVectors> ReadControlVectorFile(const std::filesystem::path& path, int hidden_size,
                                             int num_layers) {
  const std::string ext = path.extension().string();
  if (ext == ".gguf") return ReadGguf(path, hidden_size, num_layers);
  if (ext == ".safetensors") return ReadSafetensors(path, hidden_size, num_layers);
  if (ext == ".npy") return ReadNpy(path, hidden_size, num_layers);
  return FileError(path,
                   "unknown control vector format '" + ext +
                       "' (expected .gguf as llama.cpp and repeng write, .safetensors or .npy)");
}

StatusOr<LayerVectors> LoadControlVectors(const SteeringOptions& options, int hidden_size,
                                          int num_layers) {
  const int first = options.layer_start < 0 ? 0 : options.layer_start;
  const int last = options.layer_end < 0 ? num_layers - 1 : options.layer_end;
  if (first >= num_layers || last >= num_layers || first > last) {
    return InvalidArgumentError("control vector layer range [" + std::to_string(first) + ", " +
                                std::to_string(last) + "] is not inside the model's blocks 0 to " +
                                std::to_string(num_layers - 1));
  }
  LayerVectors sum;
  for (const ControlVectorFile& file : options.files) {
    UC_ASSIGN_OR_RETURN(LayerVectors vectors,
                        ReadControlVectorFile(file.path, hidden_size, num_layers));
    for (auto& [layer, values] : vectors) {
      if (layer < first || layer > last) continue;
      std::vector<float>& into = sum[layer];
      into.resize(values.size(), 0.0f);
      for (size_t i = 0; i < values.size(); ++i) into[i] += file.scale * values[i];
    }
  }
  return sum;
}

namespace {

// Top eigenvector of XᵀX for the rows of X (centered already), by power iteration from `start`.
std::vector<double> TopComponent(const std::vector<std::vector<double>>& x,
                                 std::vector<double> start) {
  const size_t d = start.size();
  auto normalize = [](std::vector<double>& v) {
    double n = 0.0;
    for (double e : v) n += e * e;
    n = std::sqrt(n);
    if (n == 0.0) return false;
    for (double& e : v) e /= n;
    return true;
  };
  if (!normalize(start)) {
    for (size_t j = 0; j < d; ++j) start[j] = 1.0 + 0.001 * static_cast<double>(j);
    normalize(start);
  }
  std::vector<double> v = std::move(start), next(d);
  for (int iter = 0; iter < 10000; ++iter) {
    std::fill(next.begin(), next.end(), 0.0);
    for (const std::vector<double>& row : x) {
      double dot = 0.0;
      for (size_t j = 0; j < d; ++j) dot += row[j] * v[j];
      for (size_t j = 0; j < d; ++j) next[j] += dot * row[j];
    }
    if (!normalize(next)) return v;
    double change = 0.0;
    for (size_t j = 0; j < d; ++j) change = std::max(change, std::fabs(next[j] - v[j]));
    v.swap(next);
    if (change < 1e-12) break;
  }
  return v;
}

}  // namespace

StatusOr<std::vector<float>> ContrastiveDirection(VectorMethod method,
                                                  const std::vector<std::vector<float>>& positive,
                                                  const std::vector<std::vector<float>>& negative) {
  if (positive.empty() || negative.empty()) {
    return InvalidArgumentError("a contrastive direction needs positive and negative examples");
  }
  const size_t d = positive[0].size();
  for (const auto* side : {&positive, &negative}) {
    for (const std::vector<float>& row : *side) {
      if (row.size() != d) return InvalidArgumentError("activation rows differ in length");
    }
  }
  std::vector<double> mean_diff(d, 0.0);
  for (const std::vector<float>& row : positive) {
    for (size_t j = 0; j < d; ++j) mean_diff[j] += row[j] / static_cast<double>(positive.size());
  }
  for (const std::vector<float>& row : negative) {
    for (size_t j = 0; j < d; ++j) mean_diff[j] -= row[j] / static_cast<double>(negative.size());
  }
  if (method == VectorMethod::kMeanDiff)
    return std::vector<float>(mean_diff.begin(), mean_diff.end());
  if (positive.size() != negative.size()) {
    return InvalidArgumentError("pca_diff pairs positive and negative examples line by line: " +
                                std::to_string(positive.size()) + " positive, " +
                                std::to_string(negative.size()) + " negative");
  }
  if (positive.size() < 2) {
    return InvalidArgumentError("pca_diff needs at least 2 pairs (one difference has no variance)");
  }
  // Paired differences, centered (PCA's mean removal).
  std::vector<std::vector<double>> x(positive.size(), std::vector<double>(d));
  for (size_t i = 0; i < positive.size(); ++i) {
    for (size_t j = 0; j < d; ++j) x[i][j] = double{positive[i][j]} - negative[i][j] - mean_diff[j];
  }
  std::vector<double> v = TopComponent(x, mean_diff);
  // repeng's sign rule: positives should project above their negatives in most pairs.
  int larger = 0, smaller = 0;
  for (size_t i = 0; i < positive.size(); ++i) {
    double p = 0.0, n = 0.0;
    for (size_t j = 0; j < d; ++j) {
      p += positive[i][j] * v[j];
      n += negative[i][j] * v[j];
    }
    larger += p > n;
    smaller += p < n;
  }
  if (smaller > larger) {
    for (double& e : v) e = -e;
  }
  return std::vector<float>(v.begin(), v.end());
}

Status WriteControlVectorGguf(const std::filesystem::path& path, const LayerVectors& vectors,
                              const std::string& model_hint) {
  io::GgufWriter writer;
  writer.SetString("general.architecture", "controlvector");
  writer.SetString("controlvector.model_hint", model_hint);
  writer.Set<uint32_t>("controlvector.layer_count", static_cast<uint32_t>(vectors.size()));
  std::vector<Tensor> tensors;
  for (const auto& [layer, values] : vectors) {
    Tensor t = Tensor::Empty({static_cast<int64_t>(values.size())}, DType::kF32);
    std::copy(values.begin(), values.end(), t.data<float>());
    tensors.push_back(t);
    UC_RETURN_IF_ERROR(writer.Add("direction." + std::to_string(layer), t));
  }
  return writer.WriteFile(path);
}

}  // namespace uc::models
