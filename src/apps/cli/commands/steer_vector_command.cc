#include "apps/cli/commands/steer_vector_command.h"

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "apps/cli/exit_codes.h"
#include "apps/cli/flag_checks.h"
#include "engine/llm.h"
#include "engine/prompts_file.h"
#include "engine/step_observer.h"
#include "models/steering.h"

namespace uc::cli {
namespace {

struct SteerVectorOptions {
  std::string model;
  std::string positive;
  std::string negative;
  std::string layers;  // "A-B", "A" or empty (every layer)
  std::string method = "mean_diff";
  std::string out;
  int threads = 0;
  models::LoadOptions load;
};

// Records the residual stream at each request's last prompt token, at `layers`.
class LastTokenRecorder : public engine::StepObserver {
 public:
  explicit LastTokenRecorder(std::vector<int> layers) : layers_(std::move(layers)) {}
  void OnRequestAdded(uint64_t seq_id, const std::string& request_id,
                      std::span<const int32_t> prompt_ids) override {
    names_[seq_id] = request_id;
  }
  std::vector<worker::CaptureItem> PlanCapture(const worker::SchedulerOutput& plan) override {
    rows_.clear();
    std::vector<int32_t> rows;
    int32_t row = 0;
    for (const worker::ScheduledSequence& s : plan.scheduled) {
      const int32_t last = s.num_prompt_tokens - 1;
      if (s.start_pos <= last && last < s.end_pos()) {
        rows.push_back(row + last - s.start_pos);
        rows_.push_back(s.seq_id);
      }
      row += s.num_tokens();
    }
    std::vector<worker::CaptureItem> items;
    if (rows.empty()) return items;
    for (int layer : layers_) {
      items.push_back({layer, static_cast<uint8_t>(models::Site::kResidPost), rows});
    }
    return items;
  }
  std::vector<engine::StopRequest> OnStepExecuted(const worker::SchedulerOutput&,
                                                  const std::vector<Tensor>& captured) override {
    for (size_t i = 0; i < captured.size(); ++i) {
      const int64_t hidden = captured[i].dim(1);
      for (size_t r = 0; r < rows_.size(); ++r) {
        const float* x = captured[i].data<float>() + static_cast<int64_t>(r) * hidden;
        activations[names_[rows_[r]]][layers_[i]] = std::vector<float>(x, x + hidden);
      }
    }
    return {};
  }
  bool WantsFinalToken(uint64_t, int64_t) override { return false; }
  void OnRequestFinished(uint64_t, int64_t, bool) override {}

  // request id -> layer -> [hidden]
  std::map<std::string, std::map<int, std::vector<float>>> activations;

