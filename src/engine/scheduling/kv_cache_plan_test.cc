#include "engine/scheduling/kv_cache_plan.h"

#include <gtest/gtest.h>

namespace uc::engine {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

// Gemma 3 270M: 18 layers of one 256-wide KV head in F32 (2 x 18 x 16 x 256 x 4 bytes per
// block of 16 tokens), a 32k context, global layers among the windowed ones (no MaxWindow).
KvCacheInputs Gemma3() {
  KvCacheInputs in;
  in.block_bytes = int64_t{2} * 18 * 16 * 256 * 4;
  in.block_size = 16;
  in.model_max_len = 32768;
  in.max_num_seqs = 64;
  in.max_chunk = 256;
  return in;
}

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The case: --kv-cache-memory 1GiB and no --max-model-len used to stop; now the context
// is what 1 GiB holds (1820 blocks = 29120 tokens), said in one line naming both flags.
TEST(PlanKvCacheTest, ExplicitBudgetFitsTheModelsContext) {
  KvCacheInputs in = Gemma3();
  in.kv_cache_bytes = kGiB;
  const StatusOr<KvCachePlan> plan = PlanKvCache(in);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_TRUE(plan->fitted);
  EXPECT_FALSE(plan->automatic);
  EXPECT_EQ(plan->max_model_len, 29120);
  EXPECT_EQ(plan->num_blocks, 1820);
  EXPECT_EQ(plan->blocks_per_seq, 1820);
  EXPECT_TRUE(Has(plan->note, "29120") && Has(plan->note, "32768")) << plan->note;
  EXPECT_TRUE(Has(plan->note, "--kv-cache-memory") && Has(plan->note, "--max-model-len"))
      << plan->note;
  EXPECT_TRUE(Has(plan->Describe(), "1820 blocks of 16 tokens")) << plan->Describe();
}

// A given --max-model-len is kept or refused, never shortened.
TEST(PlanKvCacheTest, ExplicitContextLargerThanTheCacheIsAnError) {
  KvCacheInputs in = Gemma3();
  in.kv_cache_bytes = kGiB;
  in.max_model_len = 32768;
  const StatusOr<KvCachePlan> plan = PlanKvCache(in);
  ASSERT_FALSE(plan.ok());
  const std::string& m = plan.status().message();
  EXPECT_TRUE(Has(m, "holds 29120 tokens") && Has(m, "max_model_len 32768")) << m;
  EXPECT_TRUE(Has(m, "--kv-cache-memory") && Has(m, "--max-model-len")) << m;
  // Automatic budgets too: no machine holds a billion tokens in 4 GiB.
  in.kv_cache_bytes = 0;
  in.available_bytes = 64 * kGiB;
  in.max_model_len = 1'000'000'000;
  const StatusOr<KvCachePlan> huge = PlanKvCache(in);
  ASSERT_FALSE(huge.ok());
  EXPECT_TRUE(Has(huge.status().message(), "automatic")) << huge.status().message();
  EXPECT_TRUE(Has(huge.status().message(), "--max-model-len")) << huge.status().message();
  in.max_model_len = 1000;
  const StatusOr<KvCachePlan> fits = PlanKvCache(in);
  ASSERT_TRUE(fits.ok()) << fits.status().ToString();
  EXPECT_EQ(fits->max_model_len, 1000);
  EXPECT_FALSE(fits->fitted);
  EXPECT_EQ(fits->num_blocks, 63 * 64) << "never more than max_num_seqs full sequences use";
}

// Automatic: a quarter of the available memory, at most 4 GiB (or one full sequence).
TEST(PlanKvCacheTest, AutomaticBudgetIsAShareOfTheMemoryBounded) {
  KvCacheInputs in = Gemma3();
  in.available_bytes = 64 * kGiB;
  StatusOr<KvCachePlan> plan = PlanKvCache(in);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_TRUE(plan->automatic);
  EXPECT_FALSE(plan->fitted);
  EXPECT_EQ(plan->budget_bytes, kAutoKvCacheCap);
  EXPECT_EQ(plan->num_blocks, kAutoKvCacheCap / in.block_bytes);
  EXPECT_EQ(plan->max_model_len, 32768);
  EXPECT_TRUE(Has(plan->Describe(), "sized automatically")) << plan->Describe();

  in.available_bytes = 8 * kGiB;  // a quarter: 2 GiB, more than one 1152 MiB sequence
  plan = PlanKvCache(in);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->budget_bytes, 2 * kGiB);
  EXPECT_EQ(plan->max_model_len, 32768);

