#include "common/batching_workload.h"

#include <gtest/gtest.h>

#include <cstring>
#include <sstream>

namespace uc::testing {
namespace {

constexpr const char* kStory =
    "Once upon a time there was a little girl named Lily who lived in a small house near the "
    "woods with her mother and her dog Max and every morning she went out to play in the garden "
    "where the flowers were red and yellow and the birds sang in the big old tree by the fence "
    "until one day a strange box appeared on the path and Lily wanted to know what was inside";

std::vector<std::string> Words() {
  std::istringstream in(kStory);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

}  // namespace

std::vector<engine::GenerateRequest> BatchingWorkload(int n) {
  const std::vector<std::string> words = Words();
  std::vector<engine::GenerateRequest> requests;
  for (int i = 0; i < n; ++i) {
    // Prompt lengths from 1 word to the whole story (about 1 to 90 tokens), shuffled by i.
    const int count = (i * 37) % static_cast<int>(words.size());
    const int first = (i * 11) % 7;
    std::string prompt;
    for (int w = 0; w < count; ++w) {
      prompt += (w == 0 ? "" : " ") + words[(first + w) % words.size()];
    }
    worker::SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = 8 + (i * 13) % 48;
    if (i % 5 == 3) {  // seeded sampling: the same tokens whatever the batch
      p.temperature = 0.9f;
      p.top_p = 0.95f;
      p.seed = 1000 + static_cast<uint64_t>(i);
    }
    if (i % 7 == 2) p.stop = {" the"};
    if (i % 3 == 0) p.ignore_eos = true;
    requests.push_back({"req-" + std::to_string(i), engine::Prompt::Text(prompt), p});
  }
  return requests;
}

std::map<std::string, engine::GenerationResult> RunAlone(
    engine::Generator& solo, const std::vector<engine::GenerateRequest>& requests) {
  std::map<std::string, engine::GenerationResult> results;
  for (const engine::GenerateRequest& r : requests) {
    auto result = solo.Generate(std::get<std::string>(r.prompt.value), r.params);
    EXPECT_TRUE(result.ok()) << r.id << ": " << result.status().ToString();
    if (result.ok()) results[r.id] = std::move(result).value();
  }
  return results;
}

void ExpectSameAsAlone(const std::vector<engine::GenerateResult>& batched,
                       const std::map<std::string, engine::GenerationResult>& alone) {
  ASSERT_EQ(batched.size(), alone.size());
  for (const engine::GenerateResult& b : batched) {
    ASSERT_TRUE(b.status.ok()) << b.id << ": " << b.status.ToString();
    const engine::GenerationResult& a = alone.at(b.id);
    EXPECT_TRUE(b.output.finished) << b.id;
    EXPECT_EQ(b.output.prompt_ids, a.prompt_ids) << b.id;
    EXPECT_EQ(b.output.output_ids, a.output_ids) << b.id;
    EXPECT_EQ(b.output.text, a.text) << b.id;
    EXPECT_EQ(b.output.finish_reason, a.finish_reason) << b.id;
    EXPECT_EQ(b.output.stop_reason, a.stop_reason) << b.id;
  }
}

std::vector<models::TapPoint> ActivationRecorder::AllTaps(int num_layers) {
  std::vector<models::TapPoint> taps;
  for (int layer = 0; layer < num_layers; ++layer) {
    for (models::Site site :
         {models::Site::kAttnOut, models::Site::kMlpOut, models::Site::kResidPost}) {
      taps.push_back({layer, site});
    }
  }
  taps.push_back({num_layers, models::Site::kFinalNorm});
  return taps;
}

std::vector<worker::CaptureItem> ActivationRecorder::PlanCapture(
    const worker::SchedulerOutput& plan) {
  std::vector<int32_t> all_rows(static_cast<size_t>(plan.total_tokens()));
  for (int32_t r = 0; r < plan.total_tokens(); ++r) all_rows[static_cast<size_t>(r)] = r;
  std::vector<worker::CaptureItem> items;
  for (const models::TapPoint& tap : taps_) {
    items.push_back({tap.layer, static_cast<uint8_t>(tap.site), all_rows});
  }
  return items;
}

std::vector<engine::StopRequest> ActivationRecorder::OnStepExecuted(
    const worker::SchedulerOutput& plan, const std::vector<Tensor>& captured) {
  int32_t row = 0;
  for (const worker::ScheduledSequence& s : plan.scheduled) {
    for (int32_t j = 0; j < s.num_tokens(); ++j, ++row) {
      std::vector<float> values;
      for (const Tensor& t : captured) {
        const int64_t width = t.dim(1);
        const float* x = t.data<float>() + row * width;
        values.insert(values.end(), x, x + width);
      }
      auto [it, inserted] = rows.try_emplace({names_[s.seq_id], s.start_pos + j}, values);
      if (!inserted) {
        recompute_mismatches += it->second != values;
        it->second = std::move(values);
      }
    }
  }
  return {};
}

RecordedRun RunRecorded(engine::LLM& llm, const std::vector<engine::GenerateRequest>& requests,
                        bool together) {
  ActivationRecorder recorder(ActivationRecorder::AllTaps(llm.engine().config().num_hidden_layers));
  llm.engine().SetObserver(&recorder);
  const int64_t preemptions_before = llm.engine().stats().num_preemptions;
  RecordedRun run;
  if (together) {
    run.results = llm.Generate(requests);
  } else {
    for (const engine::GenerateRequest& r : requests) {
      std::vector<engine::GenerateResult> one = llm.Generate({r});
      run.results.push_back(std::move(one[0]));
    }
  }
  llm.engine().SetObserver(nullptr);
  run.rows = std::move(recorder.rows);
  run.recompute_mismatches = recorder.recompute_mismatches;
  run.preemptions = llm.engine().stats().num_preemptions - preemptions_before;
  return run;
}

void ExpectSameBits(const RecordedRun& got, const RecordedRun& want, const std::string& what) {
  ASSERT_EQ(got.results.size(), want.results.size()) << what;
  for (size_t i = 0; i < got.results.size(); ++i) {
    ASSERT_TRUE(got.results[i].status.ok()) << what << ": " << got.results[i].status.ToString();
    EXPECT_EQ(got.results[i].output.output_ids, want.results[i].output.output_ids)
        << what << ": " << got.results[i].id;
  }
  const BitComparison c = CompareBits(got.rows, want.rows);
  EXPECT_GT(c.compared, 0) << what;
  EXPECT_EQ(c.missing, 0) << what;
  EXPECT_EQ(c.differing, 0) << what << ": " << c.differing << " of " << c.compared
                            << " rows differ, first " << c.first_difference;
  EXPECT_EQ(got.recompute_mismatches, 0) << what;
  std::printf("%s: %d rows bit-identical\n", what.c_str(), c.compared - c.differing);
}

BitComparison CompareBits(const ActivationRecorder::Rows& got,
                          const ActivationRecorder::Rows& want) {
  BitComparison c;
  for (const auto& [key, values] : want) {
    const auto g = got.find(key);
    if (g == got.end()) {
      ++c.missing;
      continue;
    }
    ++c.compared;
    const bool same =
        g->second.size() == values.size() &&
        std::memcmp(g->second.data(), values.data(), values.size() * sizeof(float)) == 0;
    if (!same && c.differing++ == 0) {
      c.first_difference = key.first + "@" + std::to_string(key.second);
    }
  }
  return c;
}

}  // namespace uc::testing
