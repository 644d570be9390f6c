#include "probe/probes/trained/weights.h"

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "io/json_file.h"
#include "io/mapped_file.h"

namespace uc::probe {

using nlohmann::json;

namespace {

Status FileError(std::string_view source, const std::string& message) {
  return InvalidArgumentError(std::string(source) + ": " + message);
}

// True for [n], [1, n] and [n, 1] with n >= 1.
bool IsVectorShape(const Shape& shape) {
  if (shape.size() == 1) return shape[0] >= 1;
  return shape.size() == 2 && (shape[0] == 1 || shape[1] == 1) && ShapeNumel(shape) >= 1;
}

std::string TensorList(const io::TensorSource& source) {
  const std::vector<std::string> names = source.TensorNames();
  std::string out;
  for (size_t i = 0; i < names.size() && i < 10; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 10) out += ", ... (" + std::to_string(names.size()) + " in all)";
  return names.empty() ? "none" : out;
}

// The first of `names` that `file` holds.
StatusOr<std::string> FindFirst(const io::SafetensorsFile& file,
                                const std::vector<std::string>& names) {
  std::string wanted;
  for (const std::string& name : names) {
    if (file.Has(name)) return name;
    wanted += (wanted.empty() ? "'" : " or '") + name + "'";
  }
  return FileError(file.path(),
                   "no tensor " + wanted + " (tensors in the file: " + TensorList(file) + ")");
}

StatusOr<VectorWeights> LoadSafetensorsVector(const std::filesystem::path& path,
                                              const std::vector<std::string>& names) {
  UC_ASSIGN_OR_RETURN(auto file, io::SafetensorsFile::Open(path));
  UC_ASSIGN_OR_RETURN(std::string name, FindFirst(*file, names));
  UC_ASSIGN_OR_RETURN(Tensor weight, file->Get(name));
  if (!IsVectorShape(weight.shape())) {
    return FileError(file->path(), "tensor '" + name + "' has shape " +
                                       ShapeToString(weight.shape()) +
                                       ", expected a vector ([n] or [1, n])");
  }
  VectorWeights out;
  out.weight = weight.ToFloatVector();
  out.metadata = file->metadata();
  if (file->Has("bias")) {
    UC_ASSIGN_OR_RETURN(Tensor bias, file->Get("bias"));
    if (bias.numel() != 1) {
      return FileError(file->path(), "tensor 'bias' has shape " + ShapeToString(bias.shape()) +
                                         ", expected a scalar ([] or [1])");
    }
    out.bias = bias.ToFloatVector()[0];
  }
  return out;
}

// A JSON vector: [x, ...], [[x, ...]] or [[x], [y], ...].
StatusOr<std::vector<float>> JsonVector(const json& value, std::string_view source,
                                        const std::string& what) {
  const auto fail = [&] {
    return FileError(source, what +
                                 " must be an array of numbers ([n], [[n values]] or [[x], "
                                 "[y], ...]) (got " +
                                 value.dump().substr(0, 40) + ")");
  };
  if (!value.is_array() || value.empty()) return fail();
  const json* items = &value;
  bool column = false;
  if (value.size() == 1 && value[0].is_array()) {
    items = &value[0];
  } else if (value[0].is_array()) {
    column = true;
  }
  std::vector<float> out;
  for (const json& item : *items) {
    const json& x = column && item.is_array() && item.size() == 1 ? item[0] : item;
    if (!x.is_number()) return fail();
    out.push_back(x.get<float>());
  }
  if (out.empty()) return fail();
  return out;
}

StatusOr<VectorWeights> LoadJsonVector(const std::filesystem::path& path,
                                       const std::vector<std::string>& names) {
  UC_ASSIGN_OR_RETURN(json doc, io::ReadJsonFile(path));
  const std::string source = path.string();
  VectorWeights out;
  if (doc.is_array()) {
    UC_ASSIGN_OR_RETURN(out.weight, JsonVector(doc, source, "the array"));
    return out;
  }
  if (!doc.is_object()) {
    return FileError(source, "expected an object {\"weight\": [...], \"bias\": b} or an array");
  }
  const json* weight = nullptr;
  std::string wanted;
  for (const std::string& name : names) {
    if (doc.contains(name)) {
      UC_ASSIGN_OR_RETURN(out.weight, JsonVector(doc[name], source, "'" + name + "'"));
      weight = &doc[name];
      break;
    }
    wanted += (wanted.empty() ? "'" : " or '") + name + "'";
  }
  if (weight == nullptr) return FileError(source, "no key " + wanted);
  if (doc.contains("metadata") && doc["metadata"].is_object()) {
    for (const auto& [key, value] : doc["metadata"].items()) {
      out.metadata[key] = value.is_string() ? value.get<std::string>() : value.dump();
    }
  }
  if (doc.contains("bias") && !doc["bias"].is_null()) {
    const json& bias = doc["bias"];
    const json& scalar = bias.is_array() && bias.size() == 1 ? bias[0] : bias;
    if (!scalar.is_number()) {
      return FileError(source, "'bias' must be a number (got " + bias.dump().substr(0, 40) + ")");
    }
    out.bias = scalar.get<double>();
  }
  return out;
}

// The value of `key` in a .npy header dict ("{'descr': '<f4', 'fortran_order': False,
// 'shape': (3,), }"): the text after "'key':", up to the next top-level comma or brace.
std::string NpyHeaderField(std::string_view header, std::string_view key) {
  for (const char quote : {'\'', '"'}) {
    const std::string pattern = std::string(1, quote) + std::string(key) + quote;
    size_t at = header.find(pattern);
    if (at == std::string_view::npos) continue;
    at = header.find(':', at + pattern.size());
    if (at == std::string_view::npos) return "";
    size_t end = at + 1;
    int depth = 0;
    while (end < header.size() && !(depth == 0 && (header[end] == ',' || header[end] == '}'))) {
      depth += header[end] == '(' ? 1 : header[end] == ')' ? -1 : 0;
      ++end;
    }
    std::string value(header.substr(at + 1, end - at - 1));
    const size_t first = value.find_first_not_of(" \t");
    const size_t last = value.find_last_not_of(" \t");
    return first == std::string::npos ? "" : value.substr(first, last - first + 1);
  }
  return "";
}

// "(3,)" or "(1, 64)" -> dims; nullopt when malformed.
std::optional<Shape> ParseNpyShape(const std::string& text) {
  if (text.size() < 2 || text.front() != '(' || text.back() != ')') return std::nullopt;
  Shape shape;
  size_t i = 1;
  while (i < text.size() - 1) {
    while (i < text.size() - 1 && (text[i] == ' ' || text[i] == ',')) ++i;
    if (i >= text.size() - 1) break;
    size_t used = 0;
    try {
      shape.push_back(std::stoll(text.substr(i), &used));
    } catch (...) {
      return std::nullopt;
    }
    if (used == 0 || shape.back() < 0) return std::nullopt;
    i += used;
  }
  return shape;
}

struct NpyHeader {
  std::string descr;
  Shape shape;
  size_t data_offset = 0;
};

StatusOr<NpyHeader> ParseNpyHeader(std::string_view bytes, std::string_view source) {
  if (bytes.size() < 10 || bytes.substr(0, 6) != "\x93NUMPY") {
    return FileError(source, "not a .npy file (bad magic)");
  }
  const int major = static_cast<unsigned char>(bytes[6]);
  if (major < 1 || major > 3) {
    return FileError(source, ".npy format version " + std::to_string(major) + " not supported");
  }
  const size_t len_bytes = major == 1 ? 2 : 4;
  if (bytes.size() < 8 + len_bytes) return FileError(source, "truncated .npy header");
  size_t header_len = 0;
  for (size_t i = 0; i < len_bytes; ++i) {
    header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
  }
  NpyHeader out;
  out.data_offset = 8 + len_bytes + header_len;
  if (out.data_offset > bytes.size()) return FileError(source, "truncated .npy header");
  const std::string_view header = bytes.substr(8 + len_bytes, header_len);
  std::string descr = NpyHeaderField(header, "descr");
  if (descr.size() >= 2 && (descr.front() == '\'' || descr.front() == '"')) {
    descr = descr.substr(1, descr.size() - 2);
  }
  out.descr = descr;
  const std::optional<Shape> shape = ParseNpyShape(NpyHeaderField(header, "shape"));
  if (!shape) return FileError(source, "malformed .npy header: " + std::string(header));
  out.shape = *shape;
  return out;
}

}  // namespace

StatusOr<std::vector<float>> ParseNpyVector(std::string_view bytes, std::string_view source) {
  UC_ASSIGN_OR_RETURN(NpyHeader header, ParseNpyHeader(bytes, source));
  if (header.descr != "<f4" && header.descr != "<f8") {
    return FileError(source, "dtype '" + header.descr +
                                 "' not supported (expected little-endian float32 '<f4' or "
                                 "float64 '<f8'; save with arr.astype('<f4'))");
  }
  if (!IsVectorShape(header.shape)) {
    return FileError(source, "array has shape " + ShapeToString(header.shape) +
                                 ", expected a vector ([n] or [1, n])");
  }
  const size_t n = static_cast<size_t>(ShapeNumel(header.shape));
  const size_t element = header.descr == "<f4" ? 4 : 8;
  const size_t available = bytes.size() - header.data_offset;
  if (available != n * element) {
    return FileError(source, "data holds " + std::to_string(available) + " bytes, expected " +
                                 std::to_string(n * element) + " for shape " +
                                 ShapeToString(header.shape));
  }
  std::vector<float> out(n);
  const char* data = bytes.data() + header.data_offset;
  for (size_t i = 0; i < n; ++i) {
    if (element == 4) {
      std::memcpy(&out[i], data + 4 * i, 4);
    } else {
      double x;
      std::memcpy(&x, data + 8 * i, 8);
      out[i] = static_cast<float>(x);
    }
  }
  return out;
}

StatusOr<std::vector<float>> ReadNpyVector(const std::filesystem::path& path) {
  UC_ASSIGN_OR_RETURN(auto file, io::MappedFile::Open(path));
  const std::string_view bytes(reinterpret_cast<const char*>(file->data()), file->size());
  return ParseNpyVector(bytes, path.string());
}

namespace {

// OK when every value is finite; else names the file, what holds the value and its index: a NaN
// or infinite weight would make every score NaN, and a NaN never crosses a threshold.
Status CheckFinite(std::string_view file, const std::string& what,
                   const std::vector<float>& values) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return FileError(file, what + " holds " + (std::isnan(values[i]) ? "NaN" : "an infinity") +
                                 " at index " + std::to_string(i) +
                                 "; probe weights must be finite numbers");
    }
  }
  return OkStatus();
}

}  // namespace