  in.available_bytes = 2 * kGiB;  // a quarter: 512 MiB, 910 blocks
  plan = PlanKvCache(in);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_TRUE(plan->fitted);
  EXPECT_EQ(plan->max_model_len, 910 * 16);
  EXPECT_TRUE(Has(plan->note, "automatic")) << plan->note;

  in.available_bytes = 0;  // nothing readable: the old fixed 1 GiB
  plan = PlanKvCache(in);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->budget_bytes, kGiB);
  EXPECT_EQ(plan->max_model_len, 29120);
}

// One sequence longer than the 4 GiB bound still gets its cache when a quarter of the memory
// holds it.
TEST(PlanKvCacheTest, AutomaticBoundGrowsToOneFullSequence) {
  KvCacheInputs in = Gemma3();
  in.model_max_len = 131072;  // 8192 blocks: 4.5 GiB
  in.available_bytes = 64 * kGiB;
  const StatusOr<KvCachePlan> plan = PlanKvCache(in);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_FALSE(plan->fitted);
  EXPECT_EQ(plan->num_blocks, 8192);
  EXPECT_EQ(plan->budget_bytes, 8192 * in.block_bytes);
}

// A small model on any machine: the cache is what max_num_seqs full sequences use.
TEST(PlanKvCacheTest, NeverMoreThanMaxNumSeqsFullSequences) {
  KvCacheInputs in;
  in.block_bytes = 5 * 2 * 16 * 32 * 4;  // stories260K
  in.model_max_len = 512;
  in.max_num_seqs = 64;
  in.available_bytes = 64 * kGiB;
  const StatusOr<KvCachePlan> plan = PlanKvCache(in);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->num_blocks, 32 * 64);
  EXPECT_EQ(plan->max_model_len, 512);
}

// The generator (one sequence) and the engine (max_num_seqs of them) decide the same context.
TEST(PlanKvCacheTest, OneSequenceAndABatchGetTheSameContext) {
  for (int64_t available : {2 * kGiB, 64 * kGiB}) {
    KvCacheInputs batch = Gemma3();
    batch.available_bytes = available;
    KvCacheInputs alone = batch;
    alone.max_num_seqs = 1;
    const StatusOr<KvCachePlan> a = PlanKvCache(alone);
    const StatusOr<KvCachePlan> b = PlanKvCache(batch);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->max_model_len, b->max_model_len) << available;
    EXPECT_EQ(a->fitted, b->fitted) << available;
  }
}

// A fitted context is never shorter than min(the model's, 4096): a smaller cache is an error
// that says which --max-model-len would run.
TEST(PlanKvCacheTest, TooSmallToFitIsAnErrorNamingTheFlags) {
  KvCacheInputs in = Gemma3();
  in.kv_cache_bytes = 64 * kMiB;  // 113 blocks: 1808 tokens
  StatusOr<KvCachePlan> plan = PlanKvCache(in);
  ASSERT_FALSE(plan.ok());
  std::string m = plan.status().message();
  EXPECT_TRUE(Has(m, "holds 1808 tokens") && Has(m, "4096")) << m;
  EXPECT_TRUE(Has(m, "--kv-cache-memory") && Has(m, "--max-model-len 1808 or less")) << m;
  in.kv_cache_bytes = 150 * kMiB;  // 266 blocks: 4256 tokens, above the floor
  plan = PlanKvCache(in);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->max_model_len, 4256);
  // A model shorter than the floor keeps its own context or fails.
  KvCacheInputs small;
  small.block_bytes = 5 * 2 * 16 * 32 * 4;
  small.model_max_len = 512;
  small.kv_cache_bytes = 100 << 10;  // 5 blocks: 80 tokens
  plan = PlanKvCache(small);
  ASSERT_FALSE(plan.ok());
  m = plan.status().message();
  EXPECT_TRUE(Has(m, "holds 80 tokens") && Has(m, "context of 512")) << m;
  small.kv_cache_bytes = 1;  // not one block
  plan = PlanKvCache(small);
  ASSERT_FALSE(plan.ok());
  EXPECT_TRUE(Has(plan.status().message(), "holds 0 tokens")) << plan.status().message();
}

