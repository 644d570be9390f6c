#include "engine/scheduling/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace uc::engine {
namespace {

using worker::ScheduledSequence;
using worker::SchedulerOutput;
using Tokens = std::vector<int32_t>;

Tokens Prompt(int length, int32_t first) {
  Tokens ids(length);
  for (int i = 0; i < length; ++i) ids[i] = first + i;
  return ids;
}

worker::SamplingParams Params(int max_tokens = 16) {
  worker::SamplingParams params;
  params.max_tokens = max_tokens;
  return params;
}

// SchedulerOutput::total_tokens() lives in the worker library; the tests count for themselves.
int TotalTokens(const SchedulerOutput& out) {
  int total = 0;
  for (const ScheduledSequence& s : out.scheduled) total += s.num_tokens();
  return total;
}

const ScheduledSequence* FindScheduled(const SchedulerOutput& out, uint64_t seq_id) {
  for (const ScheduledSequence& s : out.scheduled) {
    if (s.seq_id == seq_id) return &s;
  }
  return nullptr;
}

std::vector<uint64_t> ScheduledIds(const SchedulerOutput& out) {
  std::vector<uint64_t> ids;
  for (const ScheduledSequence& s : out.scheduled) ids.push_back(s.seq_id);
  return ids;
}

Tokens Concat(Tokens a, const Tokens& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

SchedulerConfig Config(int max_num_seqs, int max_num_batched_tokens, int max_prefill_chunk,
                       int max_model_len) {
  SchedulerConfig config;
  config.max_num_seqs = max_num_seqs;
  config.max_num_batched_tokens = max_num_batched_tokens;
  config.max_prefill_chunk = max_prefill_chunk;
  config.max_model_len = max_model_len;
  return config;
}

TEST(SchedulerTest, AddSequenceRefusesBadRequestsNamingTheNumbers) {
  BlockManager blocks(/*num_blocks=*/4, /*block_size=*/16);  // 64 slots
  Scheduler scheduler(Config(8, 512, 256, /*max_model_len=*/256), &blocks);

  const Status empty = scheduler.AddSequence(1, {}, Params());
  EXPECT_EQ(empty.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(empty.message().find("empty"), std::string::npos) << empty.message();

  const Status too_long = scheduler.AddSequence(2, Prompt(300, 0), Params());
  EXPECT_EQ(too_long.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.message().find("prompt has 300 tokens; the context (max_model_len) is 256"),
            std::string::npos)
      << too_long.message();
  const Status at_limit = scheduler.AddSequence(3, Prompt(256, 0), Params());
  EXPECT_EQ(at_limit.code(), StatusCode::kInvalidArgument);

  const Status no_room = scheduler.AddSequence(4, Prompt(65, 0), Params());
  EXPECT_EQ(no_room.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_room.message().find("needing 5 KV blocks of 16 tokens; the cache has 4"),
            std::string::npos)
      << no_room.message();

  EXPECT_TRUE(scheduler.AddSequence(5, Prompt(64, 0), Params()).ok());
  const Status duplicate = scheduler.AddSequence(5, Prompt(3, 0), Params());
  EXPECT_EQ(duplicate.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(duplicate.message().find("sequence id 5"), std::string::npos) << duplicate.message();

  EXPECT_EQ(scheduler.num_waiting(), 1);  // only the valid one was queued
  EXPECT_EQ(scheduler.Info(1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(scheduler.Info(4).status().code(), StatusCode::kNotFound);
}

TEST(SchedulerTest, EmptySchedulerSchedulesNothing) {
  BlockManager blocks(4, 4);
  Scheduler scheduler(SchedulerConfig(), &blocks);
  EXPECT_FALSE(scheduler.HasUnfinished());
  const SchedulerOutput out = scheduler.Schedule();
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(scheduler.Schedule().step, out.step + 1);
}

TEST(SchedulerTest, SingleRequestPrefillsThenDecodes) {
  BlockManager blocks(/*num_blocks=*/8, /*block_size=*/4);
  Scheduler scheduler(Config(4, 64, 64, 128), &blocks);
  const Tokens prompt = Prompt(5, 100);
  worker::SamplingParams params = Params(3);
  params.temperature = 0.5f;
  ASSERT_TRUE(scheduler.AddSequence(7, prompt, params).ok());
  EXPECT_TRUE(scheduler.HasUnfinished());
  EXPECT_EQ(scheduler.num_waiting(), 1);

  const SchedulerOutput prefill = scheduler.Schedule();
  ASSERT_EQ(prefill.scheduled.size(), 1u);
  const ScheduledSequence& p = prefill.scheduled[0];
  EXPECT_EQ(p.seq_id, 7u);
  EXPECT_EQ(p.token_ids, prompt);
  EXPECT_EQ(p.start_pos, 0);
  EXPECT_EQ(p.num_prompt_tokens, 5);
  EXPECT_TRUE(p.sample);
  ASSERT_TRUE(p.new_params.has_value());
  EXPECT_EQ(p.new_params->temperature, 0.5f);
  EXPECT_EQ(p.new_params->max_tokens, 3);
  EXPECT_EQ(p.block_table, (Tokens{0, 1}));
  EXPECT_EQ(scheduler.num_running(), 1);
  EXPECT_EQ(scheduler.num_waiting(), 0);
  EXPECT_EQ(scheduler.Info(7)->num_computed_tokens, 5);  // counted when scheduled
  scheduler.AppendToken(7, 900);

  for (int i = 0; i < 3; ++i) {
    const SchedulerOutput decode = scheduler.Schedule();
    ASSERT_EQ(decode.scheduled.size(), 1u);
    const ScheduledSequence& d = decode.scheduled[0];
    EXPECT_EQ(d.token_ids, (Tokens{900 + i}));
    EXPECT_EQ(d.start_pos, 5 + i);
    EXPECT_EQ(d.num_prompt_tokens, 5);
    EXPECT_TRUE(d.sample);
    EXPECT_FALSE(d.new_params.has_value());
    EXPECT_EQ(static_cast<int>(d.block_table.size()), blocks.BlocksFor(d.end_pos()));
    scheduler.AppendToken(7, 901 + i);
  }
  const StatusOr<SequenceInfo> info = scheduler.Info(7);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->status, SequenceStatus::kRunning);
  EXPECT_EQ(info->num_tokens, 9);
  EXPECT_EQ(info->num_computed_tokens, 8);
  EXPECT_EQ(info->block_table, (Tokens{0, 1}));

  EXPECT_TRUE(scheduler.Finish(7));
  EXPECT_FALSE(scheduler.HasUnfinished());
  EXPECT_EQ(blocks.num_free_blocks(), 8);
  const SchedulerOutput last = scheduler.Schedule();
  EXPECT_TRUE(last.scheduled.empty());
  EXPECT_EQ(last.finished_seq_ids, (std::vector<uint64_t>{7}));
  EXPECT_TRUE(scheduler.Schedule().finished_seq_ids.empty());  // reported once
}

// A finished sequence whose last token must still run through the model (for probes): the
// final feed is one chunk without sampling, allowed even at max_model_len.
TEST(SchedulerTest, FinalTokenRunsOnceWithoutSampling) {
  BlockManager blocks(/*num_blocks=*/4, /*block_size=*/4);
  Scheduler scheduler(Config(4, 64, 64, /*max_model_len=*/8), &blocks);
  ASSERT_TRUE(scheduler.AddSequence(1, Prompt(6, 100), Params(2)).ok());
  ASSERT_TRUE(scheduler.Schedule().scheduled[0].sample);
  scheduler.AppendToken(1, 900);
  const SchedulerOutput decode = scheduler.Schedule();
  ASSERT_TRUE(decode.scheduled[0].sample);
  scheduler.AppendFinalToken(1, 901);  // the 8th token: max_model_len reached
  const SchedulerOutput feed = scheduler.Schedule();
  ASSERT_EQ(feed.scheduled.size(), 1u);
  EXPECT_EQ(feed.scheduled[0].token_ids, (Tokens{901}));
  EXPECT_EQ(feed.scheduled[0].start_pos, 7);
  EXPECT_FALSE(feed.scheduled[0].sample);
  EXPECT_EQ(scheduler.Info(1)->num_computed_tokens, 8);
  EXPECT_TRUE(scheduler.Finish(1));
  EXPECT_EQ(blocks.num_free_blocks(), 4);
}

TEST(SchedulerTest, LongPromptIsPrefilledInChunks) {
  BlockManager blocks(/*num_blocks=*/8, /*block_size=*/4);
  Scheduler scheduler(Config(4, 64, /*max_prefill_chunk=*/4, 128), &blocks);
  const Tokens prompt = Prompt(10, 0);
  ASSERT_TRUE(scheduler.AddSequence(1, prompt, Params()).ok());

  const int starts[] = {0, 4, 8};
  const int ends[] = {4, 8, 10};
  Tokens table;
  for (int c = 0; c < 3; ++c) {
    const SchedulerOutput out = scheduler.Schedule();
    ASSERT_EQ(out.scheduled.size(), 1u) << "chunk " << c;
    const ScheduledSequence& s = out.scheduled[0];
    EXPECT_EQ(s.start_pos, starts[c]);
    EXPECT_EQ(s.end_pos(), ends[c]);
    EXPECT_EQ(s.token_ids, Tokens(prompt.begin() + starts[c], prompt.begin() + ends[c]));
    EXPECT_EQ(s.sample, c == 2);
    EXPECT_EQ(s.new_params.has_value(), c == 0);
    EXPECT_EQ(s.num_prompt_tokens, 10);
    EXPECT_EQ(static_cast<int>(s.block_table.size()), c + 1);  // grows one block per chunk
    EXPECT_TRUE(std::equal(table.begin(), table.end(), s.block_table.begin()));  // a prefix
    table = s.block_table;
  }
  EXPECT_EQ(scheduler.Info(1)->block_table, (Tokens{0, 1, 2}));
  scheduler.AppendToken(1, 42);
  const SchedulerOutput decode = scheduler.Schedule();
  ASSERT_EQ(decode.scheduled.size(), 1u);
  EXPECT_EQ(decode.scheduled[0].token_ids, (Tokens{42}));
  EXPECT_EQ(decode.scheduled[0].start_pos, 10);
}

TEST(SchedulerTest, RequestsShareTheTokenBudget) {
  BlockManager blocks(/*num_blocks=*/16, /*block_size=*/4);
  Scheduler scheduler(Config(8, /*max_num_batched_tokens=*/8, 64, 128), &blocks);
  ASSERT_TRUE(scheduler.AddSequence(1, Prompt(6, 0), Params()).ok());
  ASSERT_TRUE(scheduler.AddSequence(2, Prompt(6, 100), Params()).ok());
  ASSERT_TRUE(scheduler.AddSequence(3, Prompt(6, 200), Params()).ok());

  const SchedulerOutput s0 = scheduler.Schedule();
  EXPECT_EQ(TotalTokens(s0), 8);
  ASSERT_EQ(ScheduledIds(s0), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(s0.scheduled[0].num_tokens(), 6);
  EXPECT_TRUE(s0.scheduled[0].sample);
  EXPECT_EQ(s0.scheduled[1].num_tokens(), 2);  // what the budget left
  EXPECT_FALSE(s0.scheduled[1].sample);
  EXPECT_EQ(scheduler.num_waiting(), 1);
  scheduler.AppendToken(1, 50);

  // Running ones first (a decode and the rest of a prefill), then the waiting one.
  const SchedulerOutput s1 = scheduler.Schedule();
  EXPECT_EQ(TotalTokens(s1), 8);
  ASSERT_EQ(ScheduledIds(s1), (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(s1.scheduled[0].num_tokens(), 1);
  EXPECT_EQ(s1.scheduled[1].start_pos, 2);
  EXPECT_EQ(s1.scheduled[1].num_tokens(), 4);
  EXPECT_TRUE(s1.scheduled[1].sample);
  EXPECT_EQ(s1.scheduled[2].num_tokens(), 3);
  EXPECT_TRUE(s1.scheduled[2].new_params.has_value());
}

TEST(SchedulerTest, RunningPrefillsContinueBeforeWaitingOnesStart) {
  BlockManager blocks(/*num_blocks=*/32, /*block_size=*/4);
  Scheduler scheduler(Config(8, /*max_num_batched_tokens=*/6, /*max_prefill_chunk=*/6, 128),
                      &blocks);
  ASSERT_TRUE(scheduler.AddSequence(1, Prompt(20, 0), Params()).ok());
  ASSERT_EQ(ScheduledIds(scheduler.Schedule()), (std::vector<uint64_t>{1}));
  ASSERT_TRUE(scheduler.AddSequence(2, Prompt(4, 100), Params()).ok());
  for (int step = 0; step < 2; ++step) {
    const SchedulerOutput out = scheduler.Schedule();
    ASSERT_EQ(ScheduledIds(out), (std::vector<uint64_t>{1})) << step;  // budget all used
    EXPECT_EQ(out.scheduled[0].start_pos, 6 * (step + 1));
  }
  const SchedulerOutput last_chunk = scheduler.Schedule();  // 2 left for 1, 4 for 2
  ASSERT_EQ(ScheduledIds(last_chunk), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(last_chunk.scheduled[0].num_tokens(), 2);
  EXPECT_TRUE(last_chunk.scheduled[0].sample);
  EXPECT_EQ(last_chunk.scheduled[1].num_tokens(), 4);
}

TEST(SchedulerTest, MaxNumSeqsBoundsTheRunningSet) {
  BlockManager blocks(/*num_blocks=*/32, /*block_size=*/4);
  Scheduler scheduler(Config(/*max_num_seqs=*/2, 64, 64, 128), &blocks);
  for (uint64_t id = 1; id <= 3; ++id) {
    ASSERT_TRUE(scheduler.AddSequence(id, Prompt(3, 0), Params()).ok());
  }
  EXPECT_EQ(ScheduledIds(scheduler.Schedule()), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(scheduler.num_running(), 2);
  EXPECT_EQ(scheduler.num_waiting(), 1);
  scheduler.AppendToken(1, 10);
  scheduler.AppendToken(2, 10);
  EXPECT_EQ(ScheduledIds(scheduler.Schedule()), (std::vector<uint64_t>{1, 2}));
  scheduler.AppendToken(1, 11);
  EXPECT_TRUE(scheduler.Finish(2));
  const SchedulerOutput out = scheduler.Schedule();
  EXPECT_EQ(ScheduledIds(out), (std::vector<uint64_t>{1, 3}));
  EXPECT_EQ(out.finished_seq_ids, (std::vector<uint64_t>{2}));
  EXPECT_EQ(scheduler.num_running(), 2);
}

// With at most 2 steering configs running, a sequence with a third config waits while later
// sequences — unsteered, or with a config already running — go ahead; it starts once a config
// is gone. Every chunk carries its sequence's config id.
TEST(SchedulerTest, SteeringCapDelaysOnlyNewConfigs) {
  BlockManager blocks(/*num_blocks=*/32, /*block_size=*/4);
  SchedulerConfig config = Config(/*max_num_seqs=*/8, 64, 64, 128);
  config.max_steering_configs = 2;
  Scheduler scheduler(config, &blocks);
  const std::vector<std::pair<uint64_t, uint32_t>> seqs = {{1, 7}, {2, 8}, {3, 9},
                                                           {4, 0}, {5, 7}, {6, 9}};
  for (const auto& [id, steering] : seqs) {
    ASSERT_TRUE(scheduler.AddSequence(id, Prompt(3, 0), Params(), steering).ok());
  }
  SchedulerOutput out = scheduler.Schedule();
  EXPECT_EQ(ScheduledIds(out), (std::vector<uint64_t>{1, 2, 4, 5}));
  for (const ScheduledSequence& s : out.scheduled) {
    EXPECT_EQ(s.steering_id, seqs[s.seq_id - 1].second) << s.seq_id;
  }
  EXPECT_EQ(scheduler.num_waiting(), 2);
  for (uint64_t id : {1, 4, 5}) scheduler.AppendToken(id, 10);
  EXPECT_TRUE(scheduler.Finish(2));  // config 8 is gone: config 9 may start
  out = scheduler.Schedule();
  EXPECT_EQ(ScheduledIds(out), (std::vector<uint64_t>{1, 4, 5, 3, 6}));  // running first
  EXPECT_EQ(scheduler.num_waiting(), 0);
}

// Two sequences fill a cache of 4 blocks of 2; when the older one needs a fifth block, the
// newer one is preempted, and it is recomputed (prompt + generated tokens) once there is room.
TEST(SchedulerTest, PreemptsTheNewestAndRecomputesIt) {
  BlockManager blocks(/*num_blocks=*/4, /*block_size=*/2);
  Scheduler scheduler(Config(8, 100, /*max_prefill_chunk=*/2, 64), &blocks);
  const Tokens a_prompt = {10, 11, 12};
  const Tokens b_prompt = {20, 21, 22};
  ASSERT_TRUE(scheduler.AddSequence(1, a_prompt, Params()).ok());
  ASSERT_TRUE(scheduler.AddSequence(2, b_prompt, Params()).ok());

  EXPECT_EQ(ScheduledIds(scheduler.Schedule()), (std::vector<uint64_t>{1, 2}));  // 2 each
  const SchedulerOutput s1 = scheduler.Schedule();  // last prompt token of each
  ASSERT_EQ(ScheduledIds(s1), (std::vector<uint64_t>{1, 2}));
  EXPECT_TRUE(s1.scheduled[0].sample && s1.scheduled[1].sample);
  EXPECT_EQ(blocks.num_free_blocks(), 0);
  scheduler.AppendToken(1, 110);
  scheduler.AppendToken(2, 120);
  EXPECT_EQ(ScheduledIds(scheduler.Schedule()), (std::vector<uint64_t>{1, 2}));  // pos 3
  scheduler.AppendToken(1, 111);
  scheduler.AppendToken(2, 121);

  // A needs a third block for position 4: B goes. B's first chunk would then fit in the freed
  // space, but nothing waiting is admitted in a step that preempted.
  ASSERT_TRUE(scheduler.AddSequence(3, {30}, Params()).ok());
  const SchedulerOutput s3 = scheduler.Schedule();
  EXPECT_EQ(ScheduledIds(s3), (std::vector<uint64_t>{1}));
  EXPECT_EQ(s3.preempted_seq_ids, (std::vector<uint64_t>{2}));
  EXPECT_EQ(scheduler.num_preemptions(), 1);
  EXPECT_EQ(blocks.num_free_blocks(), 1);
  const StatusOr<SequenceInfo> b = scheduler.Info(2);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->status, SequenceStatus::kPreempted);
  EXPECT_EQ(b->num_computed_tokens, 0);
  EXPECT_EQ(b->num_tokens, 5);
  EXPECT_TRUE(b->block_table.empty());
  EXPECT_EQ(b->num_preemptions, 1);
  EXPECT_EQ(scheduler.num_waiting(), 2);
  scheduler.AppendToken(1, 112);
  ASSERT_TRUE(scheduler.Finish(1));
  EXPECT_EQ(blocks.num_free_blocks(), 4);

  // B comes back before the newer request 3, from position 0, prompt then generated tokens.
  const Tokens b_known = Concat(b_prompt, {120, 121});
  const SchedulerOutput r0 = scheduler.Schedule();
  EXPECT_EQ(r0.finished_seq_ids, (std::vector<uint64_t>{1}));
  ASSERT_EQ(ScheduledIds(r0), (std::vector<uint64_t>{2, 3}));
  const ScheduledSequence& first = r0.scheduled[0];
  EXPECT_EQ(first.start_pos, 0);
  EXPECT_EQ(first.token_ids, Tokens(b_known.begin(), b_known.begin() + 2));
  EXPECT_FALSE(first.sample);
  EXPECT_FALSE(first.new_params.has_value());  // the ranks kept it across the preemption
  EXPECT_EQ(first.num_prompt_tokens, 3);
  EXPECT_TRUE(r0.scheduled[1].new_params.has_value());
  scheduler.AppendToken(3, 130);
  const SchedulerOutput r1 = scheduler.Schedule();
  const ScheduledSequence* second = FindScheduled(r1, 2);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->token_ids, Tokens(b_known.begin() + 2, b_known.begin() + 4));
  EXPECT_FALSE(second->sample);
  scheduler.AppendToken(3, 131);
  const SchedulerOutput r2 = scheduler.Schedule();
  const ScheduledSequence* last = FindScheduled(r2, 2);
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(last->token_ids, (Tokens{121}));
  EXPECT_EQ(last->start_pos, 4);
  EXPECT_TRUE(last->sample);
  EXPECT_FALSE(last->new_params.has_value());
  EXPECT_EQ(static_cast<int>(last->block_table.size()), 3);
  EXPECT_EQ(scheduler.Info(2)->status, SequenceStatus::kRunning);
  EXPECT_EQ(scheduler.Info(2)->num_preemptions, 1);
}

TEST(SchedulerTest, NewestSequencePreemptsItselfWhenItCannotGrow) {
  BlockManager blocks(/*num_blocks=*/4, /*block_size=*/2);
  Scheduler scheduler(Config(8, 100, 100, 64), &blocks);
  ASSERT_TRUE(scheduler.AddSequence(1, Prompt(3, 0), Params()).ok());
  ASSERT_TRUE(scheduler.AddSequence(2, Prompt(4, 10), Params()).ok());
  EXPECT_EQ(ScheduledIds(scheduler.Schedule()), (std::vector<uint64_t>{1, 2}));
  scheduler.AppendToken(1, 1);  // A: position 3 fits its second block
  scheduler.AppendToken(2, 2);  // B: position 4 needs a third block
  const SchedulerOutput out = scheduler.Schedule();
  EXPECT_EQ(ScheduledIds(out), (std::vector<uint64_t>{1}));
  EXPECT_EQ(out.preempted_seq_ids, (std::vector<uint64_t>{2}));
  EXPECT_EQ(blocks.num_free_blocks(), 2);
  EXPECT_EQ(scheduler.Info(1)->status, SequenceStatus::kRunning);
  EXPECT_EQ(scheduler.Info(2)->status, SequenceStatus::kPreempted);
}

// Holding (a probe escalated): a held sequence keeps its blocks but is not scheduled, does not
// take a max_num_seqs slot, yields its blocks first to a waiting sequence, and may get its
// withheld token appended even after preemption took it; released, it is recomputed exactly.
TEST(SchedulerTest, HeldSequencesAreSkippedAndYieldTheirBlocksFirst) {
  BlockManager blocks(/*num_blocks=*/4, /*block_size=*/2);
  Scheduler scheduler(Config(/*max_num_seqs=*/1, 100, 100, 64), &blocks);
  ASSERT_TRUE(scheduler.AddSequence(1, {10, 11, 12}, Params()).ok());
  EXPECT_EQ(ScheduledIds(scheduler.Schedule()), (std::vector<uint64_t>{1}));
  EXPECT_TRUE(scheduler.Hold(1));  // sampled; its token withheld for now
  EXPECT_FALSE(scheduler.Hold(1));
  EXPECT_EQ(scheduler.num_held(), 1);
  EXPECT_TRUE(scheduler.Schedule().scheduled.empty());  // skipped, no AppendToken needed
  EXPECT_EQ(blocks.num_free_blocks(), 2);               // its blocks stay
  // A waiting sequence takes the slot, and the held one's blocks when it needs them.
  ASSERT_TRUE(scheduler.AddSequence(2, Prompt(7, 20), Params()).ok());
  const SchedulerOutput out = scheduler.Schedule();
  EXPECT_EQ(ScheduledIds(out), (std::vector<uint64_t>{2}));
  EXPECT_EQ(out.preempted_seq_ids, (std::vector<uint64_t>{1}));
  EXPECT_EQ(scheduler.Info(1)->status, SequenceStatus::kPreempted);
  scheduler.AppendToken(2, 27);
  // The decision comes: the withheld token is appended to the preempted sequence, then
  // released; it is recomputed from position 0 once there is room.
  scheduler.AppendToken(1, 13);
  EXPECT_TRUE(scheduler.Release(1));
  EXPECT_FALSE(scheduler.Release(1));
  EXPECT_EQ(scheduler.num_held(), 0);
  ASSERT_TRUE(scheduler.Finish(2));
  const SchedulerOutput again = scheduler.Schedule();
  const ScheduledSequence* s = FindScheduled(again, 1);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->start_pos, 0);
  EXPECT_EQ(s->token_ids, (Tokens{10, 11, 12, 13}));
  EXPECT_TRUE(s->sample);
  // Finishing a held sequence ends its hold.
  EXPECT_TRUE(scheduler.Hold(1));
  ASSERT_TRUE(scheduler.Finish(1));
  EXPECT_EQ(scheduler.num_held(), 0);
}

TEST(SchedulerTest, FinishWorksOnWaitingRunningAndPreemptedSequences) {
  BlockManager blocks(/*num_blocks=*/4, /*block_size=*/2);
  Scheduler scheduler(Config(8, 100, 100, 64), &blocks);
  ASSERT_TRUE(scheduler.AddSequence(1, Prompt(3, 0), Params()).ok());
  ASSERT_TRUE(scheduler.AddSequence(2, Prompt(4, 10), Params()).ok());
  ASSERT_TRUE(scheduler.AddSequence(3, Prompt(7, 20), Params()).ok());  // does not fit yet
  EXPECT_EQ(ScheduledIds(scheduler.Schedule()), (std::vector<uint64_t>{1, 2}));
  scheduler.AppendToken(1, 1);
  scheduler.AppendToken(2, 2);
  EXPECT_EQ(scheduler.Schedule().preempted_seq_ids, (std::vector<uint64_t>{2}));
  ASSERT_EQ(scheduler.Info(2)->status, SequenceStatus::kPreempted);
  ASSERT_EQ(scheduler.Info(3)->status, SequenceStatus::kWaiting);
  EXPECT_EQ(blocks.num_free_blocks(), 2);

  EXPECT_TRUE(scheduler.Finish(3));  // waiting: held no blocks
  EXPECT_EQ(blocks.num_free_blocks(), 2);
  EXPECT_TRUE(scheduler.Finish(2));  // preempted: its blocks were already freed
  EXPECT_EQ(blocks.num_free_blocks(), 2);
  EXPECT_EQ(scheduler.num_waiting(), 0);
  EXPECT_TRUE(scheduler.Finish(1));  // running, mid-step (its sampled token never appended)
  EXPECT_EQ(blocks.num_free_blocks(), 4);
  EXPECT_EQ(scheduler.num_running(), 0);
  EXPECT_FALSE(scheduler.HasUnfinished());

  EXPECT_FALSE(scheduler.Finish(1));   // already finished
  EXPECT_FALSE(scheduler.Finish(99));  // unknown
  EXPECT_EQ(scheduler.Info(1).status().code(), StatusCode::kNotFound);
  // The id stays taken until the ranks are told, then it may be used again.
  EXPECT_FALSE(scheduler.AddSequence(1, Prompt(2, 0), Params()).ok());
  const SchedulerOutput out = scheduler.Schedule();
  EXPECT_TRUE(out.scheduled.empty());
  EXPECT_EQ(out.finished_seq_ids, (std::vector<uint64_t>{3, 2, 1}));
  EXPECT_TRUE(scheduler.AddSequence(1, Prompt(2, 0), Params()).ok());
}

TEST(SchedulerDeathTest, EngineMustAppendOrFinishEverySampledSequence) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  BlockManager blocks(4, 4);
  Scheduler scheduler(Config(8, 100, 100, 64), &blocks);
  ASSERT_TRUE(scheduler.AddSequence(1, Prompt(3, 0), Params()).ok());
  ASSERT_TRUE(scheduler.Schedule().scheduled[0].sample);
  EXPECT_DEATH(scheduler.Schedule(), "neither AppendToken nor Finish");
}

TEST(SchedulerDeathTest, NeverSchedulesPastMaxModelLen) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  BlockManager blocks(4, 4);
  Scheduler scheduler(Config(8, 100, 100, /*max_model_len=*/4), &blocks);
  ASSERT_TRUE(scheduler.AddSequence(1, Prompt(3, 0), Params()).ok());
  ASSERT_TRUE(scheduler.Schedule().scheduled[0].sample);
  scheduler.AppendToken(1, 9);  // 4 tokens = max_model_len: the engine must Finish it now
  EXPECT_DEATH(scheduler.Schedule(), "holds max_model_len \\(4\\) tokens");
}

// ---------------------------------------------------------------------------------------------
// A fake engine loop: it runs every output as the ranks would (tracking each sequence's KV
// state itself), checks the output against that state and the scheduler's invariants, appends
// a deterministic token for each sampled sequence and finishes it at max_tokens or
// max_model_len.

class FakeEngine {
 public:
  struct Request {
    Tokens known;  // prompt + generated
    int num_prompt_tokens = 0;
    int max_tokens = 0;
    int computed = 0;  // as the ranks see it
    bool params_seen = false;
    bool done = false;
    bool aborted = false;
    int64_t arrival_step = 0;
    int64_t first_scheduled_step = -1;
    int64_t finish_step = -1;
    int num_generated() const { return static_cast<int>(known.size()) - num_prompt_tokens; }
  };

  FakeEngine(const SchedulerConfig& config, int num_blocks, int block_size)
      : blocks_(num_blocks, block_size), scheduler_(config, &blocks_) {}

  void Add(uint64_t id, int prompt_len, int max_tokens) {
    Request r;
    r.known = Prompt(prompt_len, static_cast<int32_t>(id * 1000));
    r.num_prompt_tokens = prompt_len;
    r.max_tokens = max_tokens;
    r.arrival_step = steps_;
    ASSERT_TRUE(scheduler_.AddSequence(id, r.known, Params(max_tokens)).ok());
    requests_[id] = r;
  }

  void Abort(uint64_t id) {
    Request& r = requests_.at(id);
    ASSERT_FALSE(r.done);
    ASSERT_TRUE(scheduler_.Finish(id));
    r.done = r.aborted = true;
    r.finish_step = steps_;
    pending_finished_.insert(id);
  }

  // One engine step. Returns the output for tests that look closer.
  SchedulerOutput Step() {
    SchedulerOutput out = scheduler_.Schedule();
    CheckOutput(out);
    for (const uint64_t id : out.preempted_seq_ids) requests_.at(id).computed = 0;
    for (const ScheduledSequence& s : out.scheduled) {
      Request& r = requests_.at(s.seq_id);
      if (r.first_scheduled_step < 0) {
        r.first_scheduled_step = steps_;
        first_scheduled_order_.push_back(s.seq_id);
      }
      r.params_seen = true;
      r.computed = s.end_pos();
    }
    CheckInvariants();
    for (const ScheduledSequence& s : out.scheduled) {
      if (!s.sample) continue;
      Request& r = requests_.at(s.seq_id);
      const int32_t token = static_cast<int32_t>(s.seq_id * 1000 + 500 + r.num_generated());
      scheduler_.AppendToken(s.seq_id, token);
      r.known.push_back(token);
      if (r.num_generated() == r.max_tokens ||
          static_cast<int>(r.known.size()) == scheduler_.config().max_model_len) {
        EXPECT_TRUE(scheduler_.Finish(s.seq_id));
        r.done = true;
        r.finish_step = steps_;
        pending_finished_.insert(s.seq_id);
      }
    }
    ++steps_;
    return out;
  }

  Scheduler& scheduler() { return scheduler_; }
  const BlockManager& blocks() const { return blocks_; }
  const Request& request(uint64_t id) const { return requests_.at(id); }
  const std::map<uint64_t, Request>& requests() const { return requests_; }
  const std::vector<uint64_t>& first_scheduled_order() const { return first_scheduled_order_; }
  int64_t steps() const { return steps_; }
  int64_t max_tokens_in_a_step() const { return max_tokens_in_a_step_; }

 private:
  void CheckOutput(const SchedulerOutput& out) {
    const SchedulerConfig& config = scheduler_.config();
    EXPECT_EQ(out.step, steps_);
    const std::set<uint64_t> finished(out.finished_seq_ids.begin(), out.finished_seq_ids.end());
    EXPECT_EQ(finished, pending_finished_);
    EXPECT_EQ(finished.size(), out.finished_seq_ids.size());
    pending_finished_.clear();
    const int total = TotalTokens(out);
    EXPECT_LE(total, config.max_num_batched_tokens);
    max_tokens_in_a_step_ = std::max<int64_t>(max_tokens_in_a_step_, total);
    EXPECT_LE(static_cast<int>(out.scheduled.size()), config.max_num_seqs);
    std::set<uint64_t> seen;
    for (const uint64_t id : out.preempted_seq_ids) {
      EXPECT_TRUE(seen.insert(id).second) << "preempted twice or also scheduled: " << id;
      EXPECT_GT(requests_.at(id).computed, 0) << id;
    }
    for (const ScheduledSequence& s : out.scheduled) {
      EXPECT_TRUE(seen.insert(s.seq_id).second) << "scheduled twice or preempted: " << s.seq_id;
      const Request& r = requests_.at(s.seq_id);
      ASSERT_FALSE(r.done) << s.seq_id;
      EXPECT_GE(s.num_tokens(), 1);
      EXPECT_LE(s.num_tokens(), config.max_prefill_chunk);
      EXPECT_EQ(s.start_pos, r.computed) << s.seq_id;
      ASSERT_LE(s.end_pos(), static_cast<int>(r.known.size()));
      EXPECT_EQ(s.token_ids, Tokens(r.known.begin() + s.start_pos, r.known.begin() + s.end_pos()));
      EXPECT_EQ(s.num_prompt_tokens, r.num_prompt_tokens);
      EXPECT_EQ(s.sample, s.end_pos() == static_cast<int>(r.known.size()));
      EXPECT_EQ(s.new_params.has_value(), !r.params_seen) << s.seq_id;
      EXPECT_EQ(static_cast<int>(s.block_table.size()), blocks_.BlocksFor(s.end_pos()));
      EXPECT_LT(s.end_pos() - 1, config.max_model_len);
      // Every block the chunk's tokens read or write is held: from the window of its first
      // token (the whole prefix without a window) to its end.
      const int first_read =
          config.sliding_window > 0 ? std::max(0, s.start_pos - config.sliding_window + 1) : 0;
      for (int b = first_read / blocks_.block_size(); b < blocks_.BlocksFor(s.end_pos()); ++b) {
        EXPECT_NE(s.block_table[b], BlockManager::kNoBlock)
            << "sequence " << s.seq_id << " block " << b << " of a chunk from " << s.start_pos;
      }
    }
  }

  // No block is used twice, the used count is the sum of the tables, every table covers
  // exactly the computed tokens, and the scheduler agrees with what the ranks computed.
  void CheckInvariants() {
    std::set<int32_t> used;
    int sum = 0;
    int running = 0, waiting = 0;
    for (const auto& [id, r] : requests_) {
      const StatusOr<SequenceInfo> info = scheduler_.Info(id);
      if (r.done) {
        EXPECT_FALSE(info.ok()) << id;
        continue;
      }
      ASSERT_TRUE(info.ok()) << id;
      EXPECT_EQ(info->num_computed_tokens, r.computed) << id;
      EXPECT_EQ(info->num_tokens, static_cast<int>(r.known.size())) << id;
      EXPECT_EQ(static_cast<int>(info->block_table.size()), blocks_.BlocksFor(r.computed)) << id;
      int held = 0;
      for (const int32_t block : info->block_table) {
        if (block == BlockManager::kNoBlock) {
          EXPECT_GT(scheduler_.config().sliding_window, 0) << "a block given back without a window";
          continue;
        }
        EXPECT_TRUE(block >= 0 && block < blocks_.num_blocks()) << block;
        EXPECT_TRUE(used.insert(block).second) << "block " << block << " used twice";
        ++held;
      }
      EXPECT_LE(held, scheduler_.MaxBlocksHeld(r.computed)) << id;
      sum += held;
      if (info->status == SequenceStatus::kRunning) {
        ++running;
      } else {
        ++waiting;
        EXPECT_EQ(r.computed, 0) << id;
      }
    }
    EXPECT_EQ(sum, blocks_.num_used_blocks());
    EXPECT_EQ(running, scheduler_.num_running());
    EXPECT_EQ(waiting, scheduler_.num_waiting());
    EXPECT_LE(running, scheduler_.config().max_num_seqs);
  }

  BlockManager blocks_;
  Scheduler scheduler_;
  std::map<uint64_t, Request> requests_;
  std::set<uint64_t> pending_finished_;
  std::vector<uint64_t> first_scheduled_order_;
  int64_t steps_ = 0;
  int64_t max_tokens_in_a_step_ = 0;
};

// A long request that arrives behind twenty short ones, with two more short ones arriving every
// step, is admitted in its turn and finishes; so does every short one; and requests are first
// scheduled in arrival order.
TEST(SchedulerTest, ShortRequestStreamDoesNotStarveAnOlderLongRequest) {
  FakeEngine engine(Config(/*max_num_seqs=*/8, /*max_num_batched_tokens=*/32,
                           /*max_prefill_chunk=*/16, /*max_model_len=*/512),
                    /*num_blocks=*/24, /*block_size=*/8);
  const uint64_t kLong = 21;  // arrives at step 10, into a busy cache
  uint64_t next_id = 1;
  for (int step = 0; step < 400; ++step) {
    if (step < 300) {
      for (int k = 0; k < 2; ++k) {
        const uint64_t id = next_id++;
        if (id == kLong) {
          engine.Add(id, /*prompt_len=*/150, /*max_tokens=*/30);  // 23 of the 24 blocks
        } else {
          engine.Add(id, /*prompt_len=*/8, /*max_tokens=*/4);
        }
      }
    }
    engine.Step();
    if (::testing::Test::HasFatalFailure()) return;
  }
  while (engine.scheduler().HasUnfinished() && engine.steps() < 5000) engine.Step();
  ASSERT_FALSE(engine.scheduler().HasUnfinished());

  const FakeEngine::Request& long_request = engine.request(kLong);
  EXPECT_TRUE(long_request.done);
  EXPECT_EQ(long_request.num_generated(), 30);
  // Its prompt takes 10 steps at 16 tokens and it decodes 30; the requests ahead of it add a
  // few more. Starvation would mean never.
  EXPECT_LT(long_request.finish_step - long_request.arrival_step, 100)
      << "arrived at step " << long_request.arrival_step << ", finished at "
      << long_request.finish_step;
  for (const auto& [id, r] : engine.requests()) {
    EXPECT_TRUE(r.done) << id;
    EXPECT_EQ(r.num_generated(), r.max_tokens) << id;
  }
  EXPECT_EQ(engine.first_scheduled_order().size(), engine.requests().size());
  EXPECT_TRUE(
      std::is_sorted(engine.first_scheduled_order().begin(), engine.first_scheduled_order().end()));
}

// 200 random requests against a cache too small for them, with random arrivals and a few
// aborts; the checks run after every step.
// 200 random requests with random arrivals and aborts through a cache small enough to force
// preemptions. windowed: a sliding window (4..16) on every layer, contexts longer than the
// whole cache could hold without it, and a cache sized for the window.
void RunRandomizedSimulation(bool windowed) {
  int64_t total_preemptions = 0;
  for (const uint32_t seed : {1u, 2u, 3u, 4u, 5u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    auto uniform = [&rng](int lo, int hi) {
      return std::uniform_int_distribution<int>(lo, hi)(rng);
    };
    const int block_size = uniform(1, 4);
    const int max_model_len = windowed ? 96 : 48;
    SchedulerConfig config =
        Config(/*max_num_seqs=*/uniform(1, 8), /*max_num_batched_tokens=*/uniform(1, 40),
               /*max_prefill_chunk=*/uniform(1, 20), max_model_len);
    config.sliding_window = windowed ? uniform(4, 16) : 0;
    const int per_seq =
        MaxBlocksHeld(max_model_len, block_size, config.sliding_window,
                      std::min(config.max_prefill_chunk, config.max_num_batched_tokens));
    const int num_blocks = per_seq + uniform(0, 8);
    if (windowed) {
      ASSERT_LT(num_blocks * block_size, max_model_len) << "the window must be what makes it fit";
    }
    FakeEngine engine(config, num_blocks, block_size);
    std::vector<uint64_t> to_abort;
    uint64_t next_id = 0;
    while (next_id < 200 || engine.scheduler().HasUnfinished()) {
      ASSERT_LT(engine.steps(), 20000) << "no progress";
      const int arrivals = next_id < 200 ? uniform(0, 2) : 0;
      for (int k = 0; k < arrivals && next_id < 200; ++k) {
        const uint64_t id = next_id++;
        engine.Add(id, uniform(1, max_model_len - 1), uniform(1, 40));
        if (uniform(0, 19) == 0) to_abort.push_back(id);
      }
      if (!to_abort.empty() && uniform(0, 3) == 0) {
        const uint64_t id = to_abort.back();
        to_abort.pop_back();
        if (!engine.request(id).done) engine.Abort(id);
      }
      engine.Step();
      if (::testing::Test::HasFailure()) return;
    }
    engine.Step();  // reports the last finished ids
    EXPECT_EQ(engine.blocks().num_free_blocks(), num_blocks);
    EXPECT_EQ(engine.requests().size(), 200u);
    for (const auto& [id, r] : engine.requests()) {
      ASSERT_TRUE(r.done) << id;
      if (r.aborted) continue;
      const int expected = std::min(r.num_prompt_tokens + r.max_tokens, max_model_len);
      EXPECT_EQ(static_cast<int>(r.known.size()), expected) << id;
    }
    EXPECT_TRUE(std::is_sorted(engine.first_scheduled_order().begin(),
                               engine.first_scheduled_order().end()));
    total_preemptions += engine.scheduler().num_preemptions();
  }
  EXPECT_GT(total_preemptions, 0);  // the cache was small enough to matter
}

TEST(SchedulerTest, RandomizedSimulationKeepsInvariantsAndFinishesEverything) {
  RunRandomizedSimulation(/*windowed=*/false);
}

// Sliding window: blocks before each sequence's window go back to the pool, so sequences longer
// than the whole cache run to the end, and every chunk still holds every block it reads.
TEST(SchedulerTest, SlidingWindowReusesBlocksBeforeTheWindow) {
  RunRandomizedSimulation(/*windowed=*/true);
}

TEST(SchedulerTest, SlidingWindowGivesBackExactlyTheBlocksBeforeTheWindow) {
  BlockManager blocks(/*num_blocks=*/6, /*block_size=*/4);
  SchedulerConfig config = Config(1, 64, /*max_prefill_chunk=*/4, 256);
  config.sliding_window = 6;
  Scheduler scheduler(config, &blocks);
  // Without the window a 30-token prompt would need 8 blocks of the 6.
  EXPECT_EQ(scheduler.MaxBlocksHeld(30), 4);  // ceil((6 - 1 + 4) / 4) + 1
  ASSERT_TRUE(scheduler.AddSequence(1, Prompt(30, 0), Params()).ok());
  int start = 0;
  while (start < 30) {
    const SchedulerOutput out = scheduler.Schedule();
    ASSERT_EQ(out.scheduled.size(), 1u);
    const ScheduledSequence& s = out.scheduled[0];
    ASSERT_EQ(s.start_pos, start);
    // Blocks wholly before position start - 5 are given back; the rest are held.
    const int released = std::max(0, start - 5) / 4;
    for (int b = 0; b < static_cast<int>(s.block_table.size()); ++b) {
      EXPECT_EQ(s.block_table[b] == BlockManager::kNoBlock, b < released)
          << "chunk from " << start << ", block " << b;
    }
    EXPECT_EQ(blocks.num_used_blocks(), static_cast<int>(s.block_table.size()) - released);
    start = s.end_pos();
  }
  scheduler.AppendToken(1, 7);
  ASSERT_TRUE(scheduler.Finish(1));
  EXPECT_EQ(blocks.num_free_blocks(), 6);
}

TEST(SchedulerTest, PrefixCachingSkipsComputedBlocksButNeverTheLastToken) {
  BlockManager blocks(/*num_blocks=*/16, /*block_size=*/4);
  SchedulerConfig config = Config(4, 64, 64, 128);
  config.enable_prefix_caching = true;
  Scheduler scheduler(config, &blocks);
  PrefixCacheUse use;
  use.read = use.write = true;
  const Tokens prompt = Prompt(12, 100);  // three full blocks
  ASSERT_TRUE(scheduler.AddSequence(1, prompt, Params(4), 0, use).ok());
  const SchedulerOutput first = scheduler.Schedule();
  ASSERT_EQ(first.scheduled.size(), 1u);
  EXPECT_EQ(first.scheduled[0].start_pos, 0);
  scheduler.AppendToken(1, 7);
  // The same prompt once the first has run: two blocks come from the cache; the third holds
  // the last prompt token, which must run (it samples).
  ASSERT_TRUE(scheduler.AddSequence(2, prompt, Params(4), 0, use).ok());
  const SchedulerOutput second = scheduler.Schedule();
  const ScheduledSequence* s = FindScheduled(second, 2);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->start_pos, 8);
  EXPECT_EQ(s->token_ids, Tokens(prompt.begin() + 8, prompt.end()));
  EXPECT_EQ(
      Tokens(s->block_table.begin(), s->block_table.begin() + 2),
      Tokens(first.scheduled[0].block_table.begin(), first.scheduled[0].block_table.begin() + 2));
  EXPECT_NE(s->block_table[2], first.scheduled[0].block_table[2]);
  EXPECT_EQ(scheduler.Info(2)->num_cached_tokens, 8);
  EXPECT_EQ(scheduler.prefix_cache_hits(), 8);
  EXPECT_EQ(scheduler.prefix_cache_queries(), 24);
  // Another key (steering, salt), or no read: nothing shared.
  PrefixCacheUse other = use;
  other.key = BlockHash{1, 2};
  ASSERT_TRUE(scheduler.AddSequence(3, prompt, Params(4), 0, other).ok());
  PrefixCacheUse no_read = use;
  no_read.read = false;
  ASSERT_TRUE(scheduler.AddSequence(4, prompt, Params(4), 0, no_read).ok());
  scheduler.AppendToken(1, 8);
  scheduler.AppendToken(2, 7);
  const SchedulerOutput third = scheduler.Schedule();
  EXPECT_EQ(FindScheduled(third, 3)->start_pos, 0);
  EXPECT_EQ(FindScheduled(third, 4)->start_pos, 0);
  for (uint64_t id : {1, 2, 3, 4}) scheduler.Finish(id);
  scheduler.Schedule();
  EXPECT_EQ(blocks.num_free_blocks(), 16);
}

}  // namespace
}  // namespace uc::engine
