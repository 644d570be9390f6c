#include "layers/vocab_parallel_embedding.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "kernels/ops.h"

namespace uc::layers {
namespace {

using distributed::GroupCoordinator;

Status CheckTable(const Tensor& table, std::string_view layer) {
  if (table.raw() == nullptr || table.rank() != 2 || table.dim(0) < 1) {
    return InvalidArgumentError(std::string(layer) +
                                ": table must be a 2-D [vocab_size, hidden_size] tensor with "
                                "vocab_size >= 1, got " +
                                ShapeToString(table.shape()));
  }
  return OkStatus();
}

}  // namespace

VocabShard VocabShardFor(int64_t vocab_size, int rank_in_group, int tp_size) {
  UC_CHECK(vocab_size >= 0 && tp_size >= 1 && rank_in_group >= 0 && rank_in_group < tp_size,
           "VocabShardFor(%lld, %d, %d)", static_cast<long long>(vocab_size), rank_in_group,
           tp_size);
  VocabShard shard;
  shard.num_embeddings_per_partition = (vocab_size + tp_size - 1) / tp_size;
  shard.vocab_start_index =
      std::min(vocab_size, rank_in_group * shard.num_embeddings_per_partition);
  shard.vocab_end_index =
      std::min(vocab_size, (rank_in_group + 1) * shard.num_embeddings_per_partition);
  return shard;
}

StatusOr<VocabParallelEmbedding> VocabParallelEmbedding::Load(const Tensor& table,
                                                              GroupCoordinator& tp_group) {
  UC_RETURN_IF_ERROR(CheckTable(table, "VocabParallelEmbedding"));
  VocabParallelEmbedding layer;
  layer.vocab_size_ = table.dim(0);
  layer.shard_ = VocabShardFor(layer.vocab_size_, tp_group.rank_in_group(), tp_group.world_size());
  layer.table_ = table.Slice(layer.shard_.vocab_start_index, layer.shard_.vocab_end_index);
  layer.tp_group_ = &tp_group;
  return layer;
}

void VocabParallelEmbedding::Forward(std::span<const int32_t> ids, Tensor& out) const {
  UC_CHECK(out.rank() == 2 && out.dtype() == DType::kF32 &&
               out.dim(0) == static_cast<int64_t>(ids.size()) && out.dim(1) == hidden_size(),
           "VocabParallelEmbedding: out %s is not [%zu, %lld] F32",
           ShapeToString(out.shape()).c_str(), ids.size(), static_cast<long long>(hidden_size()));
  if (tp_group_->world_size() == 1) {
    kernels::EmbeddingLookup(table_, ids, out);
    return;
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids[i];
    UC_CHECK(id >= 0 && id < vocab_size_, "token id %lld outside the vocabulary [0, %lld)",
             static_cast<long long>(id), static_cast<long long>(vocab_size_));
    Tensor row = out.Slice(static_cast<int64_t>(i), static_cast<int64_t>(i) + 1);
    if (id >= shard_.vocab_start_index && id < shard_.vocab_end_index) {
      const int32_t local = static_cast<int32_t>(id - shard_.vocab_start_index);
      kernels::EmbeddingLookup(table_, std::span<const int32_t>(&local, 1), row);
    } else {
      std::memset(row.raw(), 0, static_cast<size_t>(row.nbytes()));
    }
  }
  tp_group_->AllReduce(out);
}

StatusOr<ParallelLmHead> ParallelLmHead::Load(const Tensor& weight, GroupCoordinator& tp_group,
                                              bool use_all_gather) {
  UC_RETURN_IF_ERROR(CheckTable(weight, "ParallelLmHead"));
  ParallelLmHead layer;
  layer.vocab_size_ = weight.dim(0);
  layer.shard_ = VocabShardFor(layer.vocab_size_, tp_group.rank_in_group(), tp_group.world_size());
  layer.weight_ = weight.Slice(layer.shard_.vocab_start_index, layer.shard_.vocab_end_index);
  layer.use_all_gather_ = use_all_gather;
  layer.tp_group_ = &tp_group;
  return layer;
}

bool ParallelLmHead::has_logits() const {
  return use_all_gather_ || tp_group_->rank_in_group() == 0;
}

void ParallelLmHead::set_matmul(const kernels::MatMulOptions& options) {
  matmul_ = options;
  packed_ = weight_.defined() ? kernels::PackedWeight::Pack(weight_, options) : nullptr;
}

void ParallelLmHead::MultiplyShard(const Tensor& x, Tensor& out, ThreadPool* pool) const {
  if (packed_ != nullptr) {
    kernels::MatMul(x, *packed_, out, pool);
  } else {
    kernels::MatMul(x, weight_, out, pool, matmul_);
  }
}

void ParallelLmHead::Forward(const Tensor& x, Tensor& logits, ThreadPool* pool) const {
  const int tp = tp_group_->world_size();
  if (tp == 1) {
    MultiplyShard(x, logits, pool);
    return;
  }
  const int64_t m = x.dim(0);
  const int64_t part = shard_.num_embeddings_per_partition;
  const int64_t owned = shard_.vocab_end_index - shard_.vocab_start_index;
  // Every rank contributes a [m, part] shard so the gather is uniform; a short last shard is
  // padded with zeros that are dropped below.
  Tensor shard = Tensor::Empty({m, part}, DType::kF32);
  if (owned == part) {
    MultiplyShard(x, shard, pool);
  } else {
    Tensor local = Tensor::Empty({m, owned}, DType::kF32);
    MultiplyShard(x, local, pool);
    std::memset(shard.raw(), 0, static_cast<size_t>(shard.nbytes()));
    for (int64_t i = 0; i < m; ++i) {
      std::memcpy(shard.data<float>() + i * part, local.data<float>() + i * owned,
                  static_cast<size_t>(owned) * sizeof(float));
    }
  }
  const bool padded = part * tp != vocab_size_;
  if (has_logits()) {
    UC_CHECK(logits.rank() == 2 && logits.dim(0) == m && logits.dim(1) == vocab_size_,
             "ParallelLmHead: logits %s is not [%lld, %lld]", ShapeToString(logits.shape()).c_str(),
             static_cast<long long>(m), static_cast<long long>(vocab_size_));
  }
  Tensor full;  // [m, part * tp] on ranks that receive the logits
  if (has_logits()) full = padded ? Tensor::Empty({m, part * tp}, DType::kF32) : logits;
  if (use_all_gather_) {
    tp_group_->AllGather(shard, full, /*dim=*/-1);
  } else {
    tp_group_->Gather(shard, full, /*dst_in_group=*/0, /*dim=*/-1);
  }
  if (!has_logits() || !padded) return;
  for (int64_t i = 0; i < m; ++i) {
    std::memcpy(logits.data<float>() + i * vocab_size_, full.data<float>() + i * part * tp,
                static_cast<size_t>(vocab_size_) * sizeof(float));
  }
}

}  // namespace uc::layers
