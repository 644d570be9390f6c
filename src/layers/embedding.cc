#include "layers/embedding.h"

#include "kernels/ops.h"

namespace uc::layers {

Embedding::Embedding(Tensor table) : table_(std::move(table)) {
  UC_CHECK(table_.rank() == 2, "embedding table must be 2-D");
}

void Embedding::Forward(std::span<const int32_t> ids, Tensor& out) const {
  kernels::EmbeddingLookup(table_, ids, out);
}

}  // namespace uc::layers
