#include "layers/parallel_linear.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/file_pages.h"
#include "distributed/thread_process_group.h"
#include "layers/layers_test_util.h"
#include "layers/linear.h"

namespace uc::layers {
namespace {

using distributed::GroupCoordinator;
using distributed::RunWithThreadGroup;

using testing::ExpectClose;
using testing::RandomF32;
using testing::RandomWeight;

// Columns [begin, end) of a [m, n] F32 tensor.
std::vector<float> Columns(const Tensor& t, int64_t begin, int64_t end) {
  std::vector<float> out;
  for (int64_t i = 0; i < t.dim(0); ++i) {
    for (int64_t j = begin; j < end; ++j) out.push_back(t.data<float>()[i * t.dim(1) + j]);
  }
  return out;
}

Tensor Reference(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  Tensor y = Tensor::Empty({x.dim(0), weight.dim(0)}, DType::kF32);
  Linear(weight, bias).Forward(x, y, nullptr);
  return y;
}

struct Case {
  int tp;
  DType dtype;
};

void PrintTo(const Case& c, std::ostream* os) { *os << "tp " << c.tp << " " << DTypeName(c.dtype); }

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return "Tp" + std::to_string(info.param.tp) + std::string(DTypeName(info.param.dtype));
}

class ParallelLinearTest : public ::testing::TestWithParam<Case> {
 protected:
  int tp() const { return GetParam().tp; }
  DType dtype() const { return GetParam().dtype; }
};

TEST_P(ParallelLinearTest, ColumnParallelMatchesLinear) {
  constexpr int64_t kM = 5, kIn = 96, kOut = 64;
  const Tensor weight = RandomWeight(kOut, kIn, dtype(), 1);
  const Tensor bias = RandomF32({kOut}, 2);
  const Tensor x = RandomF32({kM, kIn}, 3);
  const Tensor ref = Reference(x, weight, bias);
  RunWithThreadGroup(tp(), [&](GroupCoordinator& g) {
    const int64_t part = kOut / tp();
    const int r = g.rank_in_group();
    auto layer = ColumnParallelLinear::Load(weight, bias, g);
    ASSERT_TRUE(layer.ok()) << layer.status().ToString();
    EXPECT_EQ(layer->output_size_per_partition(), part);
    EXPECT_EQ(layer->weight().raw(), weight.row(r * part));  // a view, not a copy
    Tensor y = Tensor::Empty({kM, part}, DType::kF32);
    layer->Forward(x, y, nullptr);
    ExpectClose(y.ToFloatVector(), Columns(ref, r * part, (r + 1) * part));

    auto gathered = ColumnParallelLinear::Load(weight, bias, g, /*gather_output=*/true);
    ASSERT_TRUE(gathered.ok());
    Tensor full = Tensor::Empty({kM, kOut}, DType::kF32);
    gathered->Forward(x, full, nullptr);
    ExpectClose(full.ToFloatVector(), ref.ToFloatVector());
  });
}

TEST_P(ParallelLinearTest, MergedColumnParallelMatchesGateAndUp) {
  constexpr int64_t kM = 3, kHidden = 64, kIntermediate = 128;
  const Tensor gate = RandomWeight(kIntermediate, kHidden, dtype(), 4);
  const Tensor up = RandomWeight(kIntermediate, kHidden, dtype(), 5);
  const Tensor x = RandomF32({kM, kHidden}, 6);
  const Tensor gate_ref = Reference(x, gate, Tensor());
  const Tensor up_ref = Reference(x, up, Tensor());
  RunWithThreadGroup(tp(), [&](GroupCoordinator& g) {
    const Tensor weights[] = {gate, up};
    auto layer = MergedColumnParallelLinear::Load(weights, {}, g);
    ASSERT_TRUE(layer.ok()) << layer.status().ToString();
    const int64_t part = kIntermediate / tp();
    const int r = g.rank_in_group();
    EXPECT_EQ(layer->num_outputs(), 2);
    EXPECT_EQ(layer->output_size_per_partition(1), part);
    EXPECT_EQ(layer->weight(1).raw(), up.row(r * part));
    Tensor gate_out = Tensor::Empty({kM, part}, DType::kF32);
    Tensor up_out = Tensor::Empty({kM, part}, DType::kF32);
    layer->Forward(x, gate_out, up_out, nullptr);
    ExpectClose(gate_out.ToFloatVector(), Columns(gate_ref, r * part, (r + 1) * part));
    ExpectClose(up_out.ToFloatVector(), Columns(up_ref, r * part, (r + 1) * part));
  });
}

TEST_P(ParallelLinearTest, RowParallelMatchesLinear) {
  constexpr int64_t kM = 4, kIn = 128, kOut = 48;
  const Tensor weight = RandomWeight(kOut, kIn, dtype(), 7);
  const Tensor bias = RandomF32({kOut}, 8);
  const Tensor x = RandomF32({kM, kIn}, 9);
  const Tensor ref = Reference(x, weight, bias);
  const Tensor ref_no_bias = Reference(x, weight, Tensor());
  RunWithThreadGroup(tp(), [&](GroupCoordinator& g) {
    const int64_t part = kIn / tp();
    const int r = g.rank_in_group();
    // input_is_parallel: x is this rank's columns.
    auto layer = RowParallelLinear::Load(weight, bias, g);
    ASSERT_TRUE(layer.ok()) << layer.status().ToString();
    EXPECT_EQ(layer->input_size_per_partition(), part);
    const std::vector<float> cols = Columns(x, r * part, (r + 1) * part);
    const Tensor x_part = Tensor::FromVector(cols, {kM, part});
    Tensor y = Tensor::Empty({kM, kOut}, DType::kF32);
    layer->Forward(x_part, y, nullptr);
    ExpectClose(y.ToFloatVector(), ref.ToFloatVector());
    // input_is_parallel=false: the layer takes its columns itself.
    auto splitting = RowParallelLinear::Load(weight, bias, g, {.input_is_parallel = false});
    ASSERT_TRUE(splitting.ok());
    Tensor y2 = Tensor::Empty({kM, kOut}, DType::kF32);
    splitting->Forward(x, y2, nullptr);
    ExpectClose(y2.ToFloatVector(), ref.ToFloatVector());
    // reduce_results=false: partial sums that add up to the full result.
    auto partial = RowParallelLinear::Load(weight, Tensor(), g, {.reduce_results = false});
    ASSERT_TRUE(partial.ok());
    Tensor y3 = Tensor::Empty({kM, kOut}, DType::kF32);
    partial->Forward(x_part, y3, nullptr);
    g.AllReduce(y3);
    ExpectClose(y3.ToFloatVector(), ref_no_bias.ToFloatVector());
  });
}

// Odd numbers of blocks split as evenly as whole blocks allow; the even split where it exists.
TEST(SplitInUnitsTest, SharesWholeUnitsAsEvenlyAsTheyAllow) {
  using Range = std::pair<int64_t, int64_t>;
  auto share = [](int64_t size, int tp, int rank, int64_t unit) {
    auto p = SplitInUnits(size, tp, rank, unit, "intermediate_size");
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? Range{p->begin, p->end} : Range{};
  };
  // Three Q4_K super-blocks (Qwen3-30B-A3B's expert intermediate 768) over two ranks.
  EXPECT_EQ(share(768, 2, 0, 256), (Range{0, 512}));
  EXPECT_EQ(share(768, 2, 1, 256), (Range{512, 768}));
  // 90 MXFP4 blocks (gpt-oss-20b's 2880) over four ranks: 23, 23, 22, 22.
  EXPECT_EQ(share(2880, 4, 1, 32), (Range{736, 1472}));
  EXPECT_EQ(share(2880, 4, 3, 32), (Range{2176, 2880}));
  // Where the unit divides size / tp: the even split.
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(share(5632 * 2, 4, r, 256), (Range{r * 2816, (r + 1) * 2816}));
  }
  // F32 (unit 1) takes any size.
  EXPECT_EQ(share(33, 2, 1, 1), (Range{17, 33}));

