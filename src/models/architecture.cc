#include "models/architecture.h"

#include <array>

namespace uc::models {
namespace {
const std::array<const Architecture*, 15>& Registry() {
  static const std::array<const Architecture*, 15> kAll = {
      &kLlamaArchitecture,   &kMistralArchitecture, &kQwen2Architecture,    &kQwen3Architecture,
      &kPhi3Architecture,    &kGemma2Architecture,  &kGemma3Architecture,   &kGpt2Architecture,
      &kGptNeoXArchitecture, &kOlmo2Architecture,   &kQwen2MoeArchitecture, &kQwen3MoeArchitecture,
      &kOlmoeArchitecture,   &kMixtralArchitecture, &kGptOssArchitecture};
  return kAll;
}
}  // namespace

const Architecture* FindArchitectureByHfClass(std::string_view hf_class) {
  for (const Architecture* arch : Registry()) {
    if (arch->hf_class == hf_class) return arch;
  }
  return nullptr;
}

const Architecture* FindArchitectureByGguf(std::string_view gguf_arch) {
  for (const Architecture* arch : Registry()) {
    if (!arch->gguf_arch.empty() && arch->gguf_arch == gguf_arch) return arch;
  }
  return nullptr;
}

Status ReadOptionalFloat(const nlohmann::json& json, const std::string& source, const char* key,
                         float& out) {
  if (!json.contains(key) || json[key].is_null()) return OkStatus();
  if (!json[key].is_number() || !(json[key].get<double>() > 0.0)) {
    return InvalidArgumentError(source + ": field '" + key + "' must be a positive number, got " +
                                json[key].dump());
  }
  out = json[key].get<float>();
  return OkStatus();
}

Status ReadOptionalGgufFloat(const io::GgufFile& file, const std::string& key, float& out) {
  if (file.Find(key) == nullptr) return OkStatus();
  UC_ASSIGN_OR_RETURN(double value, file.GetFloat(key));
  out = static_cast<float>(value);
  return OkStatus();
}

bool SplitLayerName(std::string_view name, int& layer, std::string_view& rest) {
  constexpr std::string_view kPrefix = "model.layers.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return false;
  name.remove_prefix(kPrefix.size());
  const size_t dot = name.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot > 6) return false;
  layer = 0;
  for (const char ch : name.substr(0, dot)) {
    if (ch < '0' || ch > '9') return false;
    layer = layer * 10 + (ch - '0');
  }
  rest = name.substr(dot + 1);
  return true;
}

StatusOr<Tensor> TransposedF32(const Tensor& t) {
  if (t.rank() != 2 || DTypeIsQuantized(t.dtype()) || t.dtype() == DType::kI32) {
    return InvalidArgumentError("a Conv1D weight must be a 2-D float tensor, got " +
                                ShapeToString(t.shape()) + " " + std::string(DTypeName(t.dtype())));
  }
  const int64_t rows = t.dim(0), cols = t.dim(1);
  const std::vector<float> in = t.ToFloatVector();
  std::vector<float> out(in.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
  }
  return Tensor::FromVector(out, {cols, rows});
}

std::string SupportedArchitectureNames() {
  std::string out;
  for (const Architecture* arch : Registry()) {
    if (!out.empty()) out += ", ";
    out += arch->hf_class;
  }
  return out;
}

std::string SupportedGgufArchitectureNames() {
  std::string out;
  for (const Architecture* arch : Registry()) {
    if (arch->gguf_arch.empty()) continue;
    if (!out.empty()) out += ", ";
    out += arch->gguf_arch;
  }
  return out;
}

}  // namespace uc::models
