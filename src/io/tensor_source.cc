#include "io/tensor_source.h"

namespace uc::io {

Status TensorNotFoundError(const TensorSource& source, std::string_view name) {
  return NotFoundError(source.Describe() + ": tensor '" + std::string(name) + "' not found");
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
