// File: gguf_types.h
// -----------------------------------------------------------------------------
// Type codes of the GGUF container, shared by the reader (gguf.h) and the writer
// (gguf_writer.h): GgufType for metadata values, and the ggml tensor type ids with their names
// and the DType each supported one maps to (F32 0, F16 1, Q4_0 2, Q4_1 3, Q5_0 6, Q5_1 7,
// Q8_0 8, Q2_K 10, Q3_K 11, Q4_K 12, Q5_K 13, Q6_K 14, Q8_K 15, IQ4_NL 20, I32 26, BF16 30,
// MXFP4 39).
// Block layouts of the quantized types are in tensor/dtype.h. Stateless.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tensor/dtype.h"

namespace uc::io {

// Metadata value types, numbered as in the file.
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as little-endian uint32
inline constexpr uint32_t kGgufDefaultAlignment = 32;

// "uint8" ... "float64", "bool", "string", "array"; "type N" for unknown codes.
std::string GgufTypeName(uint32_t type);
// Bytes of one value of a fixed-size type; 0 for string, array and unknown codes.
uint32_t GgufTypeSize(uint32_t type);
bool GgufTypeIsInteger(uint32_t type);

// ggml's name for a tensor type id ("Q6_K"); "type N" for unknown ids.
std::string GgmlTypeName(uint32_t ggml_type);
// The DType a ggml type id maps to, or nullopt if this project does not support it.
std::optional<DType> DTypeFromGgml(uint32_t ggml_type);
// The ggml type id of a DType (every DType has one).
uint32_t GgmlTypeFromDType(DType dtype);
// The ggml names of the supported types, in id order: "F32, F16, Q4_0, ..." (for messages).
std::string SupportedGgmlTypeNames();

}  // namespace uc::io
