// File: parallel_linear.h
// -----------------------------------------------------------------------------
// Tensor-parallel linear layers (vLLM's linear.py names and semantics), y = x·Wᵀ (+ b) with W
// split over the ranks of a TP group:
//   ColumnParallelLinear        W split along the output dim: this rank computes
//                               output_size_per_partition columns of y; no communication
//                               unless gather_output.
//   MergedColumnParallelLinear  several column-parallel outputs sharing one input (gate_proj and
//                               up_proj), one output tensor each.
//   QKVParallelLinear           q/k/v projections split by attention heads; KV heads replicated
//                               when tensor_parallel_size >= total_num_kv_heads.
//   RowParallelLinear           W split along the input dim: each rank computes a partial sum and
//                               Forward all-reduces it, so the output is the full tensor.
// The column-then-row pairing (qkv -> attention -> o_proj, gate/up -> SiLU·mul -> down) needs
// one all-reduce per block.
//
// Loaders take the FULL checkpoint tensor ([output_size, input_size], in its stored dtype,
// possibly GGUF blocks) and keep only this rank's slice, chosen by tp_group.rank_in_group():
// row slices are views of the checkpoint (Tensor::Slice, no copy); RowParallelLinear's column
// slice is copied (one [output_size, input_size_per_partition] tensor per rank). Shape errors
// are InvalidArgument naming the dimension, the size and the TP size.
//
// Layers keep a pointer to the GroupCoordinator, which must outlive them. Copying a layer is
// cheap (tensor handles). Forward is const but communicates through the group, so calls on one
// group must come from one thread in the same order on every rank.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "distributed/group_coordinator.h"
#include "layers/linear.h"
#include "tensor/tensor.h"

namespace uc::layers {

// One rank's share [begin, end) of a dimension split over a TP group.
struct Partition {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

// Rank `rank`'s share of `size` elements split over `tp` ranks in whole units of `unit` elements,
// as evenly as the units allow: with q, s = divmod(size / unit, tp), ranks [0, s) take q + 1
// units and the others q. Where unit divides size / tp that is the even split
// [rank·size/tp, (rank+1)·size/tp). InvalidArgument naming `what` unless unit >= 1 divides size
// and there are at least tp units (no rank is left without any).
StatusOr<Partition> SplitInUnits(int64_t size, int tp, int rank, int64_t unit,
                                 std::string_view what);

class ColumnParallelLinear {
 public:
  ColumnParallelLinear() = default;

  // weight: [output_size, input_size] full; bias: [output_size] full, or undefined (Tensor()).
  // InvalidArgument unless output_size % tensor_parallel_size == 0 and shapes agree.
  static StatusOr<ColumnParallelLinear> Load(const Tensor& weight, const Tensor& bias,
                                             distributed::GroupCoordinator& tp_group,
                                             bool gather_output = false);

  int64_t input_size() const { return linear_.input_size(); }
  int64_t output_size() const { return output_size_; }
  int64_t output_size_per_partition() const { return linear_.output_size(); }
  bool gather_output() const { return gather_output_; }
  // [output_size_per_partition, input_size], a view of the checkpoint.
  const Tensor& weight() const { return linear_.weight(); }
  // How Forward multiplies quantized weights (Linear::set_matmul).
  void set_matmul(const kernels::MatMulOptions& options) { linear_.set_matmul(options); }

  // x: [m, input_size] F32 -> y: [m, output_size_per_partition] F32, or [m, output_size] (the
  // same on every rank) when gather_output. y preallocated; gather_output allocates a
  // [m, output_size_per_partition] temporary per call.
  void Forward(const Tensor& x, Tensor& y, ThreadPool* pool) const;

 private:
  Linear linear_;  // weight [output_size_per_partition, input_size], bias sharded alike
  int64_t output_size_ = 0;
  bool gather_output_ = false;
  distributed::GroupCoordinator* tp_group_ = nullptr;
};

// Column-parallel projections of one input fused in one layer (vLLM's output_sizes): for
// Llama's MLP, weights = {gate_proj [intermediate_size, hidden_size], up_proj [same]}, and
// Forward writes gate [m, intermediate_size / tp] and up [m, intermediate_size / tp]. Each
// segment keeps its own weight view (kernels::MatMul needs contiguous [n, k] rows, and
// concatenating the checkpoint's tensors would copy them), so Forward runs one MatMul each.
class MergedColumnParallelLinear {
 public:
  MergedColumnParallelLinear() = default;

