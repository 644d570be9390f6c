#include "apps/cli/commands/perplexity_command.h"

#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "apps/cli/exit_codes.h"
#include "apps/cli/flag_checks.h"
#include "apps/cli/kv_cache_flags.h"
#include "engine/generator.h"
#include "engine/perplexity.h"
#include "io/text_file.h"

namespace uc::cli {
namespace {

// The largest text taken whole (about 16 times wikitext-2's test set).
constexpr int64_t kMaxTextBytes = int64_t{256} << 20;

struct PerplexityFlags {
  engine::GeneratorOptions generator;
  std::string model;
  std::string tokenizer;
  std::string file;
  engine::PerplexityOptions perplexity;
  KvCacheFlags kv_cache;  // --kv-cache-memory; --max-model-len defaults to --ctx here
  bool json = false;
};

int RunPerplexity(PerplexityFlags& o) {
  StatusOr<std::string> text = io::ReadTextFile(o.file, kMaxTextBytes, "text file");
  if (!text.ok()) return Fail(text.status().message());
  o.generator.model_path = o.model;
  if (!o.tokenizer.empty()) o.generator.tokenizer_path = o.tokenizer;
  // The whole chunk in one forward pass, and room for it whatever the model's default length.
  o.generator.prefill_chunk = o.perplexity.context;
  if (o.generator.max_model_len == 0) o.generator.max_model_len = o.perplexity.context;
  o.generator.kv_cache_bytes = o.kv_cache.kv_cache_bytes();
  auto generator = engine::Generator::Open(o.generator);
  if (!generator.ok()) return Fail(generator.status().message());
  const tokenizer::Tokenizer& tok = (*generator)->tokenizer();
  const bool add_bos = tok.add_bos_token() && tok.bos_id() >= 0;
  std::vector<int32_t> tokens = tok.Encode(*text, add_bos, /*parse_special=*/false);
  o.perplexity.bos_id = add_bos ? tok.bos_id() : -1;
  const int64_t chunks_total = static_cast<int64_t>(tokens.size()) / o.perplexity.context;
  std::fprintf(stderr, "perplexity: %s: %zu tokens, %lld chunks of %d (BOS %s)\n", o.file.c_str(),
               tokens.size(),
               static_cast<long long>(o.perplexity.max_chunks >= 0
                                          ? std::min<int64_t>(chunks_total, o.perplexity.max_chunks)
                                          : chunks_total),
               o.perplexity.context, add_bos ? "added" : "not added");
  auto result =
      engine::ComputePerplexity(**generator, std::move(tokens), o.perplexity,
                                [](int chunk, const engine::PerplexityChunk& c) {
                                  std::fprintf(stderr, "[%d]%.4f,", chunk + 1, c.running_ppl);
                                  std::fflush(stderr);
                                });
  std::fprintf(stderr, "\n");
  if (!result.ok()) return Fail(o.file + ": " + result.status().message());
  double seconds = 0.0;
  for (const engine::PerplexityChunk& c : result->chunks) seconds += c.seconds;
  if (o.json) {
    nlohmann::json j = {{"file", o.file},
                        {"context", o.perplexity.context},
                        {"tokens", result->num_tokens},
                        {"chunks", result->chunks.size()},
                        {"scored_tokens", result->scored},
                        {"ppl", result->ppl},
                        {"ppl_stderr", result->ppl_stderr},
                        {"mean_nll", result->mean_nll},
                        {"seconds", seconds}};
    std::cout << j.dump() << std::endl;
  } else {
    std::printf("Final estimate: PPL = %.4f +/- %.5f\n", result->ppl, result->ppl_stderr);
    std::fprintf(stderr, "[%lld tokens scored in %zu chunks, %.1f s, %.1f tokens/s]\n",
                 static_cast<long long>(result->scored), result->chunks.size(), seconds,
                 seconds > 0
                     ? static_cast<double>(result->chunks.size()) * o.perplexity.context / seconds
                     : 0.0);
  }
  return kExitOk;
}

}  // namespace

void AddPerplexityCommand(CLI::App& app) {
  auto o = std::make_shared<PerplexityFlags>();
  CLI::App* cmd = app.add_subcommand(
      "perplexity",
      "Perplexity of a model on a text file, by llama.cpp's method (chunks of --ctx tokens, "
      "the second half of each scored): the numbers compare with llama-perplexity's");
  cmd->add_option("--model,-m", o->model, "Model (Hugging Face directory, .gguf or llama2.c .bin)")
      ->required();
  cmd->add_option("--tokenizer", o->tokenizer,
                  "Tokenizer file (default: the one that comes with the model)");
  cmd->add_option("--file,-f", o->file, "Text file (UTF-8), tokenized whole")->required();
  cmd->add_option("--ctx,-c", o->perplexity.context, "Tokens per chunk (llama.cpp's -c)")
      ->check(CLI::Range(4, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--chunks", o->perplexity.max_chunks,
                  "Chunks to score at most (default: every whole chunk of the text)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--threads", o->generator.num_threads, "Threads (0: all cores)")
      ->check(Threads());
  cmd->add_option("--max-model-len", o->generator.max_model_len,
                  "Context length the model is built for (default: --ctx)");
  AddKvCacheFlags(cmd, &o->kv_cache, /*with_max_model_len=*/false);
  AddModelLoadFlags(cmd, &o->generator.load);
  cmd->add_flag("--json", o->json,
                "Print one JSON object (ppl, ppl_stderr, mean_nll, tokens, chunks, seconds)");
  cmd->callback([o] { throw CLI::RuntimeError(RunPerplexity(*o)); });
}

}  // namespace uc::cli