  auto too_few = SplitInUnits(32, 2, 0, 32, "model.layers.0.mlp expert 0 down");
  ASSERT_FALSE(too_few.ok());
  EXPECT_EQ(too_few.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_few.status().message().find("model.layers.0.mlp expert 0 down 32 is 1 block"),
            std::string::npos)
      << too_few.status().ToString();
  EXPECT_NE(too_few.status().message().find("tensor_parallel_size 2"), std::string::npos);
  auto ragged = SplitInUnits(100, 2, 0, 32, "intermediate_size");
  ASSERT_FALSE(ragged.ok());
  EXPECT_NE(ragged.status().message().find("not a whole number of 32-element blocks"),
            std::string::npos);
}

// A gated MLP whose Q8_0 down projection has an odd number of blocks along the intermediate
// size (3 x 32 over 2 ranks: 64 and 32 columns): gate/up and down take the same uneven rows and
// columns, and the all-reduced output equals one process's.
TEST(SplitInUnitsTest, UnevenGatedMlpEqualsOneProcess) {
  constexpr int64_t kM = 3, kHidden = 64, kIntermediate = 96;
  const Tensor gate = RandomWeight(kIntermediate, kHidden, DType::kQ8_0, 21);
  const Tensor up = RandomWeight(kIntermediate, kHidden, DType::kQ8_0, 22);
  const Tensor down = RandomWeight(kHidden, kIntermediate, DType::kQ8_0, 23);
  const Tensor x = RandomF32({kM, kHidden}, 24);
  const Tensor gate_ref = Reference(x, gate, Tensor());
  const Tensor up_ref = Reference(x, up, Tensor());
  std::vector<float> act(static_cast<size_t>(kM * kIntermediate));
  for (size_t i = 0; i < act.size(); ++i) {
    const float g = gate_ref.data<float>()[i];
    act[i] = g / (1.0f + std::exp(-g)) * up_ref.data<float>()[i];
  }
  const Tensor ref = Reference(Tensor::FromVector(act, {kM, kIntermediate}), down, Tensor());
  RunWithThreadGroup(2, [&](GroupCoordinator& g) {
    const int r = g.rank_in_group();
    const int64_t begin = r == 0 ? 0 : 64, end = r == 0 ? 64 : 96;
    const Tensor weights[] = {gate, up};
    auto gate_up = MergedColumnParallelLinear::Load(weights, {}, g, /*split_unit=*/32);
    ASSERT_TRUE(gate_up.ok()) << gate_up.status().ToString();
    ASSERT_EQ(gate_up->output_size_per_partition(0), end - begin);
    EXPECT_EQ(gate_up->weight(0).raw(), gate.row(begin));
    auto down_proj = RowParallelLinear::Load(down, Tensor(), g, {.split_unit = 32});
    ASSERT_TRUE(down_proj.ok()) << down_proj.status().ToString();
    ASSERT_EQ(down_proj->input_size_per_partition(), end - begin);
    Tensor g_out = Tensor::Empty({kM, end - begin}, DType::kF32);
    Tensor u_out = Tensor::Empty({kM, end - begin}, DType::kF32);
    gate_up->Forward(x, g_out, u_out, nullptr);
    for (int64_t i = 0; i < g_out.numel(); ++i) {
      const float v = g_out.data<float>()[i];
      g_out.data<float>()[i] = v / (1.0f + std::exp(-v)) * u_out.data<float>()[i];
    }
    Tensor y = Tensor::Empty({kM, kHidden}, DType::kF32);
    down_proj->Forward(g_out, y, nullptr);
    ExpectClose(y.ToFloatVector(), ref.ToFloatVector());
    // The full input, split by the layer itself at the same columns.
    auto splitting =
        RowParallelLinear::Load(down, Tensor(), g, {.input_is_parallel = false, .split_unit = 32});
    ASSERT_TRUE(splitting.ok());
    Tensor y2 = Tensor::Empty({kM, kHidden}, DType::kF32);
    splitting->Forward(Tensor::FromVector(act, {kM, kIntermediate}), y2, nullptr);
    ExpectClose(y2.ToFloatVector(), ref.ToFloatVector());
  });
}

