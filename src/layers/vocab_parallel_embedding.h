// File: vocab_parallel_embedding.h
// -----------------------------------------------------------------------------
// The vocabulary split over a TP group (vLLM's VocabParallelEmbedding and ParallelLMHead).
// Rank r owns token rows [vocab_start_index, vocab_end_index): num_embeddings_per_partition =
// ceil(vocab_size / tp) rows each, the last rank fewer when tp does not divide vocab_size (vLLM
// pads the vocabulary to a multiple of 64 first; nothing outside these classes depends on the
// ranges). Both load from the full [vocab_size, hidden_size] checkpoint table, in its stored
// dtype, as a view (Tensor::Slice: no copy); a tied LM head loads from the embedding table.
//
// VocabParallelEmbedding::Forward looks up the ids this rank owns, writes zeros for the others
// and all-reduces, so every rank gets the full embeddings — bitwise equal to Embedding (each
// value is a sum of one row and zeros).
// ParallelLmHead::Forward computes this rank's vocab columns of the logits and gathers them to
// the full [m, vocab_size] on every rank (use_all_gather) or on TP rank 0 only.
//
// The GroupCoordinator must outlive the layer; calls on one group come from one thread.
#pragma once

#include <memory>
#include <span>

#include "base/status.h"
#include "base/thread_pool.h"
#include "distributed/group_coordinator.h"
#include "kernels/ops.h"
#include "tensor/tensor.h"

namespace uc::layers {

// Rows of the vocabulary owned by one rank.
struct VocabShard {
  int64_t vocab_start_index = 0;             // first owned token id
  int64_t vocab_end_index = 0;               // one past the last owned token id
  int64_t num_embeddings_per_partition = 0;  // ceil(vocab_size / tp): the padded shard size
};
// REQUIRES: vocab_size >= 0, tp_size >= 1, 0 <= rank_in_group < tp_size.
VocabShard VocabShardFor(int64_t vocab_size, int rank_in_group, int tp_size);

class VocabParallelEmbedding {
 public:
  VocabParallelEmbedding() = default;

  // table: [vocab_size, hidden_size] full, any weight dtype. InvalidArgument unless 2-D with
  // vocab_size >= 1.
  static StatusOr<VocabParallelEmbedding> Load(const Tensor& table,
                                               distributed::GroupCoordinator& tp_group);

  int64_t vocab_size() const { return vocab_size_; }
  int64_t hidden_size() const { return table_.dim(1); }
  const VocabShard& shard() const { return shard_; }
  // [vocab_end_index - vocab_start_index, hidden_size], a view of the checkpoint.
  const Tensor& table() const { return table_; }

  // ids: m token ids, each in [0, vocab_size) (UC_CHECK); out: [m, hidden_size] F32,
  // preallocated; the full embeddings on every rank.
  void Forward(std::span<const int32_t> ids, Tensor& out) const;

 private:
  Tensor table_;  // [vocab_end_index - vocab_start_index, hidden_size]
  int64_t vocab_size_ = 0;
  VocabShard shard_;
  distributed::GroupCoordinator* tp_group_ = nullptr;
};

class ParallelLmHead {
 public:
  ParallelLmHead() = default;

  // weight: [vocab_size, hidden_size] full (lm_head.weight, or the embedding table when tied).
  // use_all_gather: true gathers the logits on every TP rank, false on TP rank 0 only.
  static StatusOr<ParallelLmHead> Load(const Tensor& weight,
                                       distributed::GroupCoordinator& tp_group,
                                       bool use_all_gather = true);

  int64_t vocab_size() const { return vocab_size_; }
  int64_t hidden_size() const { return weight_.dim(1); }
  const VocabShard& shard() const { return shard_; }
  bool use_all_gather() const { return use_all_gather_; }
  // How Forward multiplies (kernels::MatMulOptions); kExact and fastest by default. Packs this
  // rank's shard where the kernel for `options` has a layout of its own (kernels::PackedWeight).
  void set_matmul(const kernels::MatMulOptions& options);
  // True when Forward writes the full logits on this rank.
  bool has_logits() const;

  // x: [m, hidden_size] F32 -> logits: [m, vocab_size] F32, preallocated, written where
  // has_logits(); elsewhere `logits` is not touched and may be undefined. Allocates
  // temporaries for the shard when tp > 1.
  void Forward(const Tensor& x, Tensor& logits, ThreadPool* pool) const;

 private:
  Tensor weight_;  // [vocab_end_index - vocab_start_index, hidden_size]
  int64_t vocab_size_ = 0;
  VocabShard shard_;
  bool use_all_gather_ = true;
  // out = x . this rank's shardᵀ, from the packed copy where there is one.
  void MultiplyShard(const Tensor& x, Tensor& out, ThreadPool* pool) const;

  kernels::MatMulOptions matmul_;
  std::shared_ptr<const kernels::PackedWeight> packed_;  // of weight_, or null
  distributed::GroupCoordinator* tp_group_ = nullptr;
};

}  // namespace uc::layers