 private:
  std::vector<int> layers_;
  std::map<uint64_t, std::string> names_;
  std::vector<uint64_t> rows_;  // this step's captured sequences, in row order
};

// "A-B" or "A" -> [A, B]; empty -> every layer.
StatusOr<std::vector<int>> ParseLayers(const std::string& text, int num_layers) {
  int first = 0, last = num_layers - 1;
  if (!text.empty()) {
    const size_t dash = text.find('-');
    try {
      size_t used = 0;
      first = std::stoi(text.substr(0, dash), &used);
      if (used != (dash == std::string::npos ? text.size() : dash)) throw std::invalid_argument("");
      last = first;
      if (dash != std::string::npos) {
        last = std::stoi(text.substr(dash + 1), &used);
        if (used != text.size() - dash - 1) throw std::invalid_argument("");
      }
    } catch (const std::exception&) {
      return InvalidArgumentError("--layers '" + text + "': expected A-B or A (block indices)");
    }
  }
  if (first < 0 || last >= num_layers || first > last) {
    return InvalidArgumentError("--layers '" + text + "': the model has blocks 0 to " +
                                std::to_string(num_layers - 1));
  }
  std::vector<int> layers;
  for (int l = first; l <= last; ++l) layers.push_back(l);
  return layers;
}

int RunSteerVector(const SteerVectorOptions& o) {
  engine::EngineOptions options;
  options.model_path = o.model;
  options.num_threads = o.threads;
  options.load = o.load;
  auto llm = engine::LLM::Open(options);
  if (!llm.ok()) return Fail(llm.status().message());
  const models::ModelConfig& config = (*llm)->engine().config();
  StatusOr<std::vector<int>> layers = ParseLayers(o.layers, config.num_hidden_layers);
  if (!layers.ok()) return Fail(layers.status().message(), kExitUsage);
  worker::SamplingParams params;
  params.max_tokens = 1;
  params.temperature = 0.0f;
  std::map<std::string, std::vector<engine::GenerateRequest>> sides;
  for (const auto& [side, file] : {std::pair{"positive", o.positive}, {"negative", o.negative}}) {
    auto requests = engine::ReadPromptsFile(file, params);
    if (!requests.ok()) return Fail(requests.status().message());
    if (requests->empty()) return Fail(file + ": no examples");
    for (engine::GenerateRequest& r : *requests) {
      r.id = std::string(side) + ":" + r.id;
      r.params = params;
    }
    sides[side] = std::move(requests).value();
  }
  LastTokenRecorder recorder(*layers);
  (*llm)->engine().SetObserver(&recorder);
  std::vector<engine::GenerateRequest> all = sides["positive"];
  all.insert(all.end(), sides["negative"].begin(), sides["negative"].end());
  for (const engine::GenerateResult& r : (*llm)->Generate(all)) {
    if (!r.status.ok()) {
      const std::string side = r.id.substr(0, r.id.find(':'));
      return Fail((side == "positive" ? o.positive : o.negative) + ": example '" +
                  r.id.substr(r.id.find(':') + 1) + "': " + r.status.message());
    }
  }
  (*llm)->engine().SetObserver(nullptr);
  const models::VectorMethod method =
      o.method == "pca_diff" ? models::VectorMethod::kPcaDiff : models::VectorMethod::kMeanDiff;
  models::LayerVectors vectors;
  for (int layer : *layers) {
    std::vector<std::vector<float>> pos, neg;
    for (const engine::GenerateRequest& r : sides["positive"]) {
      pos.push_back(recorder.activations[r.id][layer]);
    }
    for (const engine::GenerateRequest& r : sides["negative"]) {
      neg.push_back(recorder.activations[r.id][layer]);
    }
    StatusOr<std::vector<float>> direction = models::ContrastiveDirection(method, pos, neg);
    if (!direction.ok()) return Fail(direction.status().message());
    vectors[layer] = std::move(direction).value();
  }
  const Status written = models::WriteControlVectorGguf(o.out, vectors, config.ModelType());
  if (!written.ok()) return Fail(written.message());
  std::fprintf(stderr,
               "steer-vector: %s from %zu positive and %zu negative examples, blocks %d-%d -> %s\n",
               o.method.c_str(), sides["positive"].size(), sides["negative"].size(),
               layers->front(), layers->back(), o.out.c_str());
  return kExitOk;
}

}  // namespace

void AddSteerVectorCommand(CLI::App& app) {
  auto o = std::make_shared<SteerVectorOptions>();
  CLI::App* cmd = app.add_subcommand(
      "steer-vector",
      "Compute contrastive steering vectors (mean difference or repeng's PCA) from positive and "
      "negative examples and write a control-vector GGUF");
  cmd->add_option("--model,-m", o->model, "Model (Hugging Face directory, .gguf or llama2.c .bin)")
      ->required();
  cmd->add_option("--positive", o->positive, "JSONL examples of the behaviour (prompt per line)")
      ->required();
  cmd->add_option("--negative", o->negative, "JSONL examples of its opposite (same format)")
      ->required();
  cmd->add_option("--layers", o->layers, "Blocks A-B (inclusive) or A; default: every block")
      ->type_name("A-B");
  cmd->add_option("--method", o->method, "mean_diff or pca_diff (repeng's)")
      ->check(CLI::IsMember({"mean_diff", "pca_diff"}))
      ->capture_default_str();
  cmd->add_option("--out,-o", o->out, "Output control-vector GGUF")->required();
  cmd->add_option("--threads", o->threads, "Threads (0: all cores)")->check(Threads());
  AddModelLoadFlags(cmd, &o->load);
  cmd->callback([o] { throw CLI::RuntimeError(RunSteerVector(*o)); });
}

}  // namespace uc::cli
