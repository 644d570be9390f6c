#include "distributed/group_coordinator.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"

namespace uc::distributed {
namespace {

constexpr int kTensorDictTag = ProcessGroup::kReservedTagBase + 1;
constexpr int kGatherTag = ProcessGroup::kReservedTagBase + 2;

// Returns `dim` in [0, rank) after checking that it is 0 or the last dimension.
int NormalizeGatherDim(const Tensor& shard, int dim) {
  const int r = shard.rank();
  if (dim < 0) dim += r;
  UC_CHECK(r >= 1 && (dim == 0 || dim == r - 1),
           "gather dim %d of shape %s: only dim 0 or the last dim are supported", dim,
           ShapeToString(shard.shape()).c_str());
  return dim;
}

void CheckGatherShapes(const Tensor& shard, const Tensor& full, int dim, int world_size) {
  Shape expected = shard.shape();
  expected[dim] *= world_size;
  UC_CHECK(full.shape() == expected && full.dtype() == shard.dtype(),
           "gather of %s shards %s over %d ranks needs full %s %s, got %s %s",
           DTypeName(shard.dtype()).data(), ShapeToString(shard.shape()).c_str(), world_size,
           DTypeName(shard.dtype()).data(), ShapeToString(expected).c_str(),
           DTypeName(full.dtype()).data(), ShapeToString(full.shape()).c_str());
  if (dim != 0) {
    UC_CHECK(!DTypeIsQuantized(shard.dtype()), "last-dim gather of block-quantized %s",
             DTypeName(shard.dtype()).data());
  }
}

// True when concatenating along `dim` is plain concatenation of the shards' bytes.
bool IsContiguousGather(const Tensor& shard, int dim) { return dim == 0 || shard.num_rows() == 1; }

// gathered: world_size shards back to back ([world_size, m, n_part]) -> full [m, world_size *
// n_part], interleaving the columns.
void InterleaveColumns(const std::byte* gathered, const Tensor& shard, int world_size,
                       Tensor& full) {
  const int64_t rows = shard.num_rows();
  const int64_t part_bytes = shard.row_bytes();
  for (int r = 0; r < world_size; ++r) {
    for (int64_t i = 0; i < rows; ++i) {
      std::memcpy(full.row(i) + r * part_bytes, gathered + (r * rows + i) * part_bytes,
                  static_cast<size_t>(part_bytes));
    }
  }
}

void AppendBytes(std::string& out, const void* data, size_t n) {
  out.append(static_cast<const char*>(data), n);
}

template <typename T>
void AppendPod(std::string& out, T value) {
  AppendBytes(out, &value, sizeof(value));
}

// Reads header fields written by SendTensorDict; a malformed header is a broken invariant.
class HeaderReader {
 public:
  explicit HeaderReader(const std::string& bytes) : bytes_(bytes) {}
  template <typename T>
  T Pod() {
    T value;
    Read(&value, sizeof(value));
    return value;
  }
  std::string String(size_t n) {
    std::string s(n, '\0');
    Read(s.data(), n);
    return s;
  }
  bool done() const { return pos_ == bytes_.size(); }