INSTANTIATE_TEST_SUITE_P(Cases, ParallelLinearTest,
                         ::testing::Values(Case{1, DType::kF32}, Case{2, DType::kF32},
                                           Case{4, DType::kF32}, Case{1, DType::kQ8_0},
                                           Case{2, DType::kQ8_0}, Case{4, DType::kQ8_0}),
                         CaseName);

// 8 query heads, 2 KV heads: tp 8 replicates each KV head on 4 ranks.
class QkvParallelTest : public ParallelLinearTest {};

TEST_P(QkvParallelTest, SplitsHeadsAndReplicatesKvHeads) {
  constexpr int64_t kM = 3, kHidden = 64, kHeadSize = 8, kHeads = 8, kKvHeads = 2;
  QKVWeights full;
  full.q = RandomWeight(kHeads * kHeadSize, kHidden, dtype(), 10);
  full.k = RandomWeight(kKvHeads * kHeadSize, kHidden, dtype(), 11);
  full.v = RandomWeight(kKvHeads * kHeadSize, kHidden, dtype(), 12);
  full.q_bias = RandomF32({kHeads * kHeadSize}, 13);
  full.k_bias = RandomF32({kKvHeads * kHeadSize}, 14);
  full.v_bias = RandomF32({kKvHeads * kHeadSize}, 15);
  const Tensor x = RandomF32({kM, kHidden}, 16);
  const Tensor q_ref = Reference(x, full.q, full.q_bias);
  const Tensor k_ref = Reference(x, full.k, full.k_bias);
  const Tensor v_ref = Reference(x, full.v, full.v_bias);
  RunWithThreadGroup(tp(), [&](GroupCoordinator& g) {
    auto layer = QKVParallelLinear::Load(full, kHeadSize, kHeads, kKvHeads, g);
    ASSERT_TRUE(layer.ok()) << layer.status().ToString();
    const int r = g.rank_in_group();
    const int64_t heads = kHeads / tp();
    EXPECT_EQ(layer->num_heads_per_rank(), heads);
    const int64_t kv_heads = tp() >= kKvHeads ? 1 : kKvHeads / tp();
    EXPECT_EQ(layer->num_kv_heads_per_rank(), kv_heads);
    EXPECT_EQ(layer->num_kv_head_replicas(), tp() >= kKvHeads ? tp() / kKvHeads : 1);
    // The KV head(s) this rank holds are the ones its query heads attend to.
    const int64_t kv_start = r * heads / (kHeads / kKvHeads);
    EXPECT_EQ(layer->kv_head_start(), kv_start);
    Tensor q = Tensor::Empty({kM, heads * kHeadSize}, DType::kF32);
    Tensor k = Tensor::Empty({kM, kv_heads * kHeadSize}, DType::kF32);
    Tensor v = Tensor::Empty({kM, kv_heads * kHeadSize}, DType::kF32);
    layer->Forward(x, q, k, v, nullptr);
    ExpectClose(q.ToFloatVector(),
                Columns(q_ref, r * heads * kHeadSize, (r + 1) * heads * kHeadSize));
    const int64_t kv_begin = kv_start * kHeadSize, kv_end = (kv_start + kv_heads) * kHeadSize;
    ExpectClose(k.ToFloatVector(), Columns(k_ref, kv_begin, kv_end));
    ExpectClose(v.ToFloatVector(), Columns(v_ref, kv_begin, kv_end));
  });
}

