// File: embedding.h
// -----------------------------------------------------------------------------
// Token embedding table lookup (any stored dtype, converted per row) and the LM head that
// projects final hidden states onto the vocabulary (tied to the embedding or separate).
#pragma once

#include <span>

#include "base/thread_pool.h"
#include "tensor/tensor.h"

namespace uc::layers {

class Embedding {
 public:
  Embedding() = default;
  explicit Embedding(Tensor table);  // [vocab_size, hidden_size]

  // out: [ids.size(), hidden_size] F32. REQUIRES: every id in [0, vocab_size).
  void Forward(std::span<const int32_t> ids, Tensor& out) const;
  int64_t vocab_size() const { return table_.dim(0); }
  const Tensor& table() const { return table_; }

 private:
  Tensor table_;  // [vocab_size, hidden_size]
};

}  // namespace uc::layers
