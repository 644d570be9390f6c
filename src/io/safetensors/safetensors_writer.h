// File: safetensors_writer.h
// -----------------------------------------------------------------------------
// SafetensorsWriter: writes named F32/F16/BF16 tensors and a `__metadata__` string map to a
// .safetensors file that SafetensorsFile reads back. Tensors are either already in memory
// (Add) or produced one at a time while writing (AddLazy), so tools can write checkpoints
// larger than memory.
//
//   SafetensorsWriter writer;
//   UC_RETURN_IF_ERROR(writer.Add("model.norm.weight", norm));
//   writer.SetMetadata("format", "pt");
//   UC_RETURN_IF_ERROR(writer.WriteFile(dir / "model.safetensors"));
//
// The header is padded with spaces to a multiple of 8 bytes and the data is ordered by
// element size (4-byte types first), so every tensor is naturally aligned in the file.
// Not thread-safe. Tensors passed to Add() are referenced (not copied) until WriteFile().
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/file_sink.h"
#include "tensor/tensor.h"

namespace uc::io {

class SafetensorsWriter {
 public:
  // InvalidArgument for a duplicate or reserved name or a dtype other than F32/F16/BF16.
  Status Add(std::string name, Tensor tensor);
  // `produce` runs during WriteFile() and must return `dtype` and `shape`.
  Status AddLazy(std::string name, DType dtype, Shape shape, TensorProducer produce);
  void SetMetadata(std::string key, std::string value);

  // Writes PATH.tmp and renames it to `path` (`durable`: fsynced, see FileSink::Commit).
  Status WriteFile(const std::filesystem::path& path, bool durable = false) const;

 private:
  Status Check(const std::string& name, DType dtype) const;

  std::vector<PendingTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace uc::io
