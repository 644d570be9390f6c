#include "apps/cli/commands/calibrate_command.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "apps/cli/capture_support.h"
#include "apps/cli/exit_codes.h"
#include "apps/cli/flag_checks.h"
#include "apps/cli/kv_cache_flags.h"
#include "engine/llm.h"
#include "engine/model_fingerprint.h"
#include "engine/prompts_file.h"
#include "probe/probes/registry.h"
#include "probe/runtime/calibration.h"
#include "probe/runtime/probing_session.h"
#include "probe/spec/spec.h"

namespace uc::cli {
namespace {

struct CalibrateOptions {
  std::string model;
  std::string spec_file;
  std::string prompts_file;
  std::string out;
  double target_fpr = 0.0;
  bool measure = false;
  bool json = false;
  int threads = 0;
  KvCacheFlags kv_cache;
  worker::SamplingParams sampling;
  models::LoadOptions load;
  std::vector<std::string> probe_plugins;
};

// Every prompt of the file through one engine with `spec`'s probes; per request, each point's
// result, in the spec's order.
StatusOr<std::vector<std::vector<probe::ProbeResult>>> RunSpec(
    engine::LLM& llm, const probe::Spec& spec, const std::vector<engine::GenerateRequest>& requests,
    const std::string& model) {
  probe::ProbingOptions options;
  options.model_name = model;
  options.stop_token_ids = llm.engine().eos_token_ids();
  options.model_fingerprint = engine::ModelFingerprint(llm.engine());
  UC_ASSIGN_OR_RETURN(std::unique_ptr<probe::ProbingSession> session,
                      probe::ProbingSession::Create(spec, probe::ProbeRegistry::Global(),
                                                    llm.engine().config(), options));
  std::mutex mu;
  std::map<std::string, std::vector<probe::ProbeResult>> results;
  session->SetResultCallback([&](probe::RequestProbeResults r) {
    std::lock_guard<std::mutex> lock(mu);
    results[r.request_id] = std::move(r.results);
  });
  UC_RETURN_IF_ERROR(session->AttachTo(llm.engine()));
  Status failed;
  llm.Generate(requests, [&](const engine::GenerateResult& r) {
    if (!r.status.ok() && failed.ok()) failed = r.status.Annotate("request '" + r.id + "'");
  });
  session->Shutdown(/*wait=*/true);
  llm.engine().SetObserver(nullptr);
  UC_RETURN_IF_ERROR(failed);
  std::vector<std::vector<probe::ProbeResult>> ordered;
  for (const engine::GenerateRequest& r : requests) {
    const auto it = results.find(r.id);
    if (it == results.end()) return InternalError("no probe results for request '" + r.id + "'");
    ordered.push_back(std::move(it->second));
  }
  return ordered;
}

// Fits each point's threshold and writes the calibrated spec, with what it was fitted on in its
// header comments.
int Calibrate(const CalibrateOptions& o, engine::LLM& llm, const probe::Spec& spec,
              const std::vector<engine::GenerateRequest>& requests, uint64_t prompts_hash) {
  auto results = RunSpec(llm, probe::WithoutThresholds(spec), requests, o.model);
  if (!results.ok()) return Fail(results.status().message());
  std::vector<probe::PointCalibration> fitted;
  nlohmann::json report = nlohmann::json::array();
  for (size_t p = 0; p < spec.extraction_points.size(); ++p) {
    std::vector<std::optional<double>> peaks;
    for (const auto& per_request : *results) peaks.push_back(probe::PeakStatistic(per_request[p]));
    auto c = probe::FitThreshold(spec.extraction_points[p].name, peaks, o.target_fpr);
    if (!c.ok()) return Fail(c.status().message());
    report.push_back({{"point", c->point},
                      {"threshold", c->threshold},
                      {"requests", c->requests},
                      {"flagged", c->flagged},
                      {"unscored", c->unscored}});
    fitted.push_back(*c);
  }
  const nlohmann::json model = ModelFingerprint(llm.engine());
  std::ofstream out(o.out);
  out << probe::CalibratedSpecFile(spec, fitted, o.target_fpr, requests.size(), o.prompts_file,
                                   prompts_hash, model.dump());
  out.close();
  if (!out) return Fail(o.out + ": could not write the calibrated spec");
  const nlohmann::json summary = {{"target_fpr", o.target_fpr},
                                  {"requests", requests.size()},
                                  {"model", model},
                                  {"points", report},
                                  {"out", o.out}};
  if (o.json) {
    std::cout << summary.dump() << std::endl;
  } else {
    for (const auto& r : report) {
      std::printf("%s: threshold %.9g (%lld of %lld calibration requests reach it)\n",
                  r["point"].get<std::string>().c_str(), r["threshold"].get<double>(),
                  static_cast<long long>(r["flagged"]), static_cast<long long>(r["requests"]));
    }
    std::printf("wrote %s\n", o.out.c_str());
  }
  return kExitOk;
}

// Runs the spec as it is and reports, per point, the share of requests it flagged or stopped.
int Measure(const CalibrateOptions& o, engine::LLM& llm, const probe::Spec& spec,
            const std::vector<engine::GenerateRequest>& requests) {
  auto results = RunSpec(llm, spec, requests, o.model);
  if (!results.ok()) return Fail(results.status().message());
  nlohmann::json points = nlohmann::json::array();
  for (size_t p = 0; p < spec.extraction_points.size(); ++p) {
    int64_t flagged = 0;
    for (const auto& per_request : *results) flagged += probe::Flagged(per_request[p]);
    const auto n = static_cast<int64_t>(requests.size());
    const probe::Interval ci = probe::Wilson95(flagged, n);
    points.push_back({{"point", spec.extraction_points[p].name},
                      {"requests", n},
                      {"flagged", flagged},
                      {"rate", static_cast<double>(flagged) / static_cast<double>(n)},
                      {"rate_95", {ci.low, ci.high}}});
  }
  if (o.json) {
    std::cout << nlohmann::json{{"points", points}}.dump() << std::endl;
  } else {
    for (const auto& r : points) {
      std::printf("%s: %lld of %lld requests flagged or stopped (rate %.4f, 95%% %.4f-%.4f)\n",
                  r["point"].get<std::string>().c_str(), static_cast<long long>(r["flagged"]),
                  static_cast<long long>(r["requests"]), r["rate"].get<double>(),
                  r["rate_95"][0].get<double>(), r["rate_95"][1].get<double>());
    }
  }
  return kExitOk;
}

int RunCalibrate(CalibrateOptions& o) {
  if (!o.measure && (o.out.empty() || !(o.target_fpr > 0.0 && o.target_fpr < 1.0))) {
    return Fail("calibrate needs --target-fpr in (0, 1) and --out (or --measure)", kExitUsage);
  }
  for (const std::string& plugin : o.probe_plugins) {
    const Status loaded = probe::ProbeRegistry::Global().LoadPlugin(plugin);
    if (!loaded.ok()) return Fail(loaded.message());
  }
  StatusOr<probe::Spec> spec = probe::ParseSpecFile(o.spec_file);
  if (!spec.ok()) return Fail(spec.status().message());
  StatusOr<PromptSet> prompts = ReadPromptSet(o.prompts_file, o.sampling);
  if (!prompts.ok()) return Fail(prompts.status().message());
  if (prompts->requests.empty()) return Fail(o.prompts_file + ": no prompts");
  engine::EngineOptions options;
  options.model_path = o.model;
  options.num_threads = o.threads;
  options.load = o.load;
  options.kv_cache_bytes = o.kv_cache.kv_cache_bytes();
  options.max_model_len = o.kv_cache.max_model_len;
  auto llm = engine::LLM::Open(options);
  if (!llm.ok()) return Fail(llm.status().message());
  return o.measure ? Measure(o, **llm, *spec, prompts->requests)
                   : Calibrate(o, **llm, *spec, prompts->requests, prompts->hash);
}

}  // namespace

void AddCalibrateCommand(CLI::App& app) {
  auto o = std::make_shared<CalibrateOptions>();
  o->sampling.temperature = 0.0f;
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "Fit each probe's threshold to a target false-positive rate on benign prompts (the share "
      "of requests a point flags or stops), or --measure the rate a spec gives");
  cmd->add_option("--model,-m", o->model, "Model (Hugging Face directory, .gguf or llama2.c .bin)")
      ->required();
  cmd->add_option("--spec", o->spec_file, "The spec whose points to calibrate")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--prompts", o->prompts_file,
                  "Benign prompts, JSONL (the generate --prompts format)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--target-fpr", o->target_fpr,
                  "Share of benign requests each point may flag or stop, in (0, 1)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--out,-o", o->out,
                  "The calibrated spec: the input with every point's threshold set, and the "
                  "rate, sample count and model fingerprint in its header");
  cmd->add_flag("--measure", o->measure,
                "Fit nothing: run the spec as it is and report each point's rate (a held-out "
                "check of a calibrated spec)")
      ->excludes("--out");
  cmd->add_option("--max-tokens,-n", o->sampling.max_tokens, "Tokens to generate per prompt")
      ->capture_default_str();
  cmd->add_option("--temperature,-t", o->sampling.temperature,
                  "Sampling temperature (default 0: greedy)")
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "Threads (0: all cores)")->check(Threads());
  AddKvCacheFlags(cmd, &o->kv_cache);
  cmd->add_option("--probe-plugin", o->probe_plugins,
                  "Shared library that registers probe types (repeatable)")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--json", o->json, "Print the result as one JSON object");
  AddModelLoadFlags(cmd, &o->load);
  cmd->callback([o] { throw CLI::RuntimeError(RunCalibrate(*o)); });
}

}  // namespace uc::cli