 private:
  void Read(void* dst, size_t n) {
    UC_CHECK(pos_ + n <= bytes_.size(), "RecvTensorDict: truncated header (%zu bytes)",
             bytes_.size());
    std::memcpy(dst, bytes_.data() + pos_, n);
    pos_ += n;
  }
  const std::string& bytes_;
  size_t pos_ = 0;
};

}  // namespace

GroupCoordinator::GroupCoordinator(std::vector<int> ranks, int rank, int local_rank,
                                   std::unique_ptr<ProcessGroup> group, std::string name)
    : ranks_(std::move(ranks)),
      rank_(rank),
      local_rank_(local_rank),
      group_(std::move(group)),
      name_(std::move(name)) {
  UC_CHECK(!ranks_.empty() && std::is_sorted(ranks_.begin(), ranks_.end()) &&
               std::adjacent_find(ranks_.begin(), ranks_.end()) == ranks_.end(),
           "GroupCoordinator %s: ranks must be sorted, unique and non-empty", name_.c_str());
  auto it = std::find(ranks_.begin(), ranks_.end(), rank_);
  UC_CHECK(it != ranks_.end(), "GroupCoordinator %s: rank %d is not in the group", name_.c_str(),
           rank_);
  rank_in_group_ = static_cast<int>(it - ranks_.begin());
  UC_CHECK(group_ != nullptr || ranks_.size() == 1,
           "GroupCoordinator %s: a group of %zu ranks needs a ProcessGroup", name_.c_str(),
           ranks_.size());
  if (group_ != nullptr) {
    UC_CHECK(group_->size() == world_size() && group_->rank() == rank_in_group_,
             "GroupCoordinator %s: ProcessGroup is rank %d of %d, expected %d of %d", name_.c_str(),
             group_->rank(), group_->size(), rank_in_group_, world_size());
  }
}

void GroupCoordinator::AllReduce(Tensor& t) {
  if (world_size() == 1) return;
  UC_CHECK(t.dtype() == DType::kF32, "AllReduce on %s: needs F32, got %s", name_.c_str(),
           DTypeName(t.dtype()).data());
  group_->AllReduceSum(t.data<float>(), t.numel());
}

void GroupCoordinator::AllGather(const Tensor& shard, Tensor& full, int dim) {
  dim = NormalizeGatherDim(shard, dim);
  CheckGatherShapes(shard, full, dim, world_size());
  if (world_size() == 1) {
    if (full.raw() != shard.raw()) {
      std::memcpy(full.raw(), shard.raw(), static_cast<size_t>(shard.nbytes()));
    }
    return;
  }
  if (IsContiguousGather(shard, dim)) {
    group_->AllGather(shard.raw(), shard.nbytes(), full.raw());
    return;
  }
  Tensor gathered = Tensor::Empty({world_size(), shard.numel()}, shard.dtype());
  group_->AllGather(shard.raw(), shard.nbytes(), gathered.raw());
  InterleaveColumns(static_cast<const std::byte*>(gathered.raw()), shard, world_size(), full);
}

void GroupCoordinator::Gather(const Tensor& shard, Tensor& full, int dst_in_group, int dim) {
  UC_CHECK(dst_in_group >= 0 && dst_in_group < world_size(), "Gather to %d in a group of %d",
           dst_in_group, world_size());
  dim = NormalizeGatherDim(shard, dim);
  if (rank_in_group_ != dst_in_group) {
    group_->Send(shard.raw(), shard.nbytes(), dst_in_group, kGatherTag);
    return;
  }
  CheckGatherShapes(shard, full, dim, world_size());
  if (world_size() == 1) {
    if (full.raw() != shard.raw()) {
      std::memcpy(full.raw(), shard.raw(), static_cast<size_t>(shard.nbytes()));
    }
    return;
  }
  const bool contiguous = IsContiguousGather(shard, dim);
  Tensor gathered;
  std::byte* dst = static_cast<std::byte*>(full.raw());
  if (!contiguous) {
    gathered = Tensor::Empty({world_size(), shard.numel()}, shard.dtype());
    dst = static_cast<std::byte*>(gathered.raw());
  }
  const int64_t bytes = shard.nbytes();
  for (int r = 0; r < world_size(); ++r) {
    if (r == rank_in_group_) {
      std::memcpy(dst + r * bytes, shard.raw(), static_cast<size_t>(bytes));
    } else {
      group_->Recv(dst + r * bytes, bytes, r, kGatherTag);
    }
  }
  if (!contiguous) InterleaveColumns(dst, shard, world_size(), full);
}

void GroupCoordinator::Broadcast(Tensor& t, int root_in_group) {
  UC_CHECK(root_in_group >= 0 && root_in_group < world_size(), "Broadcast root %d in a group of %d",
           root_in_group, world_size());
  if (world_size() == 1) return;
  group_->Broadcast(t.raw(), t.nbytes(), root_in_group);
}

void GroupCoordinator::BroadcastObject(std::string& bytes, int root_in_group) {
  UC_CHECK(root_in_group >= 0 && root_in_group < world_size(),
           "BroadcastObject root %d in a group of %d", root_in_group, world_size());
  if (world_size() == 1) return;
  int64_t size = static_cast<int64_t>(bytes.size());
  group_->Broadcast(&size, sizeof(size), root_in_group);
  if (rank_in_group_ != root_in_group) bytes.resize(static_cast<size_t>(size));
  if (size > 0) group_->Broadcast(bytes.data(), size, root_in_group);
}

void GroupCoordinator::SendTensorDict(const std::map<std::string, Tensor>& tensors,
                                      int dst_in_group) {
  UC_CHECK(dst_in_group >= 0 && dst_in_group < world_size() && dst_in_group != rank_in_group_,
           "SendTensorDict to %d from %d in a group of %d", dst_in_group, rank_in_group_,
           world_size());
  // Header: count, then per tensor: name length, name, dtype, rank, dims.
  std::string header;
  AppendPod<uint32_t>(header, static_cast<uint32_t>(tensors.size()));
  for (const auto& [name, t] : tensors) {
    AppendPod<uint32_t>(header, static_cast<uint32_t>(name.size()));
    AppendBytes(header, name.data(), name.size());
    AppendPod<uint8_t>(header, static_cast<uint8_t>(t.dtype()));
    AppendPod<uint8_t>(header, static_cast<uint8_t>(t.rank()));
    for (int64_t d : t.shape()) AppendPod<int64_t>(header, d);
  }
  const int64_t header_size = static_cast<int64_t>(header.size());
  group_->Send(&header_size, sizeof(header_size), dst_in_group, kTensorDictTag);
  group_->Send(header.data(), header_size, dst_in_group, kTensorDictTag);
  for (const auto& [name, t] : tensors) {
    if (t.nbytes() > 0) group_->Send(t.raw(), t.nbytes(), dst_in_group, kTensorDictTag);
  }
}

std::map<std::string, Tensor> GroupCoordinator::RecvTensorDict(int src_in_group) {
  UC_CHECK(src_in_group >= 0 && src_in_group < world_size() && src_in_group != rank_in_group_,
           "RecvTensorDict from %d at %d in a group of %d", src_in_group, rank_in_group_,
           world_size());
  int64_t header_size = 0;
  group_->Recv(&header_size, sizeof(header_size), src_in_group, kTensorDictTag);
  std::string header(static_cast<size_t>(header_size), '\0');
  group_->Recv(header.data(), header_size, src_in_group, kTensorDictTag);
  HeaderReader reader(header);
  std::map<std::string, Tensor> tensors;
  const uint32_t count = reader.Pod<uint32_t>();
  for (uint32_t i = 0; i < count; ++i) {
    std::string name = reader.String(reader.Pod<uint32_t>());
    const auto dtype = static_cast<DType>(reader.Pod<uint8_t>());
    Shape shape(reader.Pod<uint8_t>());
    for (int64_t& d : shape) d = reader.Pod<int64_t>();
    tensors.emplace(std::move(name), Tensor::Empty(std::move(shape), dtype));
  }
  UC_CHECK(reader.done(), "RecvTensorDict: %zu trailing header bytes", header.size());
  for (auto& [name, t] : tensors) {
    if (t.nbytes() > 0) group_->Recv(t.raw(), t.nbytes(), src_in_group, kTensorDictTag);
  }
  return tensors;
}

void GroupCoordinator::Barrier() {
  if (world_size() == 1) return;
  group_->Barrier();
}

void GroupCoordinator::SetWaitObserver(WaitObserver observer) {
  if (group_ != nullptr) group_->SetWaitObserver(std::move(observer));
}

}  // namespace uc::distributed