INSTANTIATE_TEST_SUITE_P(Cases, QkvParallelTest,
                         ::testing::Values(Case{1, DType::kF32}, Case{2, DType::kF32},
                                           Case{4, DType::kF32}, Case{8, DType::kF32},
                                           Case{2, DType::kQ8_0}, Case{8, DType::kQ8_0}),
                         CaseName);

// A TP group of `tp` ranks seen from rank 0 only, for load-time checks (no collectives run).
template <typename Fn>
void OnRank0(int tp, Fn fn) {
  auto state = std::make_shared<distributed::ThreadGroupState>(tp);
  std::vector<int> ranks(static_cast<size_t>(tp));
  for (int i = 0; i < tp; ++i) ranks[i] = i;
  GroupCoordinator g(ranks, 0, 0, std::make_unique<distributed::ThreadProcessGroup>(state, 0));
  fn(g);
}

void ExpectInvalid(const Status& status, std::string_view needle) {
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find(needle), std::string::npos) << status.message();
}

// A row-parallel shard is a copy of its columns of the checkpoint's matrix, so the mapped file's
// pages of the whole matrix leave the resident set once the shards are made: two ranks hold two
// half copies (the matrix's size once), not that and every page of the mapping too.
TEST(RowParallelMemoryTest, TheCopiedColumnsGiveTheCheckpointPagesBack) {
  constexpr int64_t kRows = 1024, kCols = 8192;  // 32 MiB of F32
  const size_t bytes = static_cast<size_t>(kRows * kCols) * sizeof(float);
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("uc_row_parallel_" + std::to_string(::getpid()) + ".bin");
  {
    std::vector<float> values(static_cast<size_t>(kRows * kCols));
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 977) * 0.001f;
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(bytes));
  }
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  void* mapped = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  ASSERT_NE(mapped, MAP_FAILED);
  RegisterFileMapping(mapped, bytes);
  const Tensor weight = Tensor::Borrow(mapped, {kRows, kCols}, DType::kF32);
  float sum = 0.0f;  // every page resident
  for (int64_t i = 0; i < kRows * kCols; i += 1024) sum += weight.data<float>()[i];
  EXPECT_GT(sum, 0.0f);
  const size_t before = ResidentSetBytes();
  std::vector<RowParallelLinear> shards(2);
  RunWithThreadGroup(2, [&](GroupCoordinator& g) {
    auto layer = RowParallelLinear::Load(weight, Tensor(), g);
    ASSERT_TRUE(layer.ok()) << layer.status().ToString();
    shards[g.rank_in_group()] = std::move(layer).value();
  });
  const size_t after = ResidentSetBytes();
  EXPECT_LT(after, before + bytes / 2) << "the mapping's pages stayed beside the copies";
  UnregisterFileMapping(mapped);
  ::munmap(mapped, bytes);
  std::filesystem::remove(path);
}

