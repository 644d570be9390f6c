#include "tokenizer/text/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/text/utf8.h"

namespace uc::tokenizer {
namespace {

pcre2_code* Code(void* code) { return static_cast<pcre2_code*>(code); }

std::string PcreMessage(int error_code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(error_code, buffer, sizeof(buffer));
  if (n < 0) return "PCRE2 error " + std::to_string(error_code);
  return std::string(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

// Frees match data on every return path.
struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};

}  // namespace

StatusOr<std::shared_ptr<const Regex>> Regex::Compile(std::string_view pattern) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error_code,
                                   &error_offset, nullptr);
  if (code == nullptr) {
    return InvalidArgumentError("cannot compile regex '" + std::string(pattern) + "' at offset " +
                                std::to_string(error_offset) + ": " + PcreMessage(error_code));
  }
  // JIT is an optimisation: without it (unsupported CPU, or a PCRE2 built without JIT) the
  // interpreter gives the same matches.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return std::shared_ptr<const Regex>(new Regex(std::string(pattern), code));
}

Regex::~Regex() { pcre2_code_free(Code(code_)); }

void Regex::FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* spans) const {
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> data(
      pcre2_match_data_create_from_pattern(Code(code_), nullptr));
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    int rc = pcre2_match(Code(code_), subject, text.size(), pos, 0, data.get(), nullptr);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
      // The JIT stack is small; the interpreter keeps its backtracking state on the heap.
      rc = pcre2_match(Code(code_), subject, text.size(), pos, PCRE2_NO_JIT, data.get(), nullptr);
    }
    if (rc < 0) return;
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (end > begin) {
      spans->emplace_back(begin, end);
      pos = end;
    } else if (begin < text.size()) {
      pos = begin + Utf8CharLength(text.substr(begin));  // step over an empty match
    } else {
      return;
    }
  }
}

}  // namespace uc::tokenizer
