// File: tensor_source.h
// -----------------------------------------------------------------------------
// TensorSource: the one interface model loaders read weights through, whatever the file
// layout (safetensors file or sharded directory, GGUF, llama2.c .bin). Names are those the
// layout stores (Hugging Face names for safetensors and llama2.c, GGUF names for GGUF).
//
//   UC_ASSIGN_OR_RETURN(Tensor w, source.Get("model.layers.0.mlp.up_proj.weight"));
//
// Returned tensors are views that borrow the mapped file and keep it alive on their own; they
// stay valid after the source is destroyed. Implementations are immutable after opening and
// thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tensor/tensor.h"

namespace uc::io {

// The stored bytes of a U8 tensor (a dtype Tensor has not: packed data such as MXFP4 blocks),
// valid while the TensorSource that returned them lives.
struct U8View {
  Shape shape;
  std::span<const uint8_t> bytes;  // numel bytes
};

class TensorSource {
 public:
  virtual ~TensorSource() = default;

  virtual bool Has(std::string_view name) const = 0;
  // The tensor `name` in its stored dtype, shape outermost first. NotFound
  // "FILE: tensor 'NAME' not found" if absent; Unimplemented if its dtype is not supported.
  virtual StatusOr<Tensor> Get(std::string_view name) const = 0;
  // The tensor `name` stored as U8, which Get() cannot return: NotFound if absent,
  // InvalidArgument naming the stored dtype if it is not U8, Unimplemented where the source
  // holds no U8 tensors (the default; safetensors files do).
  virtual StatusOr<U8View> GetU8(std::string_view name) const;
  // All tensor names, sorted.
  virtual std::vector<std::string> TensorNames() const = 0;
  // The file or directory read, for messages.
  virtual std::string Describe() const = 0;
};

// The NotFound status every implementation returns for a missing tensor.
Status TensorNotFoundError(const TensorSource& source, std::string_view name);

// Get() that also requires `expected` as the shape: InvalidArgument
// "FILE: tensor 'NAME' has shape [a, b], expected [c, d]" otherwise.
StatusOr<Tensor> GetWithShape(const TensorSource& source, std::string_view name,
                              const Shape& expected);

}  // namespace uc::io
