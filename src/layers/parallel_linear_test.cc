#include "layers/parallel_linear.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

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
