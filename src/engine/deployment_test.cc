#include "engine/deployment.h"

#include <gtest/gtest.h>

namespace uc::engine {
namespace {

models::ModelConfig Stories260K() {
  models::ModelConfig c;
  c.hidden_size = 64;
  c.intermediate_size = 172;
  c.num_hidden_layers = 5;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 4;
  c.head_dim = 8;
  c.vocab_size = 512;
  return c;
}

// Sizes that do not divide are refused before any weight is read, naming the dimension.
TEST(ValidateParallelismTest, NamesTheDimensionThatDoesNotDivide) {
  const models::ModelConfig c = Stories260K();
  EXPECT_TRUE(ValidateParallelism(c, 1, 1, "m").ok());
  EXPECT_TRUE(ValidateParallelism(c, 4, 2, "m").ok());
  EXPECT_TRUE(ValidateParallelism(c, 2, 5, "m").ok());
  const Status heads = ValidateParallelism(c, 3, 1, "m");
  EXPECT_NE(heads.message().find("num_attention_heads 8"), std::string::npos) << heads.message();
  // 172 does not divide by 8: the F32 MLP splits unevenly (22 x 4, 21 x 4; layers::SplitInUnits).
  EXPECT_TRUE(ValidateParallelism(c, 8, 1, "m").ok());
  models::ModelConfig narrow = c;
  narrow.intermediate_size = 4;
  const Status mlp = ValidateParallelism(narrow, 8, 1, "m");
  EXPECT_NE(mlp.message().find("intermediate_size 4 is smaller than tensor_parallel_size 8"),
            std::string::npos)
      << mlp.message();
  const Status layers = ValidateParallelism(c, 1, 6, "m");
  EXPECT_NE(layers.message().find("num_hidden_layers 5"), std::string::npos) << layers.message();
  // A vocabulary TP does not divide shares out unevenly (GPT-2's 50257); one smaller than the
  // TP group cannot.
  models::ModelConfig odd_vocab = c;
  odd_vocab.vocab_size = 50257;
  EXPECT_TRUE(ValidateParallelism(odd_vocab, 2, 1, "m").ok());
  EXPECT_TRUE(ValidateParallelism(odd_vocab, 8, 1, "m").ok());
  odd_vocab.vocab_size = 3;
  const Status vocab = ValidateParallelism(odd_vocab, 4, 1, "m");
  EXPECT_NE(vocab.message().find("vocab_size 3 is smaller than tensor_parallel_size 4"),
            std::string::npos)
      << vocab.message();
  models::ModelConfig kv = c;
  kv.num_attention_heads = 12;
  kv.num_key_value_heads = 3;
  kv.intermediate_size = 176;
  const Status kv_heads = ValidateParallelism(kv, 2, 1, "m");
  EXPECT_NE(kv_heads.message().find("num_key_value_heads 3"), std::string::npos)
      << kv_heads.message();
}

}  // namespace
}  // namespace uc::engine