StatusOr<VectorWeights> LoadVectorWeights(const std::filesystem::path& path,
                                          const std::vector<std::string>& names) {
  const std::string ext = path.extension().string();
  VectorWeights out;
  if (ext == ".safetensors") {
    UC_ASSIGN_OR_RETURN(out, LoadSafetensorsVector(path, names));
  } else if (ext == ".json") {
    UC_ASSIGN_OR_RETURN(out, LoadJsonVector(path, names));
  } else if (ext == ".npy") {
    UC_ASSIGN_OR_RETURN(out.weight, ReadNpyVector(path));
  } else {
    return FileError(path.string(), "unsupported weights format '" + ext +
                                        "' (expected .safetensors, .npy or .json)");
  }
  UC_RETURN_IF_ERROR(CheckFinite(path.string(), "the weight vector", out.weight));
  if (out.bias && !std::isfinite(*out.bias)) {
    return FileError(path.string(),
                     "the bias is not a finite number; probe weights must be "
                     "finite numbers");
  }
  return out;
}

StatusOr<DenseWeights> ReadDense(const io::SafetensorsFile& file, std::string_view prefix) {
  const std::string weight_name = std::string(prefix) + ".weight";
  const std::string bias_name = std::string(prefix) + ".bias";
  UC_ASSIGN_OR_RETURN(std::string found, FindFirst(file, {weight_name}));
  UC_ASSIGN_OR_RETURN(Tensor weight, file.Get(found));
  DenseWeights out;
  if (weight.rank() == 1) {
    out.out_features = 1;
    out.in_features = weight.dim(0);
  } else if (weight.rank() == 2) {
    out.out_features = weight.dim(0);
    out.in_features = weight.dim(1);
  } else {
    return FileError(file.path(), "tensor '" + weight_name + "' has shape " +
                                      ShapeToString(weight.shape()) +
                                      ", expected [out_features, in_features]");
  }
  out.weight = weight.ToFloatVector();
  UC_RETURN_IF_ERROR(CheckFinite(file.path(), "tensor '" + weight_name + "'", out.weight));
  out.bias.assign(static_cast<size_t>(out.out_features), 0.0f);
  if (!file.Has(bias_name)) return out;
  UC_ASSIGN_OR_RETURN(Tensor bias, file.Get(bias_name));
  const bool fits = bias.numel() == out.out_features && (bias.rank() == 1 || bias.numel() == 1);
  if (!fits) {
    return FileError(file.path(), "tensor '" + bias_name + "' has shape " +
                                      ShapeToString(bias.shape()) + ", expected [" +
                                      std::to_string(out.out_features) + "]");
  }
  out.bias = bias.ToFloatVector();
  UC_RETURN_IF_ERROR(CheckFinite(file.path(), "tensor '" + bias_name + "'", out.bias));
  return out;
}

}  // namespace uc::probe
