// File: gguf_writer.h
// -----------------------------------------------------------------------------
// GgufWriter: writes a GGUF v3 file (little endian) that GgufFile reads back: metadata of every
// scalar type, strings, arrays of numbers or strings, and tensors of any DType (plain, block-
// quantized and K-quant types alike; gguf_types.h maps them to ggml ids), at the given alignment
// (written as `general.alignment` when it is not the default 32). Tensors are in memory (Add) or
// produced one at a time while writing (AddLazy).
//
//   GgufWriter writer;
//   writer.SetString("general.architecture", "llama");
//   writer.Set<uint32_t>("llama.block_count", 5);
//   writer.SetStringArray("tokenizer.ggml.tokens", tokens);
//   UC_RETURN_IF_ERROR(writer.Add("token_embd.weight", embedding));  // [vocab, dim]
//   UC_RETURN_IF_ERROR(writer.WriteFile(path));
//
// Shapes are given outermost first, as everywhere in this project; the file stores them
// reversed (ggml's innermost-first ne[]). Metadata keys are written in insertion order; setting
// a key again replaces its value. Not thread-safe. Tensors passed to Add() are referenced, not
// copied, until WriteFile().
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "base/status.h"
#include "io/file_sink.h"
#include "io/gguf/gguf.h"
#include "io/gguf/gguf_types.h"
#include "tensor/tensor.h"

namespace uc::io {

// The GGUF metadata type of a C++ scalar type.
template <typename T>
constexpr GgufType GgufTypeOf() {
  if constexpr (std::is_same_v<T, bool>)
    return GgufType::kBool;
  else if constexpr (std::is_same_v<T, uint8_t>)
    return GgufType::kUint8;
  else if constexpr (std::is_same_v<T, int8_t>)
    return GgufType::kInt8;
  else if constexpr (std::is_same_v<T, uint16_t>)
    return GgufType::kUint16;
  else if constexpr (std::is_same_v<T, int16_t>)
    return GgufType::kInt16;
  else if constexpr (std::is_same_v<T, uint32_t>)
    return GgufType::kUint32;
  else if constexpr (std::is_same_v<T, int32_t>)
    return GgufType::kInt32;
  else if constexpr (std::is_same_v<T, uint64_t>)
    return GgufType::kUint64;
  else if constexpr (std::is_same_v<T, int64_t>)
    return GgufType::kInt64;
  else if constexpr (std::is_same_v<T, float>)
    return GgufType::kFloat32;
  else {
    static_assert(std::is_same_v<T, double>, "not a GGUF scalar type");
    return GgufType::kFloat64;
  }
}

class GgufWriter {
 public:
  // REQUIRES: alignment is a power of two.
  explicit GgufWriter(uint32_t alignment = kGgufDefaultAlignment);

  // A scalar of type T (bool, [u]int8..64, float, double).
  template <typename T>
  void Set(std::string key, T value) {
    std::string payload(sizeof(T), '\0');
    std::memcpy(payload.data(), &value, sizeof(T));
    SetRaw(std::move(key), static_cast<uint32_t>(GgufTypeOf<T>()), std::move(payload));
  }
  void SetString(std::string key, std::string_view value);
  // An array of scalars of type T.
  template <typename T>
  void SetArray(std::string key, const std::vector<T>& values) {
    std::string payload = ArrayHeader(GgufTypeOf<T>(), values.size());
    for (const T value : values) {
      const size_t at = payload.size();
      payload.resize(at + sizeof(T));
      std::memcpy(payload.data() + at, &value, sizeof(T));
    }
    SetRaw(std::move(key), static_cast<uint32_t>(GgufType::kArray), std::move(payload));
  }
  void SetStringArray(std::string key, const std::vector<std::string>& values);
  // A copy of `value` as read from a GgufFile: same type, same bytes.
  void SetValue(std::string key, const GgufValue& value);

  // InvalidArgument for a duplicate name or a last dimension that is not whole blocks.
  Status Add(std::string name, Tensor tensor);
  // `produce` runs during WriteFile() and must return `dtype` and `shape`.
  Status AddLazy(std::string name, DType dtype, Shape shape, TensorProducer produce);

  // Writes PATH.tmp and renames it to `path`.
  Status WriteFile(const std::filesystem::path& path) const;

 private:
  struct Entry {
    std::string key;
    uint32_t type;
    std::string payload;  // encoded value, without key and type
  };

  static std::string ArrayHeader(GgufType element_type, uint64_t count);
  void SetRaw(std::string key, uint32_t type, std::string payload);
  Status Check(const std::string& name, DType dtype, const Shape& shape) const;
  uint64_t Align(uint64_t offset) const {
    return (offset + alignment_ - 1) / alignment_ * alignment_;
  }
  std::string EncodeHeader() const;

  uint32_t alignment_;
  std::vector<Entry> metadata_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace uc::io
