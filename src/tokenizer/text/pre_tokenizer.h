// File: pre_tokenizer.h
// -----------------------------------------------------------------------------
// PreTokenizer: cuts normalized text into words before BPE runs on each word, as Hugging Face
// pre-tokenizers do. It is a sequence of steps; each step rewrites every current word:
//
//   * Split: a regex (PCRE2) cuts the word into segments; matched segments are "delimiters"
//     (or the gaps are, with `invert`), and a SplitBehavior says what happens to them. This
//     covers HF's Split, Digits, Metaspace(split) and ByteLevel(use_regex) pre-tokenizers.
//   * PrefixSpace: prepends ' ' unless the word starts with one (ByteLevel add_prefix_space).
//
// The named patterns below are the pre-tokenizer regexes of the model families we support;
// PreTokenizerForGgufPre() maps GGUF's `tokenizer.ggml.pre` names onto them.
//
// Immutable after construction; Split() may be called from many threads at once.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/text/regex.h"

namespace uc::tokenizer {

// GPT-2 (also ByteLevel use_regex in tokenizer.json).
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama 3 (GGUF pre "llama-bpe").
inline constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2: like Llama 3 but every digit on its own.
inline constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// HF Digits pre-tokenizer: individual_digits true / false.
inline constexpr std::string_view kSingleDigitPattern = R"(\p{N})";
inline constexpr std::string_view kDigitRunPattern = R"(\p{N}+)";

// What happens to delimiter segments (HF SplitDelimiterBehavior).
enum class SplitBehavior {
  kRemoved,             // dropped
  kIsolated,            // each one is a word of its own
  kMergedWithPrevious,  // appended to the word before it
  kMergedWithNext,      // prepended to the word after it
  kContiguous,          // consecutive delimiters form one word
};

class PreTokenizer {
 public:
  // Adds a regex split step. InvalidArgument if the pattern does not compile.
  Status AddSplit(std::string_view pattern, SplitBehavior behavior, bool invert = false);
  void AddPrefixSpace();

  bool empty() const { return steps_.empty(); }
  // The words of `text` after all steps, in order (`text` itself when there are no steps).
  std::vector<std::string> Split(std::string_view text) const;

 private:
  struct Step {
    std::shared_ptr<const Regex> regex;  // null: PrefixSpace
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
  };
  static void ApplySplit(const Step& step, std::string_view word, std::vector<std::string>* out);

  std::vector<Step> steps_;
};

// The pre-tokenizer llama.cpp uses for GGUF `tokenizer.ggml.pre` = `pre` ("gpt-2", "llama-bpe",
// "qwen2", "smollm", ...); `ignore_merges` is set for families whose tokenizer.json says so
// (Llama 3). Unimplemented for names we do not know.
StatusOr<PreTokenizer> PreTokenizerForGgufPre(std::string_view pre, bool* ignore_merges);

}  // namespace uc::tokenizer