// An exact block count (tests, tuning) follows the same rules.
TEST(PlanKvCacheTest, ExactBlockCount) {
  KvCacheInputs in = Gemma3();
  in.num_kv_blocks = 300;
  StatusOr<KvCachePlan> plan = PlanKvCache(in);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->num_blocks, 300);
  EXPECT_EQ(plan->max_model_len, 4800);
  EXPECT_TRUE(plan->fitted);
  in.max_model_len = 8192;
  plan = PlanKvCache(in);
  ASSERT_FALSE(plan.ok());
  EXPECT_TRUE(Has(plan.status().message(), "300 KV blocks of 16 tokens"))
      << plan.status().message();
}

// With a window on every layer a sequence holds a bounded number of blocks at any length
// (MaxBlocksHeld), so a small cache runs the model's whole context.
TEST(PlanKvCacheTest, SlidingWindowEverywhereBoundsWhatASequenceHolds) {
  KvCacheInputs in;
  in.block_bytes = 1024;
  in.block_size = 2;
  in.sliding_window = 8;
  in.max_chunk = 4;
  in.model_max_len = 100000;
  in.num_kv_blocks = 7;  // ceil((8 - 1 + 4) / 2) + 1
  StatusOr<KvCachePlan> plan = PlanKvCache(in);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->max_model_len, 100000);
  EXPECT_FALSE(plan->fitted);
  in.num_kv_blocks = 6;  // one block short: 12 tokens, below the 4096 a fitted context needs
  plan = PlanKvCache(in);
  ASSERT_FALSE(plan.ok());
  EXPECT_TRUE(Has(plan.status().message(), "holds 12 tokens")) << plan.status().message();
}

TEST(PlanKvCacheTest, OutOfRangeInputsAreErrors) {
  KvCacheInputs in = Gemma3();
  in.max_model_len = -1;
  EXPECT_FALSE(PlanKvCache(in).ok());
  in = Gemma3();
  in.kv_cache_bytes = -1;
  EXPECT_FALSE(PlanKvCache(in).ok());
  in = Gemma3();
  in.block_bytes = 0;
  EXPECT_FALSE(PlanKvCache(in).ok());
}

TEST(AvailableMemoryBytesTest, ReadsThisMachine) {
  const int64_t available = AvailableMemoryBytes();
  EXPECT_GT(available, 16 * kMiB);
  EXPECT_LT(available, int64_t{1} << 50);
}

TEST(AutoAvailableBytesTest, OtherEnginesReservationsComeOffFirst) {
  EXPECT_EQ(AutoAvailableBytes(8 * kMiB, 0, 1), 8 * kMiB);
  EXPECT_EQ(AutoAvailableBytes(8 * kMiB, 6 * kMiB, 1), 2 * kMiB);
  EXPECT_EQ(AutoAvailableBytes(8 * kMiB, 6 * kMiB, 2), kMiB);
  EXPECT_EQ(AutoAvailableBytes(8 * kMiB, 9 * kMiB, 1), 1);  // nothing left: the usual error
  EXPECT_EQ(AutoAvailableBytes(0, 0, 1), 0);                // unknown: the fixed fallback
}

TEST(KvCacheReservationTest, TheAccountHoldsWhatLiveReservationsHold) {
  const int64_t before = ReservedKvCacheBytes();
  {
    KvCacheReservation a(3 * kMiB);
    KvCacheReservation b(5 * kMiB);
    EXPECT_EQ(ReservedKvCacheBytes(), before + 8 * kMiB);
    KvCacheReservation moved(std::move(a));
    EXPECT_EQ(ReservedKvCacheBytes(), before + 8 * kMiB);
    b = KvCacheReservation(kMiB);
    EXPECT_EQ(ReservedKvCacheBytes(), before + 4 * kMiB);
  }
  EXPECT_EQ(ReservedKvCacheBytes(), before);
}

}  // namespace
}  // namespace uc::engine
