#include "apps/cli/capture_support.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>

#include "engine/prompts_file.h"
#include "io/text_file.h"

namespace uc::cli {

using nlohmann::json;

json SamplingJson(const worker::SamplingParams& p) {
  return {{"temperature", p.temperature},
          {"top_k", p.top_k},
          {"top_p", p.top_p},
          {"min_p", p.min_p},
          {"seed", p.seed ? json(*p.seed) : json()},
          {"max_tokens", p.max_tokens},
          {"stop", p.stop},
          {"stop_token_ids", p.stop_token_ids},
          {"ignore_eos", p.ignore_eos}};
}

Status ServeInWaves(engine::LLMEngine& engine, const std::vector<engine::GenerateRequest>& requests,
                    int64_t begin, int64_t wave, const Deliver& deliver,
                    const std::function<void(int64_t finished)>& after_step) {
  const auto end = static_cast<int64_t>(requests.size());
  int64_t finished = 0;
  for (int64_t start = begin / wave * wave; start < end; start += wave) {
    const int64_t stop = std::min(end, start + wave);
    std::vector<Status> rejected(static_cast<size_t>(stop - start));
    std::vector<engine::RequestOutput> outputs(static_cast<size_t>(stop - start));
    std::unordered_map<std::string, int64_t> running;  // request id -> index
    for (int64_t i = start; i < stop; ++i) {
      const engine::GenerateRequest& r = requests[static_cast<size_t>(i)];
      rejected[static_cast<size_t>(i - start)] = engine.AddRequest(r.id, r.prompt, r.params);
      if (rejected[static_cast<size_t>(i - start)].ok()) running[r.id] = i;
    }
    while (engine.HasUnfinished()) {
      for (engine::RequestOutput& out : engine.Step()) {
        if (!out.finished) continue;
        auto it = running.find(out.request_id);
        if (it == running.end()) continue;
        outputs[static_cast<size_t>(it->second - start)] = std::move(out);
        running.erase(it);
        ++finished;
      }
      if (after_step) after_step(finished);
    }
    if (!running.empty()) {
      return InternalError("the engine went idle with " + std::to_string(running.size()) +
                           " requests unfinished (first: '" + running.begin()->first + "')");
    }
    for (int64_t i = start; i < stop; ++i) {
      const auto k = static_cast<size_t>(i - start);
      UC_RETURN_IF_ERROR(deliver(i, rejected[k], rejected[k].ok() ? &outputs[k] : nullptr));
    }
  }
  return OkStatus();
}

probe::DatasetPrompt MakeDatasetPrompt(int64_t index, const engine::GenerateRequest& request,
                                       const json& label,
                                       std::vector<probe::ActivationRecord> records,
                                       const engine::RequestOutput& output,
                                       const tokenizer::Tokenizer& tokenizer) {
  probe::DatasetPrompt prompt;
  prompt.index = index;
  prompt.id = request.id;
  prompt.label = label;
  prompt.rows.reserve(records.size());
  const auto prompt_len = static_cast<int64_t>(output.prompt_ids.size());
  for (probe::ActivationRecord& r : records) {
    probe::DatasetRow row;
    row.point = r.point;
    row.layer = r.layer;
    row.tensor_type = r.tensor_type;
    row.token_pos = r.token_pos;
    row.is_generated = r.is_generated;
    row.generated_index = r.is_generated ? r.token_pos - prompt_len : -1;
    if (r.token_pos < prompt_len) {
      row.token_id = output.prompt_ids[static_cast<size_t>(r.token_pos)];
    } else if (r.token_pos - prompt_len < static_cast<int64_t>(output.output_ids.size())) {
      row.token_id = output.output_ids[static_cast<size_t>(r.token_pos - prompt_len)];
    }
    if (row.token_id >= 0) row.token_text = tokenizer.TokenToPiece(row.token_id);
    row.values = std::move(r.values);
    prompt.rows.push_back(std::move(row));
  }
  return prompt;
}

CaptureProgress::CaptureProgress(const std::string& mode, int64_t total, int64_t skipped)
    : total_(total), skipped_(skipped), start_(Clock::now()), last_(start_) {
  bar_ = mode == "bar" || (mode == "auto" && ::isatty(STDERR_FILENO));
  enabled_ = mode != "none";
}

void CaptureProgress::Update(int64_t prompts_done, int64_t records, int shards, bool force) {
  if (!enabled_) return;
  const Clock::time_point now = Clock::now();
  const double since_last = std::chrono::duration<double>(now - last_).count();
  if (!force && since_last < (bar_ ? 0.1 : 5.0)) return;
  last_ = now;
  const double seconds = std::max(1e-9, std::chrono::duration<double>(now - start_).count());
  const int64_t done = skipped_ + prompts_done;
  const double prompts_rate = static_cast<double>(prompts_done) / seconds;
  const double records_rate = static_cast<double>(records) / seconds;
  if (bar_) {
    constexpr int kWidth = 30;
    const int filled = total_ > 0 ? static_cast<int>(kWidth * done / total_) : kWidth;
    std::fprintf(stderr,
                 "\r[%s%s] %lld/%lld prompts | %.1f prompts/s | %.0f records/s | %d shards\033[K",
                 std::string(static_cast<size_t>(filled), '#').c_str(),
                 std::string(static_cast<size_t>(kWidth - filled), '.').c_str(),
                 static_cast<long long>(done), static_cast<long long>(total_), prompts_rate,
                 records_rate, shards);
  } else {
    std::fprintf(stderr,
                 "capture: %lld/%lld prompts, %lld records, %d shards, %.1f prompts/s, %.0f "
                 "records/s\n",
                 static_cast<long long>(done), static_cast<long long>(total_),
                 static_cast<long long>(records), shards, prompts_rate, records_rate);
  }
  std::fflush(stderr);
}

void CaptureProgress::Done() {
  if (enabled_ && bar_) std::fprintf(stderr, "\n");
}

}  // namespace uc::cli
