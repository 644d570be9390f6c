#include "io/gguf/gguf_types.h"

#include <array>
#include <string_view>

#include "base/check.h"

namespace uc::io {
namespace {

// Indexed by ggml type id; empty entries are ids ggml has retired.
constexpr std::array<std::string_view, 40> kGgmlTypeNames = {
    "F32",    "F16",   "Q4_0",  "Q4_1",   "",      "",      "Q5_0",    "Q5_1",   "Q8_0",    "Q8_1",
    "Q2_K",   "Q3_K",  "Q4_K",  "Q5_K",   "Q6_K",  "Q8_K",  "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
    "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8",    "I16",   "I32",     "I64",    "F64",     "IQ1_M",
    "BF16",   "",      "",      "",       "TQ1_0", "TQ2_0", "",        "",       "",        "MXFP4",
};

}  // namespace

std::string GgufTypeName(uint32_t type) {
  switch (static_cast<GgufType>(type)) {
    case GgufType::kUint8:
      return "uint8";
    case GgufType::kInt8:
      return "int8";
    case GgufType::kUint16:
      return "uint16";
    case GgufType::kInt16:
      return "int16";
    case GgufType::kUint32:
      return "uint32";
    case GgufType::kInt32:
      return "int32";
    case GgufType::kFloat32:
      return "float32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kUint64:
      return "uint64";
    case GgufType::kInt64:
      return "int64";
    case GgufType::kFloat64:
      return "float64";
  }
  return "type " + std::to_string(type);
}

uint32_t GgufTypeSize(uint32_t type) {
  switch (static_cast<GgufType>(type)) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    case GgufType::kString:
    case GgufType::kArray:
      return 0;
  }
  return 0;
}

bool GgufTypeIsInteger(uint32_t type) {
  switch (static_cast<GgufType>(type)) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kUint64:
    case GgufType::kInt64:
      return true;
    default:
      return false;
  }
}

std::string GgmlTypeName(uint32_t ggml_type) {
  if (ggml_type < kGgmlTypeNames.size() && !kGgmlTypeNames[ggml_type].empty()) {
    return std::string(kGgmlTypeNames[ggml_type]);
  }
  return "type " + std::to_string(ggml_type);
}

std::optional<DType> DTypeFromGgml(uint32_t ggml_type) {
  switch (ggml_type) {
    case 0:
      return DType::kF32;
    case 1:
      return DType::kF16;
    case 2:
      return DType::kQ4_0;
    case 3:
      return DType::kQ4_1;
    case 6:
      return DType::kQ5_0;
    case 7:
      return DType::kQ5_1;
    case 8:
      return DType::kQ8_0;
    case 10:
      return DType::kQ2_K;
    case 11:
      return DType::kQ3_K;
    case 12:
      return DType::kQ4_K;
    case 13:
      return DType::kQ5_K;
    case 14:
      return DType::kQ6_K;
    case 15:
      return DType::kQ8_K;
    case 20:
      return DType::kIQ4_NL;
    case 26:
      return DType::kI32;
    case 30:
      return DType::kBF16;
    case 39:
      return DType::kMXFP4;
    default:
      return std::nullopt;
  }
}

uint32_t GgmlTypeFromDType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 0;
    case DType::kF16:
      return 1;
    case DType::kQ4_0:
      return 2;
    case DType::kQ4_1:
      return 3;
    case DType::kQ8_0:
      return 8;
    case DType::kI32:
      return 26;
    case DType::kBF16:
      return 30;
    case DType::kQ5_0:
      return 6;
    case DType::kQ5_1:
      return 7;
    case DType::kQ2_K:
      return 10;
    case DType::kQ3_K:
      return 11;
    case DType::kQ4_K:
      return 12;
    case DType::kQ5_K:
      return 13;
    case DType::kQ6_K:
      return 14;
    case DType::kQ8_K:
      return 15;
    case DType::kIQ4_NL:
      return 20;
    case DType::kMXFP4:
      return 39;
  }
  UC_CHECK(false, "unhandled DType %d", static_cast<int>(dtype));
  return 0;
}

std::string SupportedGgmlTypeNames() {
  std::string names;
  for (uint32_t id = 0; id < kGgmlTypeNames.size(); ++id) {
    if (!DTypeFromGgml(id)) continue;
    if (!names.empty()) names += ", ";
    names += kGgmlTypeNames[id];
  }
  return names;
}

}  // namespace uc::io
