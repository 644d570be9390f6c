#include "tokenizer/text/pre_tokenizer.h"

#include <algorithm>
#include <utility>

namespace uc::tokenizer {
namespace {

struct Segment {
  size_t begin;
  size_t end;
  bool delimiter;
};

// Cuts `word` into matched and unmatched segments covering all of it.
std::vector<Segment> Segments(const Regex& regex, std::string_view word, bool invert) {
  std::vector<std::pair<size_t, size_t>> spans;
  regex.FindAll(word, &spans);
  std::vector<Segment> segments;
  size_t pos = 0;
  for (const auto& [begin, end] : spans) {
    if (begin > pos) segments.push_back({pos, begin, invert});
    segments.push_back({begin, end, !invert});
    pos = end;
  }
  if (pos < word.size()) segments.push_back({pos, word.size(), invert});
  return segments;
}

// Applies `behavior` to the segments, returning the spans of the resulting words. Mirrors the
// Hugging Face rules: a delimiter merges into a neighbour only if that neighbour is not itself
// a delimiter.
std::vector<std::pair<size_t, size_t>> Group(const std::vector<Segment>& segments,
                                             SplitBehavior behavior) {
  std::vector<std::pair<size_t, size_t>> words;
  bool previous_delimiter = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Segment& s : segments) {
        if (!s.delimiter) words.emplace_back(s.begin, s.end);
      }
      break;
    case SplitBehavior::kIsolated:
      for (const Segment& s : segments) words.emplace_back(s.begin, s.end);
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Segment& s : segments) {
        if (s.delimiter && !previous_delimiter && !words.empty()) {
          words.back().second = s.end;
        } else {
          words.emplace_back(s.begin, s.end);
        }
        previous_delimiter = s.delimiter;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
        if (it->delimiter && !previous_delimiter && !words.empty()) {
          words.back().first = it->begin;
        } else {
          words.emplace_back(it->begin, it->end);
        }
        previous_delimiter = it->delimiter;
      }
      std::reverse(words.begin(), words.end());
      break;
    case SplitBehavior::kContiguous:
      for (size_t i = 0; i < segments.size(); ++i) {
        const Segment& s = segments[i];
        if (i > 0 && s.delimiter == previous_delimiter) {
          words.back().second = s.end;
        } else {
          words.emplace_back(s.begin, s.end);
        }
        previous_delimiter = s.delimiter;
      }
      break;
  }
  return words;
}

}  // namespace

Status PreTokenizer::AddSplit(std::string_view pattern, SplitBehavior behavior, bool invert) {
  UC_ASSIGN_OR_RETURN(std::shared_ptr<const Regex> regex, Regex::Compile(pattern));
  steps_.push_back({std::move(regex), behavior, invert});
  return OkStatus();
}

void PreTokenizer::AddPrefixSpace() {
  steps_.push_back({nullptr, SplitBehavior::kIsolated, false});
}

void PreTokenizer::ApplySplit(const Step& step, std::string_view word,
                              std::vector<std::string>* out) {
  for (const auto& [begin, end] : Group(Segments(*step.regex, word, step.invert), step.behavior)) {
    out->emplace_back(word.substr(begin, end - begin));
  }
}

std::vector<std::string> PreTokenizer::Split(std::string_view text) const {
  std::vector<std::string> words{std::string(text)};
  for (const Step& step : steps_) {
    std::vector<std::string> next;
    next.reserve(words.size());
    for (std::string& word : words) {
      if (step.regex != nullptr) {
        ApplySplit(step, word, &next);
      } else {
        next.push_back(word.empty() || word[0] == ' ' ? std::move(word) : " " + word);
      }
    }
    words = std::move(next);
  }
  return words;
}

StatusOr<PreTokenizer> PreTokenizerForGgufPre(std::string_view pre, bool* ignore_merges) {
  PreTokenizer result;
  *ignore_merges = false;
  if (pre == "gpt-2" || pre == "gpt2" || pre == "default" || pre == "phi-2") {
    UC_RETURN_IF_ERROR(result.AddSplit(kGpt2Pattern, SplitBehavior::kIsolated));
  } else if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3" || pre == "falcon3") {
    UC_RETURN_IF_ERROR(result.AddSplit(kLlama3Pattern, SplitBehavior::kIsolated));
    *ignore_merges = true;
  } else if (pre == "qwen2" || pre == "deepseek-r1-qwen") {
    UC_RETURN_IF_ERROR(result.AddSplit(kQwen2Pattern, SplitBehavior::kIsolated));
  } else if (pre == "smollm" || pre == "starcoder" || pre == "refact") {
    UC_RETURN_IF_ERROR(result.AddSplit(kSingleDigitPattern, SplitBehavior::kIsolated));
    UC_RETURN_IF_ERROR(result.AddSplit(kGpt2Pattern, SplitBehavior::kIsolated));
  } else {
    return UnimplementedError(
        "pre-tokenizer '" + std::string(pre) +
        "' is not supported (known: gpt-2, default, phi-2, llama-bpe, llama3, llama-v3, falcon3, "
        "qwen2, deepseek-r1-qwen, smollm, starcoder, refact)");
  }
  return result;
}

}  // namespace uc::tokenizer
