#include "layers/parallel_linear.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "base/file_pages.h"
#include "kernels/ops.h"

namespace uc::layers {
namespace {

using distributed::GroupCoordinator;

std::string Str(int64_t v) { return std::to_string(v); }

bool Defined(const Tensor& t) { return t.raw() != nullptr && t.numel() > 0; }

Status CheckMatrix(const Tensor& weight, std::string_view layer) {
  if (!Defined(weight) || weight.rank() != 2) {
    return InvalidArgumentError(std::string(layer) + ": weight must be a 2-D [output_size, " +
                                "input_size] tensor, got " + ShapeToString(weight.shape()));
  }
  return OkStatus();
}

Status CheckBias(const Tensor& bias, int64_t output_size, std::string_view layer) {
  if (!Defined(bias)) return OkStatus();
  if (bias.rank() != 1 || bias.dim(0) != output_size) {
    return InvalidArgumentError(std::string(layer) + ": bias " + ShapeToString(bias.shape()) +
                                " does not match output_size " + Str(output_size));
  }
  if (bias.dtype() != DType::kF32 && bias.dtype() != DType::kF16 && bias.dtype() != DType::kBF16) {
    return InvalidArgumentError(std::string(layer) + ": bias dtype " +
                                std::string(DTypeName(bias.dtype())) + " is not a float type");
  }
  return OkStatus();
}

Status CheckDivisible(int64_t size, int tp, std::string_view layer, std::string_view dim) {
  if (size % tp != 0) {
    return InvalidArgumentError(std::string(layer) + ": " + std::string(dim) + " " + Str(size) +
                                " is not divisible by tensor_parallel_size " + Str(tp));
  }
  return OkStatus();
}

// This rank's share of `size`: the even split (split_unit 0), else SplitInUnits.
StatusOr<Partition> ShareOf(int64_t size, const GroupCoordinator& tp_group, int64_t split_unit,
                            std::string_view layer, std::string_view dim) {
  const int tp = tp_group.world_size();
  const int r = tp_group.rank_in_group();
  if (split_unit == 0) {
    UC_RETURN_IF_ERROR(CheckDivisible(size, tp, layer, dim));
    return Partition{r * (size / tp), (r + 1) * (size / tp)};
  }
  return SplitInUnits(size, tp, r, split_unit, std::string(layer) + ": " + std::string(dim));
}

// Rows `part` of a full [n, ...] tensor (undefined stays undefined): a view.
Tensor RowShard(const Tensor& full, Partition part) {
  if (!Defined(full)) return Tensor();
  return full.Slice(part.begin, part.end);
}

}  // namespace

StatusOr<Partition> SplitInUnits(int64_t size, int tp, int rank, int64_t unit,
                                 std::string_view what) {
  UC_CHECK(tp >= 1 && 0 <= rank && rank < tp, "SplitInUnits: rank %d of %d", rank, tp);
  if (unit < 1 || size % unit != 0) {
    return InvalidArgumentError(std::string(what) + " " + Str(size) + " is not a whole number of " +
                                Str(unit) + "-element blocks");
  }
  const int64_t units = size / unit;
  if (units < tp) {
    return InvalidArgumentError(std::string(what) + " " + Str(size) + " is " + Str(units) +
                                " block(s) of " + Str(unit) + " elements, fewer than " +
                                "tensor_parallel_size " + Str(tp) +
                                ": run with a smaller --tp (or --pp instead)");
  }
  const int64_t q = units / tp, s = units % tp;
  const int64_t begin = rank * q + std::min<int64_t>(rank, s);
  const int64_t count = q + (rank < s ? 1 : 0);
  return Partition{begin * unit, (begin + count) * unit};
}

StatusOr<Tensor> CopyColumns(const Tensor& weight, int64_t begin, int64_t end,
                             std::string_view what) {
  if (weight.rank() != 2 || begin < 0 || begin > end || end > weight.dim(1)) {
    return InvalidArgumentError(std::string(what) + ": columns [" + Str(begin) + ", " + Str(end) +
                                ") of " + ShapeToString(weight.shape()));
  }
  const int64_t block = DTypeBlockSize(weight.dtype());
  if (begin % block != 0 || end % block != 0) {
    return InvalidArgumentError(
        std::string(what) + ": splitting dim 1 (input_size " + Str(weight.dim(1)) + ") of a " +
        std::string(DTypeName(weight.dtype())) + " tensor at columns " + Str(begin) + ".." +
        Str(end) + " cuts a " + Str(block) + "-element quantization block");
  }
  Tensor out = Tensor::Empty({weight.dim(0), end - begin}, weight.dtype());
  const int64_t offset = DTypeRowBytes(weight.dtype(), begin);
  const int64_t bytes = out.row_bytes();
  for (int64_t i = 0; i < weight.dim(0); ++i) {
    std::memcpy(out.row(i), weight.row(i) + offset, static_cast<size_t>(bytes));
  }
  return out;
}

// ----------------------------------------------------------------------------- Column

StatusOr<ColumnParallelLinear> ColumnParallelLinear::Load(const Tensor& weight, const Tensor& bias,
                                                          GroupCoordinator& tp_group,
                                                          bool gather_output) {
  constexpr std::string_view kLayer = "ColumnParallelLinear";
  UC_RETURN_IF_ERROR(CheckMatrix(weight, kLayer));
  UC_ASSIGN_OR_RETURN(const Partition part,
                      ShareOf(weight.dim(0), tp_group, 0, kLayer, "weight dim 0 (output_size)"));
  UC_RETURN_IF_ERROR(CheckBias(bias, weight.dim(0), kLayer));
  ColumnParallelLinear layer;
  layer.linear_ = Linear(RowShard(weight, part), RowShard(bias, part));
  layer.output_size_ = weight.dim(0);
  layer.gather_output_ = gather_output;
  layer.tp_group_ = &tp_group;
  return layer;
}

void ColumnParallelLinear::Forward(const Tensor& x, Tensor& y, ThreadPool* pool) const {
  if (!gather_output_ || tp_group_->world_size() == 1) {
    linear_.Forward(x, y, pool);
    return;
  }
  Tensor shard = Tensor::Empty({x.dim(0), output_size_per_partition()}, DType::kF32);
  linear_.Forward(x, shard, pool);
  tp_group_->AllGather(shard, y, /*dim=*/-1);
}

// ----------------------------------------------------------------------------- Merged

StatusOr<MergedColumnParallelLinear> MergedColumnParallelLinear::Load(
    std::span<const Tensor> weights, std::span<const Tensor> biases, GroupCoordinator& tp_group,
    int64_t split_unit) {
  constexpr std::string_view kLayer = "MergedColumnParallelLinear";
  if (weights.empty()) return InvalidArgumentError(std::string(kLayer) + ": no weights");
  if (!biases.empty() && biases.size() != weights.size()) {
    return InvalidArgumentError(std::string(kLayer) + ": " + Str(biases.size()) + " biases for " +
                                Str(weights.size()) + " weights");
  }
  MergedColumnParallelLinear layer;
  for (size_t i = 0; i < weights.size(); ++i) {
    const std::string name = std::string(kLayer) + " output " + Str(i);
    UC_RETURN_IF_ERROR(CheckMatrix(weights[i], name));
    if (weights[i].dim(1) != weights[0].dim(1)) {
      return InvalidArgumentError(name + ": weight dim 1 (input_size) " + Str(weights[i].dim(1)) +
                                  " differs from output 0's " + Str(weights[0].dim(1)));
    }
    UC_ASSIGN_OR_RETURN(const Partition part, ShareOf(weights[i].dim(0), tp_group, split_unit, name,
                                                      "weight dim 0 (output_size)"));
    const Tensor bias = biases.empty() ? Tensor() : biases[i];
    UC_RETURN_IF_ERROR(CheckBias(bias, weights[i].dim(0), name));
    layer.segments_.emplace_back(RowShard(weights[i], part), RowShard(bias, part));
  }
  return layer;
}

void MergedColumnParallelLinear::Forward(const Tensor& x, std::span<Tensor> outputs,
                                         ThreadPool* pool) const {
  UC_CHECK(outputs.size() == segments_.size(), "MergedColumnParallelLinear: %zu outputs for %zu",
           outputs.size(), segments_.size());
  UC_CHECK(segments_.size() <= 8, "MergedColumnParallelLinear: %zu segments (at most 8)",
           segments_.size());
  const Linear* segments[8];
  Tensor* ys[8];
  for (size_t i = 0; i < segments_.size(); ++i) {
    segments[i] = &segments_[i];
    ys[i] = &outputs[i];
  }
  Linear::ForwardMany(x, {segments, segments_.size()}, {ys, segments_.size()}, pool);
}

void MergedColumnParallelLinear::Forward(const Tensor& x, Tensor& out0, Tensor& out1,
                                         ThreadPool* pool) const {
  UC_CHECK(segments_.size() == 2, "MergedColumnParallelLinear: two outputs for %zu",
           segments_.size());
  const Linear* segments[] = {&segments_[0], &segments_[1]};
  Tensor* ys[] = {&out0, &out1};
  Linear::ForwardMany(x, segments, ys, pool);
}

// ----------------------------------------------------------------------------- QKV

StatusOr<QKVParallelLinear> QKVParallelLinear::Create(int64_t hidden_size, int64_t head_size,
                                                      int64_t total_num_heads,
                                                      int64_t total_num_kv_heads, bool bias,
                                                      GroupCoordinator& tp_group) {
  constexpr std::string_view kLayer = "QKVParallelLinear";
  const int64_t tp = tp_group.world_size();
  if (hidden_size < 1 || head_size < 1 || total_num_heads < 1 || total_num_kv_heads < 1) {
    return InvalidArgumentError(std::string(kLayer) + ": sizes must be >= 1 (hidden_size " +
                                Str(hidden_size) + ", head_dim " + Str(head_size) +
                                ", num_attention_heads " + Str(total_num_heads) +
                                ", num_key_value_heads " + Str(total_num_kv_heads) + ")");
  }
  if (total_num_heads % total_num_kv_heads != 0) {
    return InvalidArgumentError(std::string(kLayer) + ": num_attention_heads " +
                                Str(total_num_heads) + " is not a multiple of " +
                                "num_key_value_heads " + Str(total_num_kv_heads));
  }
  UC_RETURN_IF_ERROR(
      CheckDivisible(total_num_heads, static_cast<int>(tp), kLayer, "num_attention_heads"));
  if (total_num_kv_heads % tp != 0 && tp % total_num_kv_heads != 0) {
    return InvalidArgumentError(std::string(kLayer) + ": num_key_value_heads " +
                                Str(total_num_kv_heads) + " and tensor_parallel_size " + Str(tp) +
                                " do not divide one another");
  }
  QKVParallelLinear layer;
  layer.hidden_size_ = hidden_size;
  layer.head_size_ = head_size;
  layer.total_num_heads_ = total_num_heads;
  layer.total_num_kv_heads_ = total_num_kv_heads;
  layer.num_heads_per_rank_ = total_num_heads / tp;
  const int r = tp_group.rank_in_group();
  if (tp >= total_num_kv_heads) {
    layer.num_kv_heads_per_rank_ = 1;
    layer.num_kv_head_replicas_ = tp / total_num_kv_heads;
    layer.kv_head_start_ = r / layer.num_kv_head_replicas_;
  } else {
    layer.num_kv_heads_per_rank_ = total_num_kv_heads / tp;
    layer.num_kv_head_replicas_ = 1;
    layer.kv_head_start_ = r * layer.num_kv_heads_per_rank_;
  }
  layer.bias_ = bias;
  layer.rank_in_group_ = r;
  return layer;
}

Status QKVParallelLinear::LoadWeight(std::string_view shard_id, const Tensor& weight,
                                     const Tensor& bias) {
  const std::string layer = "QKVParallelLinear shard \"" + std::string(shard_id) + "\"";
  int64_t num_heads = 0, first_head = 0, heads_here = 0;
  Linear* target = nullptr;
  if (shard_id == "q") {
    num_heads = total_num_heads_;
    heads_here = num_heads_per_rank_;
    first_head = rank_in_group_ * num_heads_per_rank_;
    target = &q_proj_;
  } else if (shard_id == "k" || shard_id == "v") {
    num_heads = total_num_kv_heads_;
    heads_here = num_kv_heads_per_rank_;
    first_head = kv_head_start_;
    target = shard_id == "k" ? &k_proj_ : &v_proj_;
  } else {
    return InvalidArgumentError("QKVParallelLinear: shard id \"" + std::string(shard_id) +
                                "\" is not one of \"q\", \"k\", \"v\"");
  }
  UC_RETURN_IF_ERROR(CheckMatrix(weight, layer));
  if (weight.dim(0) != num_heads * head_size_ || weight.dim(1) != hidden_size_) {
    return InvalidArgumentError(layer + ": weight " + ShapeToString(weight.shape()) + " is not [" +
                                Str(num_heads) + " heads * head_dim " + Str(head_size_) +
                                ", hidden_size " + Str(hidden_size_) + "]");
  }
  if (Defined(bias) != bias_) {
    return InvalidArgumentError(layer + (bias_ ? ": bias missing" : ": unexpected bias"));
  }
  UC_RETURN_IF_ERROR(CheckBias(bias, weight.dim(0), layer));
  const int64_t begin = first_head * head_size_, end = (first_head + heads_here) * head_size_;
  *target = Linear(weight.Slice(begin, end), bias_ ? bias.Slice(begin, end) : Tensor());
  return OkStatus();
}

StatusOr<QKVParallelLinear> QKVParallelLinear::Load(const QKVWeights& weights, int64_t head_size,
                                                    int64_t total_num_heads,
                                                    int64_t total_num_kv_heads,
                                                    GroupCoordinator& tp_group) {
  UC_RETURN_IF_ERROR(CheckMatrix(weights.q, "QKVParallelLinear shard \"q\""));
  UC_ASSIGN_OR_RETURN(QKVParallelLinear layer,
                      Create(weights.q.dim(1), head_size, total_num_heads, total_num_kv_heads,
                             Defined(weights.q_bias), tp_group));
  UC_RETURN_IF_ERROR(layer.LoadWeight("q", weights.q, weights.q_bias));
  UC_RETURN_IF_ERROR(layer.LoadWeight("k", weights.k, weights.k_bias));
  UC_RETURN_IF_ERROR(layer.LoadWeight("v", weights.v, weights.v_bias));
  return layer;
}

bool QKVParallelLinear::loaded() const {
  return Defined(q_proj_.weight()) && Defined(k_proj_.weight()) && Defined(v_proj_.weight());
}

void QKVParallelLinear::Forward(const Tensor& x, Tensor& q, Tensor& k, Tensor& v,
                                ThreadPool* pool) const {
  UC_CHECK(loaded(), "QKVParallelLinear::Forward before q, k and v were loaded");
  const Linear* segments[] = {&q_proj_, &k_proj_, &v_proj_};
  Tensor* ys[] = {&q, &k, &v};
  Linear::ForwardMany(x, segments, ys, pool);
}

// ----------------------------------------------------------------------------- Row

StatusOr<RowParallelLinear> RowParallelLinear::Load(const Tensor& weight, const Tensor& bias,
                                                    GroupCoordinator& tp_group,
                                                    RowParallelOptions options) {
  constexpr std::string_view kLayer = "RowParallelLinear";
  UC_RETURN_IF_ERROR(CheckMatrix(weight, kLayer));
  UC_ASSIGN_OR_RETURN(const Partition part, ShareOf(weight.dim(1), tp_group, options.split_unit,
                                                    kLayer, "weight dim 1 (input_size)"));
  UC_RETURN_IF_ERROR(CheckBias(bias, weight.dim(0), kLayer));
  if (Defined(bias) && !options.reduce_results) {
    return InvalidArgumentError(std::string(kLayer) +
                                ": a bias needs reduce_results=true (each rank would add it)");
  }
  const int r = tp_group.rank_in_group();
  Tensor shard = weight;
  if (tp_group.world_size() > 1) {
    UC_ASSIGN_OR_RETURN(shard, CopyColumns(weight, part.begin, part.end, kLayer));
    // The shard is a copy: the checkpoint's pages of the whole matrix need not stay resident
    // (every page of it was read; a no-op unless it is a file mapping).
    ReleaseFilePages(weight.raw(), static_cast<size_t>(weight.nbytes()));
  }
  RowParallelLinear layer;
  layer.linear_ = Linear(std::move(shard), r == 0 ? bias : Tensor());
  layer.input_size_ = weight.dim(1);
  layer.input_begin_ = part.begin;
  layer.options_ = options;
  layer.tp_group_ = &tp_group;
  return layer;
}

void RowParallelLinear::Forward(const Tensor& x, Tensor& y, ThreadPool* pool) const {
  const int tp = tp_group_->world_size();
  if (options_.input_is_parallel || tp == 1) {
    linear_.Forward(x, y, pool);
  } else {
    UC_CHECK(x.rank() == 2 && x.dim(1) == input_size_ && x.dtype() == DType::kF32,
             "RowParallelLinear: x %s is not [m, input_size %lld] F32",
             ShapeToString(x.shape()).c_str(), static_cast<long long>(input_size_));
    const int64_t part = input_size_per_partition();
    Tensor x_part = Tensor::Empty({x.dim(0), part}, DType::kF32);
    const float* src = x.data<float>() + input_begin_;
    for (int64_t i = 0; i < x.dim(0); ++i) {
      std::memcpy(x_part.data<float>() + i * part, src + i * input_size_,
                  static_cast<size_t>(part) * sizeof(float));
    }
    linear_.Forward(x_part, y, pool);
  }
  if (options_.reduce_results) tp_group_->AllReduce(y);
}

}  // namespace uc::layers
