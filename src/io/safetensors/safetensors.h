// File: safetensors.h
// -----------------------------------------------------------------------------
// Safetensors checkpoints, memory-mapped: SafetensorsFile reads one .safetensors file;
// SafetensorsCheckpoint reads a Hugging Face model directory, either a single
// model.safetensors or model.safetensors.index.json whose `weight_map` names the shard of
// every tensor.
//
//   UC_ASSIGN_OR_RETURN(auto ckpt, SafetensorsCheckpoint::Open(model_dir));
//   UC_ASSIGN_OR_RETURN(Tensor w, ckpt->Get("model.layers.0.mlp.up_proj.weight"));
//
// File layout: uint64 little-endian header length N, N bytes of JSON
// {"NAME": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {"key": "value"}}, then the data section; offsets are relative to it.
//
// Open() validates everything: N <= file size - 8 (OutOfRange otherwise) and below 100 MB, the
// header is a JSON object (parse errors give line, column and byte), every entry is complete,
// its offsets lie in the data section and hold exactly numel * element size bytes (no integer
// overflow). Errors name the file and the tensor. Tensors stored as F32, F16 or BF16 are
// supported; Get() on any other dtype (I8, F64, ...) returns Unimplemented naming the tensor and
// dtype, so such files can still be opened and listed. U8 tensors are read as bytes by GetU8().
//
// Immutable after Open(); thread-safe. Tensors from Get() borrow the mapping and keep it alive.
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
#include "io/mapped_file.h"
#include "io/tensor_source.h"

namespace uc::io {

inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

struct SafetensorsTensorInfo {
  std::string dtype_name;      // as stored: "F32", "BF16", "I64", ...
  std::optional<DType> dtype;  // nullopt when not supported
  Shape shape;                 // outermost first
  uint64_t begin = 0;          // data_offsets, relative to the data section
  uint64_t end = 0;
};

class SafetensorsFile : public TensorSource {
 public:
  static StatusOr<std::shared_ptr<const SafetensorsFile>> Open(const std::filesystem::path& path);

  const std::string& path() const { return file_->path(); }
  // File offset of the data section (8 + header length).
  uint64_t data_offset() const { return data_offset_; }
  // The `__metadata__` string map (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // nullptr if absent.
  const SafetensorsTensorInfo* FindTensor(std::string_view name) const;

  bool Has(std::string_view name) const override { return FindTensor(name) != nullptr; }
  StatusOr<Tensor> Get(std::string_view name) const override;
  // The bytes of a "U8" tensor, borrowed from the mapping (no copy, no alignment needed).
  StatusOr<U8View> GetU8(std::string_view name) const override;
  std::vector<std::string> TensorNames() const override;
  std::string Describe() const override { return file_->path(); }

 private:
  friend class SafetensorsParser;
  explicit SafetensorsFile(std::shared_ptr<const MappedFile> file) : file_(std::move(file)) {}

  std::shared_ptr<const MappedFile> file_;
  uint64_t data_offset_ = 0;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, SafetensorsTensorInfo, std::less<>> tensors_;
};

class SafetensorsCheckpoint : public TensorSource {
 public:
  // `path` is a model directory (model.safetensors.index.json is preferred over
  // model.safetensors) or a single .safetensors file. A shard that cannot be opened, or a
  // tensor the index lists but its shard lacks, is an error naming the index, the shard and
  // the tensor.
  static StatusOr<std::shared_ptr<const SafetensorsCheckpoint>> Open(
      const std::filesystem::path& path);

  const std::vector<std::shared_ptr<const SafetensorsFile>>& shards() const { return shards_; }

  bool Has(std::string_view name) const override;
  StatusOr<Tensor> Get(std::string_view name) const override;
  StatusOr<U8View> GetU8(std::string_view name) const override;
  std::vector<std::string> TensorNames() const override;
  std::string Describe() const override { return description_; }

 private:
  SafetensorsCheckpoint() = default;
  static StatusOr<std::shared_ptr<const SafetensorsCheckpoint>> OpenIndex(
      const std::filesystem::path& dir, const std::filesystem::path& index);

  std::string description_;
  std::vector<std::shared_ptr<const SafetensorsFile>> shards_;
  std::map<std::string, size_t, std::less<>> shard_of_;  // tensor name -> index in shards_
};

}  // namespace uc::io
