// File: gguf.h
// -----------------------------------------------------------------------------
// GgufFile: a GGUF v2/v3 (little-endian) file, memory-mapped: typed metadata and the tensors,
// as views into the mapping.
//
//   UC_ASSIGN_OR_RETURN(auto gguf, GgufFile::Open(path));
//   UC_ASSIGN_OR_RETURN(int64_t num_layers, gguf->GetInt("llama.block_count"));
//   UC_ASSIGN_OR_RETURN(Tensor wq, gguf->Get("blk.0.attn_q.weight"));  // [out, in]
//
// Open() validates the whole layout: every read is bounds-checked, counts are checked against
// the file size, tensor data of supported types must lie inside the file and rows must be whole
// blocks. GGUF stores dimensions innermost first; shapes here are outermost first (reversed).
// Tensors of types this project does not support (e.g. Q6_K) do not stop Open(); Get() on one
// returns Unimplemented, so such files can still be inspected.
//
// Metadata values are not copied at Open(): strings and arrays are views into the mapping and
// are materialized by the Get*() accessors, so a 50k-entry vocabulary opens quickly.
//
// Immutable after Open(); thread-safe. Views (GgufValue, string_views) are valid while the
// GgufFile lives; tensors from Get() keep the mapping alive on their own.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "io/gguf/gguf_types.h"
#include "io/mapped_file.h"
#include "io/tensor_source.h"

namespace uc::io {

// One metadata value: a scalar, a string or an array of scalars or strings.
class GgufValue {
 public:
  GgufValue(GgufType type, GgufType element_type, uint64_t count, const std::byte* payload)
      : type_(type), element_type_(element_type), count_(count), payload_(payload) {}

  GgufType type() const { return type_; }
  bool is_array() const { return type_ == GgufType::kArray; }
  // REQUIRES: is_array().
  GgufType element_type() const { return element_type_; }
  // Elements of an array; bytes of a string; 1 for other scalars.
  uint64_t count() const { return count_; }
  // "uint32", "string", "array[string]".
  std::string TypeName() const;

  // Integer scalars; nullopt for other types or a uint64 above INT64_MAX.
  std::optional<int64_t> AsInt() const;
  // Float or integer scalars.
  std::optional<double> AsFloat() const;
  std::optional<bool> AsBool() const;
  // View into the mapping.
  std::optional<std::string_view> AsString() const;

  // Element `i` of an array of numbers (REQUIRES: is_array(), i < count(), numeric elements).
  int64_t IntAt(uint64_t i) const;
  double FloatAt(uint64_t i) const;
  // Views of every element of an array of strings (REQUIRES: element_type() == kString).
  std::vector<std::string_view> StringViews() const;
  // The encoded value as stored (scalar bytes, string bytes, or the first array element), for
  // copying a value verbatim (GgufWriter::SetValue).
  const std::byte* payload() const { return payload_; }

 private:
  GgufType type_;
  GgufType element_type_;
  uint64_t count_;
  // Scalar bytes, string bytes, or the first array element; points into the mapping.
  const std::byte* payload_;
};

// Where a tensor lies, as recorded in the file.
struct GgufTensorInfo {
  std::string name;
  Shape shape;         // outermost first (the file's ne[] reversed)
  uint32_t ggml_type;  // see gguf_types.h
  uint64_t offset;     // from the start of the data section
};

class GgufFile : public TensorSource {
 public:
  static StatusOr<std::shared_ptr<const GgufFile>> Open(const std::filesystem::path& path);

  uint32_t version() const { return version_; }
  const std::string& path() const { return file_->path(); }
  uint64_t alignment() const { return alignment_; }
  // File offset of the (aligned) data section.
  uint64_t data_offset() const { return data_offset_; }

  // Metadata keys in file order.
  std::vector<std::string> Keys() const;
  // nullptr if `key` is absent.
  const GgufValue* Find(std::string_view key) const;
  // Typed accessors. NotFound "FILE: metadata key 'K' missing"; InvalidArgument
  // "FILE: metadata key 'K' is T, expected U" on a type mismatch.
  StatusOr<std::string> GetString(std::string_view key) const;
  StatusOr<int64_t> GetInt(std::string_view key) const;   // any integer type
  StatusOr<double> GetFloat(std::string_view key) const;  // float32/64 or any integer
  StatusOr<bool> GetBool(std::string_view key) const;
  StatusOr<std::vector<std::string>> GetStringArray(std::string_view key) const;
  StatusOr<std::vector<float>> GetFloatArray(std::string_view key) const;    // float or int array
  StatusOr<std::vector<int32_t>> GetInt32Array(std::string_view key) const;  // any int array

  const std::vector<GgufTensorInfo>& tensor_infos() const { return tensors_; }
  // nullptr if absent.
  const GgufTensorInfo* FindTensor(std::string_view name) const;

  // TensorSource. Get() returns Unimplemented for unsupported ggml types.
  bool Has(std::string_view name) const override { return FindTensor(name) != nullptr; }
  StatusOr<Tensor> Get(std::string_view name) const override;
  std::vector<std::string> TensorNames() const override;
  std::string Describe() const override { return file_->path(); }

 private:
  friend class GgufParser;
  explicit GgufFile(std::shared_ptr<const MappedFile> file) : file_(std::move(file)) {}

  StatusOr<const GgufValue*> FindTyped(std::string_view key) const;
  Status TypeMismatch(std::string_view key, const GgufValue& value,
                      std::string_view expected) const;

  std::shared_ptr<const MappedFile> file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;  // file order
  std::map<std::string, size_t, std::less<>> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;  // file order
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace uc::io
