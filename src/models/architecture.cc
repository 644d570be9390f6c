#include "models/architecture.h"

#include <array>

namespace uc::models {
namespace {
const std::array<const Architecture*, 3>& Registry() {
  static const std::array<const Architecture*, 3> kAll = {
      &kLlamaArchitecture, &kMistralArchitecture, &kQwen2Architecture};
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

std::string SupportedArchitectureNames() {
  std::string out;
  for (const Architecture* arch : Registry()) {
    if (!out.empty()) out += ", ";
    out += arch->hf_class;
  }
  return out;
}

}  // namespace uc::models
