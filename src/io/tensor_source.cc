#include "io/tensor_source.h"

namespace uc::io {

Status TensorNotFoundError(const TensorSource& source, std::string_view name) {
  return NotFoundError(source.Describe() + ": tensor '" + std::string(name) + "' not found");
}

StatusOr<U8View> TensorSource::GetU8(std::string_view name) const {
  if (!Has(name)) return TensorNotFoundError(*this, name);
  return UnimplementedError(Describe() + ": tensor '" + std::string(name) +
                            "': U8 tensors cannot be read from this source");
}

StatusOr<Tensor> GetWithShape(const TensorSource& source, std::string_view name,
                              const Shape& expected) {
  UC_ASSIGN_OR_RETURN(Tensor tensor, source.Get(name));
  if (tensor.shape() != expected) {
    return InvalidArgumentError(source.Describe() + ": tensor '" + std::string(name) +
                                "' has shape " + ShapeToString(tensor.shape()) + ", expected " +
                                ShapeToString(expected));
  }
  return tensor;
}

}  // namespace uc::io
