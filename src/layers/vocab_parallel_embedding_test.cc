#include "layers/vocab_parallel_embedding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "distributed/thread_process_group.h"
#include "layers/embedding.h"
#include "layers/layers_test_util.h"
#include "layers/linear.h"

namespace uc::layers {
namespace {

using distributed::GroupCoordinator;
using distributed::RunWithThreadGroup;

using testing::ExpectClose;
using testing::RandomF32;
using testing::RandomWeight;

struct EmbeddingCase {
  int tp;
  DType dtype;
  int64_t vocab_size;
};

void PrintTo(const EmbeddingCase& c, std::ostream* os) {
  *os << "tp " << c.tp << " " << DTypeName(c.dtype) << " vocab " << c.vocab_size;
}

std::string EmbeddingCaseName(const ::testing::TestParamInfo<EmbeddingCase>& info) {
  return "Tp" + std::to_string(info.param.tp) + std::string(DTypeName(info.param.dtype)) + "Vocab" +
         std::to_string(info.param.vocab_size);
}

class VocabParallelTest : public ::testing::TestWithParam<EmbeddingCase> {
 protected:
  int tp() const { return GetParam().tp; }
  DType dtype() const { return GetParam().dtype; }
  int64_t vocab() const { return GetParam().vocab_size; }
};

constexpr int64_t kHidden = 64;

TEST_P(VocabParallelTest, EmbeddingEqualsTheUnshardedLookup) {
  const Tensor table = RandomWeight(vocab(), kHidden, dtype(), 1);
  std::vector<int32_t> ids = {0, static_cast<int32_t>(vocab() - 1),
                              3 % static_cast<int32_t>(vocab()), 1 % static_cast<int32_t>(vocab())};
  for (int32_t i = 0; i < vocab(); i += 5) ids.push_back(i);
  Tensor ref = Tensor::Empty({static_cast<int64_t>(ids.size()), kHidden}, DType::kF32);
  Embedding(table).Forward(ids, ref);
  RunWithThreadGroup(tp(), [&](GroupCoordinator& g) {
    auto layer = VocabParallelEmbedding::Load(table, g);
    ASSERT_TRUE(layer.ok()) << layer.status().ToString();
    const VocabShard& shard = layer->shard();
    EXPECT_EQ(layer->table().raw(), table.row(shard.vocab_start_index));  // a view
    Tensor out = Tensor::Empty({static_cast<int64_t>(ids.size()), kHidden}, DType::kF32);
    layer->Forward(ids, out);
    EXPECT_EQ(out.ToFloatVector(), ref.ToFloatVector());  // bitwise: one row plus zeros
  });
}

TEST_P(VocabParallelTest, LmHeadGathersFullLogits) {
  constexpr int64_t kM = 3;
  const Tensor weight = RandomWeight(vocab(), kHidden, dtype(), 2);
  const Tensor x = RandomF32({kM, kHidden}, 3);
  Tensor ref = Tensor::Empty({kM, vocab()}, DType::kF32);
  Linear(weight, Tensor()).Forward(x, ref, nullptr);
  RunWithThreadGroup(tp(), [&](GroupCoordinator& g) {
    auto head = ParallelLmHead::Load(weight, g);
    ASSERT_TRUE(head.ok()) << head.status().ToString();
    EXPECT_TRUE(head->has_logits());
    Tensor logits = Tensor::Empty({kM, vocab()}, DType::kF32);
    head->Forward(x, logits, nullptr);
    ExpectClose(logits.ToFloatVector(), ref.ToFloatVector());

    auto first_only = ParallelLmHead::Load(weight, g, /*use_all_gather=*/false);
    ASSERT_TRUE(first_only.ok());
    EXPECT_EQ(first_only->has_logits(), g.rank_in_group() == 0);
    Tensor logits0;  // undefined where no logits arrive
    if (first_only->has_logits()) logits0 = Tensor::Empty({kM, vocab()}, DType::kF32);
    first_only->Forward(x, logits0, nullptr);
    if (first_only->has_logits()) ExpectClose(logits0.ToFloatVector(), ref.ToFloatVector());
  });
}

INSTANTIATE_TEST_SUITE_P(
    Cases, VocabParallelTest,
    ::testing::Values(EmbeddingCase{1, DType::kF32, 37}, EmbeddingCase{2, DType::kF32, 37},
                      EmbeddingCase{4, DType::kF32, 37}, EmbeddingCase{4, DType::kF32, 64},
                      EmbeddingCase{4, DType::kF32, 3}, EmbeddingCase{2, DType::kQ8_0, 37},
                      EmbeddingCase{4, DType::kQ4_1, 50}),
    EmbeddingCaseName);

TEST(VocabShardTest, ShardsCoverTheVocabularyInOrder) {
  for (int64_t vocab : {1, 3, 37, 512, 49152}) {
    for (int tp : {1, 2, 3, 4, 8}) {
      int64_t next = 0;
      for (int r = 0; r < tp; ++r) {
        const VocabShard s = VocabShardFor(vocab, r, tp);
        EXPECT_EQ(s.vocab_start_index, next);
        EXPECT_LE(s.vocab_end_index - s.vocab_start_index, s.num_embeddings_per_partition);
        next = s.vocab_end_index;
      }
      EXPECT_EQ(next, vocab);
    }
  }
}

TEST(VocabParallelErrorsTest, TableMustBeAMatrix) {
  GroupCoordinator g({0}, 0, 0, nullptr);  // TP=1 needs no transport
  EXPECT_EQ(VocabParallelEmbedding::Load(RandomF32({8}, 1), g).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ParallelLmHead::Load(Tensor(), g).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace uc::layers
