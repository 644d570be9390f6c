#include "engine/llm.h"

#include <unordered_map>

namespace uc::engine {

StatusOr<std::unique_ptr<LLM>> LLM::Open(const EngineOptions& options) {
  UC_ASSIGN_OR_RETURN(std::unique_ptr<LLMEngine> engine, LLMEngine::Open(options));
  return std::make_unique<LLM>(std::move(engine));
}

std::vector<GenerateResult> LLM::Generate(
    const std::vector<GenerateRequest>& requests,
    const std::function<void(const GenerateResult&)>& on_finished) {
  std::vector<GenerateResult> results(requests.size());
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < requests.size(); ++i) {
    results[i].id = requests[i].id;
    if (index.count(requests[i].id) != 0) {
      results[i].status =
          InvalidArgumentError("request id '" + requests[i].id + "' appears more than once");
    } else {
      results[i].status = engine_->AddRequest(requests[i].id, requests[i].prompt,
                                              requests[i].params, requests[i].steering);
    }
    if (results[i].status.ok()) {
      index[requests[i].id] = i;
    } else if (on_finished) {
      on_finished(results[i]);
    }
  }
  while (engine_->HasUnfinished()) {
    for (RequestOutput& out : engine_->Step()) {
      if (!out.finished) continue;
      GenerateResult& result = results[index.at(out.request_id)];
      result.output = std::move(out);
      if (on_finished) on_finished(result);
    }
  }
  return results;
}

}  // namespace uc::engine