TEST(ParallelLinearErrorsTest, IndivisibleSizesNameTheDimension) {
  OnRank0(8, [](GroupCoordinator& g) {
    const Tensor w = RandomF32({172, 64}, 1);  // stories260K's MLP width
    ExpectInvalid(ColumnParallelLinear::Load(w, Tensor(), g).status(), "output_size) 172");
    const Tensor down = RandomF32({64, 172}, 2);
    ExpectInvalid(RowParallelLinear::Load(down, Tensor(), g).status(), "input_size) 172");
    const Tensor ws[] = {w, w};
    ExpectInvalid(MergedColumnParallelLinear::Load(ws, {}, g).status(), "output_size) 172");
  });
  OnRank0(2, [](GroupCoordinator& g) {
    ExpectInvalid(QKVParallelLinear::Create(576, 64, 9, 3, false, g).status(),
                  "num_attention_heads 9");
    ExpectInvalid(QKVParallelLinear::Create(64, 8, 6, 3, false, g).status(),
                  "num_key_value_heads 3");
    ExpectInvalid(QKVParallelLinear::Create(64, 8, 8, 3, false, g).status(),
                  "not a multiple of num_key_value_heads");
  });
}

TEST(ParallelLinearErrorsTest, QuantizedRowSplitMustKeepWholeBlocks) {
  OnRank0(4, [](GroupCoordinator& g) {
    const Tensor w = RandomWeight(16, 64, DType::kQ8_0, 3);  // 16 columns per rank < one block
    ExpectInvalid(RowParallelLinear::Load(w, Tensor(), g).status(), "quantization block");
  });
}

TEST(ParallelLinearErrorsTest, RowParallelBiasNeedsReduceResults) {
  OnRank0(2, [](GroupCoordinator& g) {
    ExpectInvalid(RowParallelLinear::Load(RandomF32({8, 8}, 1), RandomF32({8}, 2), g,
                                          {.reduce_results = false})
                      .status(),
                  "reduce_results");
  });
}

TEST(ParallelLinearErrorsTest, QkvShardIdsAndShapesAreChecked) {
  OnRank0(2, [](GroupCoordinator& g) {
    auto layer = QKVParallelLinear::Create(64, 8, 8, 2, false, g);
    ASSERT_TRUE(layer.ok());
    EXPECT_FALSE(layer->loaded());
    ExpectInvalid(layer->LoadWeight("o", RandomF32({64, 64}, 1)), "shard id \"o\"");
    ExpectInvalid(layer->LoadWeight("k", RandomF32({64, 64}, 1)), "[2 heads");
    ExpectInvalid(layer->LoadWeight("q", RandomF32({64, 64}, 1), RandomF32({64}, 2)),
                  "unexpected bias");
    EXPECT_TRUE(layer->LoadWeight("q", RandomF32({64, 64}, 1)).ok());
    EXPECT_TRUE(layer->LoadWeight("k", RandomF32({16, 64}, 1)).ok());
    EXPECT_TRUE(layer->LoadWeight("v", RandomF32({16, 64}, 1)).ok());
    EXPECT_TRUE(layer->loaded());
  });
}

TEST(ParallelLinearErrorsTest, ShapeMismatchesAreErrors) {
  OnRank0(2, [](GroupCoordinator& g) {
    ExpectInvalid(ColumnParallelLinear::Load(RandomF32({8}, 1), Tensor(), g).status(), "2-D");
    ExpectInvalid(ColumnParallelLinear::Load(RandomF32({8, 4}, 1), RandomF32({6}, 2), g).status(),
                  "bias");
    const Tensor ws[] = {RandomF32({8, 4}, 1), RandomF32({8, 6}, 2)};
    ExpectInvalid(MergedColumnParallelLinear::Load(ws, {}, g).status(), "input_size) 6");
  });
}

}  // namespace
}  // namespace uc::layers