  // weights[i]: [output_sizes[i], input_size] full; biases: empty, or one per weight ([output
  // sizes[i]] or undefined). split_unit 0: each output splits evenly; >= 1: SplitInUnits with
  // that unit (an MLP's gate/up, given the down projection's unit). InvalidArgument unless every
  // output size splits so, all input sizes agree and there is at least one weight.
  static StatusOr<MergedColumnParallelLinear> Load(std::span<const Tensor> weights,
                                                   std::span<const Tensor> biases,
                                                   distributed::GroupCoordinator& tp_group,
                                                   int64_t split_unit = 0);

  int num_outputs() const { return static_cast<int>(segments_.size()); }
  int64_t input_size() const { return segments_.front().input_size(); }
  // This rank's share of output_sizes[i] (output_sizes[i] / tp unless split in units).
  int64_t output_size_per_partition(int i) const { return segments_[i].output_size(); }
  // [output_size_per_partition(i), input_size], a view of the checkpoint.
  const Tensor& weight(int i) const { return segments_[i].weight(); }
  // How Forward multiplies quantized weights (Linear::set_matmul).
  void set_matmul(const kernels::MatMulOptions& options) {
    for (Linear& segment : segments_) segment.set_matmul(options);
  }

  // x: [m, input_size] F32; outputs[i]: [m, output_size_per_partition(i)] F32, preallocated.
  // REQUIRES: outputs.size() == num_outputs().
  void Forward(const Tensor& x, std::span<Tensor> outputs, ThreadPool* pool) const;
  // Two-output form (gate, up). REQUIRES: num_outputs() == 2.
  void Forward(const Tensor& x, Tensor& out0, Tensor& out1, ThreadPool* pool) const;

 private:
  std::vector<Linear> segments_;  // segment i: [output_sizes[i] / tp, input_size]
};

// Full checkpoint tensors of the three attention projections.
struct QKVWeights {
  Tensor q;                       // [total_num_heads * head_size, hidden_size]
  Tensor k;                       // [total_num_kv_heads * head_size, hidden_size]
  Tensor v;                       // [total_num_kv_heads * head_size, hidden_size]
  Tensor q_bias, k_bias, v_bias;  // [rows of q / k / v] each, or all undefined (no bias)
};

// Q, K and V projections split by heads. Rank r holds query heads
// [r·num_heads_per_rank, (r+1)·num_heads_per_rank). KV heads:
//   tp <= total_num_kv_heads: num_kv_heads_per_rank = total_num_kv_heads / tp, a contiguous run;
//   tp >  total_num_kv_heads: num_kv_heads_per_rank = 1, num_kv_head_replicas =
//        tp / total_num_kv_heads, rank r holding KV head r / num_kv_head_replicas — the one its
//        query heads attend to, so attention needs no communication.
// Two ways to load: Load() with all three tensors, or Create() then LoadWeight() per shard id
// ("q", "k", "v"; vLLM's weight_loader), e.g. while walking a checkpoint.
class QKVParallelLinear {
 public:
  QKVParallelLinear() = default;

  // Validates the sizes: InvalidArgument unless total_num_heads % tp == 0 and either
  // total_num_kv_heads % tp == 0 or tp % total_num_kv_heads == 0, and
  // total_num_heads % total_num_kv_heads == 0; every size >= 1. The message names the
  // dimension (num_attention_heads / num_key_value_heads) and tensor_parallel_size.
  static StatusOr<QKVParallelLinear> Create(int64_t hidden_size, int64_t head_size,
                                            int64_t total_num_heads, int64_t total_num_kv_heads,
                                            bool bias, distributed::GroupCoordinator& tp_group);
  // shard_id "q": weight [total_num_heads * head_size, hidden_size]; "k"/"v": [total_num_kv_heads
  // * head_size, hidden_size]; bias [rows] iff Create(bias=true), else undefined.
  // InvalidArgument for another shard id or a shape that does not match.
  Status LoadWeight(std::string_view shard_id, const Tensor& weight, const Tensor& bias = Tensor());
  // Create() with sizes taken from the arguments, then LoadWeight("q"/"k"/"v").
  static StatusOr<QKVParallelLinear> Load(const QKVWeights& weights, int64_t head_size,
                                          int64_t total_num_heads, int64_t total_num_kv_heads,
                                          distributed::GroupCoordinator& tp_group);

