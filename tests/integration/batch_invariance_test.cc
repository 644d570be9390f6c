// Batch invariance (models::LoadOptions::batch_invariant, on by default: these engines are
// built with the default options): a request's activations and logits have the same bits alone
// and in any batch. 32 requests of mixed lengths are run one at a time,
// then all together with prefill chunks mixed with decode rows and a KV cache small enough to
// preempt, then alone again at another prefill chunking: every row of every request is compared
// bit for bit at every tap (each block's attn_out, mlp_out and residual stream, and the final
// norm, which is the LM head's input), and the generated ids must be equal. Over the F32
// checkpoint and GGUF F16, Q8_0, Q4_0, Q4_1 and BF16, with exact and int8 matmuls, on the path the
// CPU has (portable, AVX2 or AVX-512; BF16 at int8 is the vdpbf16ps kernel where the CPU table
// prefers it, kernels/dispatch.h's CpuPrefersBf16Dot(), and the exact one elsewhere). And a
// mixture of experts (Qwen2-MoE with a shared expert), whose experts each run over only the
// tokens routed to them: a token's expert outputs must not depend on who else was routed there.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/batching_workload.h"
#include "common/test_util.h"
#include "engine/llm.h"
#include "engine/llm_engine.h"

namespace uc {
namespace {

struct Variant {
  const char* name;
  const char* model;  // under the source tree
  kernels::MatMulPrecision precision;
  // Under the source tree; null: the model's own. The MoE fixture's byte-level BPE adds no BOS
  // (the workload has an empty prompt): stories260K's has the same 512-token vocabulary and does.
  const char* tokenizer = nullptr;
};

void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

engine::EngineOptions Options(const Variant& v, int prefill_chunk, int batched_tokens) {
  engine::EngineOptions o;
  o.model_path = std::string(UC_SOURCE_DIR) + "/" + v.model;
  o.num_threads = 2;
  o.max_model_len = 256;
  o.max_num_seqs = 32;
  o.max_num_batched_tokens = batched_tokens;
  o.max_prefill_chunk = prefill_chunk;
  o.load.matmul_precision = v.precision;
  if (v.tokenizer != nullptr) o.tokenizer_path = std::string(UC_SOURCE_DIR) + "/" + v.tokenizer;
  // Batch invariance is the default: nothing to set.
  return o;
}

// `requests` through a new engine with `options`, all at once or one at a time.
testing::RecordedRun RunRequests(const engine::EngineOptions& options,
                                 const std::vector<engine::GenerateRequest>& requests,
                                 bool together) {
  auto llm = engine::LLM::Open(options);
  UC_CHECK(llm.ok(), "%s", llm.status().ToString().c_str());
  return testing::RunRecorded(**llm, requests, together);
}

class BatchInvarianceTest : public ::testing::TestWithParam<Variant> {};

TEST_P(BatchInvarianceTest, EveryRowHasItsBitsAloneInABatchAndAtAnyChunking) {
  const std::vector<engine::GenerateRequest> requests = testing::BatchingWorkload(32);
  const testing::RecordedRun alone =
      RunRequests(Options(GetParam(), 16, 96), requests, /*together=*/false);
  for (const engine::GenerateResult& r : alone.results) {
    ASSERT_TRUE(r.status.ok()) << r.id << ": " << r.status.ToString();
  }

  // Prefill chunks of 7 beside decode rows, 40 tokens a step, a cache too small for all.
  engine::EngineOptions batched = Options(GetParam(), 7, 40);
  batched.num_kv_blocks = 24;
  const testing::RecordedRun together = RunRequests(batched, requests, /*together=*/true);
  EXPECT_GT(together.preemptions, 0);
  testing::ExpectSameBits(together, alone, "32 together");

  // Alone again, the prompt in chunks of 5 instead of 16.
  const std::vector<engine::GenerateRequest> some(requests.begin(), requests.begin() + 8);
  const testing::RecordedRun chunked =
      RunRequests(Options(GetParam(), 5, 96), some, /*together=*/false);
  testing::RecordedRun first_eight = alone;
  first_eight.results.resize(some.size());
  std::erase_if(first_eight.rows, [&](const auto& entry) {
    return std::none_of(some.begin(), some.end(), [&](const engine::GenerateRequest& r) {
      return r.id == entry.first.first;
    });
  });
  testing::ExpectSameBits(chunked, first_eight, "prefill chunks of 5");
}

INSTANTIATE_TEST_SUITE_P(
    Models, BatchInvarianceTest,
    ::testing::Values(Variant{"F32", "models/stories260K", kernels::MatMulPrecision::kExact},
                      Variant{"F16", "tests/testdata/gguf/f16/tiny-gqa2-F16.gguf",
                              kernels::MatMulPrecision::kExact},
                      Variant{"Q8_0_exact", "tests/testdata/gguf/q8_0/tiny-gqa2-Q8_0.gguf",
                              kernels::MatMulPrecision::kExact},
                      Variant{"Q8_0_int8", "tests/testdata/gguf/q8_0/tiny-gqa2-Q8_0.gguf",
                              kernels::MatMulPrecision::kInt8},
                      Variant{"Q4_0_exact", "tests/testdata/gguf/q4_0/tiny-gqa2-Q4_0.gguf",
                              kernels::MatMulPrecision::kExact},
                      Variant{"Q4_1_exact", "tests/testdata/gguf/q4_1/tiny-gqa2-Q4_1.gguf",
                              kernels::MatMulPrecision::kExact},
                      Variant{"Q4_0_int8", "tests/testdata/gguf/q4_0/tiny-gqa2-Q4_0.gguf",
                              kernels::MatMulPrecision::kInt8},
                      Variant{"BF16_int8", "tests/testdata/gguf/bf16/tiny-gqa2-BF16.gguf",
                              kernels::MatMulPrecision::kInt8},
                      Variant{"Qwen2Moe_F32", "tests/testdata/arch/qwen2moe",
                              kernels::MatMulPrecision::kExact,
                              "models/stories260K/tokenizer.model"}),
    [](const ::testing::TestParamInfo<Variant>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace uc
