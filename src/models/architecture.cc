#include "models/architecture.h"

#include <array>

namespace uc::models {
namespace {
const std::array<const Architecture*, 7>& Registry() {
  static const std::array<const Architecture*, 7> kAll = {
      &kLlamaArchitecture, &kMistralArchitecture, &kQwen2Architecture, &kQwen3Architecture,
      &kPhi3Architecture,  &kGemma2Architecture,  &kGemma3Architecture};
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