  int64_t hidden_size() const { return hidden_size_; }
  int64_t head_size() const { return head_size_; }
  int64_t total_num_heads() const { return total_num_heads_; }
  int64_t total_num_kv_heads() const { return total_num_kv_heads_; }
  int64_t num_heads_per_rank() const { return num_heads_per_rank_; }
  int64_t num_kv_heads_per_rank() const { return num_kv_heads_per_rank_; }
  int64_t num_kv_head_replicas() const { return num_kv_head_replicas_; }
  int64_t q_size_per_rank() const { return num_heads_per_rank_ * head_size_; }
  int64_t kv_size_per_rank() const { return num_kv_heads_per_rank_ * head_size_; }
  // First global KV head held by this rank.
  int64_t kv_head_start() const { return kv_head_start_; }
  bool loaded() const;
  // How Forward multiplies quantized weights (Linear::set_matmul).
  void set_matmul(const kernels::MatMulOptions& options) {
    for (Linear* proj : {&q_proj_, &k_proj_, &v_proj_}) proj->set_matmul(options);
  }

  // x: [m, hidden_size] F32 -> q: [m, q_size_per_rank()], k, v: [m, kv_size_per_rank()] F32,
  // preallocated. REQUIRES: loaded().
  void Forward(const Tensor& x, Tensor& q, Tensor& k, Tensor& v, ThreadPool* pool) const;

 private:
  int64_t hidden_size_ = 0, head_size_ = 0;
  int64_t total_num_heads_ = 0, total_num_kv_heads_ = 0;
  int64_t num_heads_per_rank_ = 0, num_kv_heads_per_rank_ = 0, num_kv_head_replicas_ = 1;
  int64_t kv_head_start_ = 0;
  bool bias_ = false;
  int rank_in_group_ = 0;
  Linear q_proj_;  // [num_heads_per_rank * head_size, hidden_size]
  Linear k_proj_;  // [num_kv_heads_per_rank * head_size, hidden_size]
  Linear v_proj_;  // [num_kv_heads_per_rank * head_size, hidden_size]
};

struct RowParallelOptions {
  // true: Forward's x is already this rank's [m, input_size_per_partition] (the output of a
  // column-parallel layer); false: x is the full [m, input_size] and Forward takes its columns.
  bool input_is_parallel = true;
  // true: Forward all-reduces, so y is the full result on every rank; false: y is this rank's
  // partial sum (no bias allowed: it would be added once per rank).
  bool reduce_results = true;
  // 0: input_size splits evenly over the ranks; >= 1: in whole units of that many columns, as
  // SplitInUnits says (an MLP's down projection: its quantization block, DTypeBlockSize).
  int64_t split_unit = 0;
};

class RowParallelLinear {
 public:
  RowParallelLinear() = default;

  // weight: [output_size, input_size] full; bias: [output_size] or undefined. Copies this rank's
  // columns (the even split [r·input_size/tp, (r+1)·input_size/tp), or SplitInUnits with
  // options.split_unit) into owned storage; for a block-quantized dtype they must be whole
  // blocks. InvalidArgument unless the input size splits so, on block boundaries, shapes agree,
  // and not (bias && !reduce_results).
  static StatusOr<RowParallelLinear> Load(const Tensor& weight, const Tensor& bias,
                                          distributed::GroupCoordinator& tp_group,
                                          RowParallelOptions options = RowParallelOptions());

  int64_t input_size() const { return input_size_; }
  int64_t input_size_per_partition() const { return linear_.input_size(); }
  int64_t output_size() const { return linear_.output_size(); }
  const RowParallelOptions& options() const { return options_; }
  // [output_size, input_size_per_partition], owned.
  const Tensor& weight() const { return linear_.weight(); }
  // How Forward multiplies quantized weights (Linear::set_matmul).
  void set_matmul(const kernels::MatMulOptions& options) { linear_.set_matmul(options); }

  // x: [m, input_size_per_partition] (input_is_parallel) or [m, input_size] F32 ->
  // y: [m, output_size] F32, preallocated. The bias is added on TP rank 0 only, before the
  // all-reduce (vLLM). input_is_parallel == false allocates a [m, input_size_per_partition]
  // temporary per call.
  void Forward(const Tensor& x, Tensor& y, ThreadPool* pool) const;

 private:
  Linear linear_;  // weight [output_size, input_size_per_partition], bias only on TP rank 0
  int64_t input_size_ = 0;
  int64_t input_begin_ = 0;  // this rank's first column of the full input
  RowParallelOptions options_;
  distributed::GroupCoordinator* tp_group_ = nullptr;
};

// Copies columns [begin, end) of every row of `weight` [rows, cols] into a new owned tensor
// [rows, end - begin] of the same dtype. InvalidArgument (naming `what`) when a block-quantized
// row would be cut inside a block. Used for RowParallelLinear's input split.
StatusOr<Tensor> CopyColumns(const Tensor& weight, int64_t begin, int64_t end,
                             std::string_view what);

}  // namespace uc::layers
