#include "worker/scheduler_output.h"

#include <gtest/gtest.h>

namespace uc::worker {
namespace {

SchedulerOutput ExampleOutput() {
  SchedulerOutput out;
  out.step = 42;
  ScheduledSequence a;
  a.seq_id = 7;
  a.token_ids = {1, 2, 3};
  a.start_pos = 16;
  a.block_table = {5, 9};
  a.num_prompt_tokens = 12;
  a.sample = true;
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = 40;
  p.top_p = 0.9f;
  p.min_p = 0.05f;
  p.seed = 1234567890123ull;
  p.logprobs = 5;
  a.new_params = p;
  a.num_logprobs = 5;
  a.num_prompt_logprobs = 2;
  a.next_prompt_token = -1;
  a.steering_id = 3;
  a.steering_windows = {14, 30, 0, 2};
  ScheduledSequence b;
  b.seq_id = 8;
  b.token_ids = {4};
  b.start_pos = 0;
  b.block_table = {3};
  out.scheduled = {a, b};
  out.finished_seq_ids = {1, 2};
  out.preempted_seq_ids = {9};
  out.new_steering = {{3, std::string("steer\0bytes", 11)}};
  out.dropped_steering = {1, 2};
  out.capture = {{3, 2, {0, 2}}, {5, 3, {3}}};
  out.compare_tp_replicas = true;
  return out;
}

TEST(SchedulerOutputTest, PromptLogprobRowsStopBeforeTheLastPromptToken) {
  ScheduledSequence s;
  s.token_ids = {1, 2, 3, 4};
  s.num_prompt_tokens = 6;
  EXPECT_EQ(s.num_prompt_logprob_rows(), 0);  // not asked
  s.num_prompt_logprobs = 0;
  EXPECT_EQ(s.num_prompt_logprob_rows(), 4);  // positions 0..3 predict prompt tokens 1..4
  s.start_pos = 2;                            // positions 2..5: 5 is the last prompt token
  EXPECT_EQ(s.num_prompt_logprob_rows(), 3);
  s.start_pos = 5;
  EXPECT_EQ(s.num_prompt_logprob_rows(), 0);
}

TEST(SchedulerOutputTest, SerializeParseRoundTrip) {
  const SchedulerOutput in = ExampleOutput();
  StatusOr<SchedulerOutput> out = SchedulerOutput::Parse(in.Serialize());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->step, 42);
  ASSERT_EQ(out->scheduled.size(), 2u);
  EXPECT_EQ(out->scheduled[0].token_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(out->scheduled[0].start_pos, 16);
  EXPECT_EQ(out->scheduled[0].end_pos(), 19);
  EXPECT_EQ(out->scheduled[0].block_table, (std::vector<int32_t>{5, 9}));
  EXPECT_EQ(out->scheduled[0].num_prompt_tokens, 12);
  EXPECT_TRUE(out->scheduled[0].sample);
  ASSERT_TRUE(out->scheduled[0].new_params.has_value());
  EXPECT_EQ(out->scheduled[0].new_params->temperature, 0.7f);
  EXPECT_EQ(out->scheduled[0].new_params->top_k, 40);
  EXPECT_EQ(out->scheduled[0].new_params->seed, 1234567890123ull);
  EXPECT_EQ(out->scheduled[0].new_params->logprobs, 5);
  EXPECT_FALSE(out->scheduled[0].new_params->prompt_logprobs.has_value());
  EXPECT_EQ(out->scheduled[0].num_logprobs, 5);
  EXPECT_EQ(out->scheduled[0].num_prompt_logprobs, 2);
  // Positions 16..18 of a 12-token prompt: no prompt rows, but the sampled token's logprobs.
  EXPECT_EQ(out->scheduled[0].num_prompt_logprob_rows(), 0);
  EXPECT_TRUE(out->scheduled[0].wants_logprobs());
  EXPECT_FALSE(out->scheduled[1].wants_logprobs());
  EXPECT_TRUE(out->wants_logprobs());
  EXPECT_FALSE(out->scheduled[1].new_params.has_value());
  EXPECT_FALSE(out->scheduled[1].sample);
  EXPECT_EQ(out->scheduled[0].steering_id, 3u);
  EXPECT_EQ(out->scheduled[0].steering_windows, (std::vector<int32_t>{14, 30, 0, 2}));
  EXPECT_FALSE(out->scheduled[0].SteeringActive(0, 13));
  EXPECT_TRUE(out->scheduled[0].SteeringActive(0, 29));
  EXPECT_FALSE(out->scheduled[0].SteeringActive(0, 30));
  EXPECT_FALSE(out->scheduled[0].SteeringActive(1, 2));
  EXPECT_TRUE(out->scheduled[0].SteeringActive(2, 99));  // no window: always
  EXPECT_EQ(out->scheduled[1].steering_id, 0u);
  ASSERT_EQ(out->new_steering.size(), 1u);
  EXPECT_EQ(out->new_steering[0].id, 3u);
  EXPECT_EQ(out->new_steering[0].config, std::string("steer\0bytes", 11));
  EXPECT_EQ(out->dropped_steering, (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(out->finished_seq_ids, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(out->preempted_seq_ids, (std::vector<uint64_t>{9}));
  ASSERT_EQ(out->capture.size(), 2u);
  EXPECT_EQ(out->capture[0].layer, 3);
  EXPECT_EQ(out->capture[0].site, 2);
  EXPECT_EQ(out->capture[0].rows, (std::vector<int32_t>{0, 2}));
  EXPECT_TRUE(out->compare_tp_replicas);
  EXPECT_EQ(out->total_tokens(), 4);
  EXPECT_EQ(out->num_sampled(), 1);
}

TEST(SchedulerOutputTest, TruncatedOrPaddedMessagesAreRefused) {
  const std::string bytes = ExampleOutput().Serialize();
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    EXPECT_FALSE(SchedulerOutput::Parse(bytes.substr(0, cut)).ok()) << "cut at " << cut;
  }
  EXPECT_FALSE(SchedulerOutput::Parse(bytes + "x").ok());
}

}  // namespace
}  // namespace uc::worker
