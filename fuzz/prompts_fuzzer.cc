// Fuzzes the prompts file parser of `generate --prompts` and `capture` (JSONL, one request a
// line) and the byte-size parser of the size flags. Every problem must come back as a Status.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "engine/prompts_file.h"
#include "fuzz/fuzz_util.h"
#include "worker/sampling_params.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  uc::worker::SamplingParams defaults;
  defaults.max_tokens = 32;
  uc::StatusOr<std::vector<uc::engine::GenerateRequest>> requests =
      uc::engine::ParsePrompts(text, "fuzz.jsonl", defaults);
  if (requests.ok()) {
    std::set<std::string> ids;
    for (const uc::engine::GenerateRequest& request : *requests) {
      UC_FUZZ_ASSERT(ids.insert(request.id).second, "request ids are unique");
    }
  } else {
    UC_FUZZ_ASSERT(!requests.status().message().empty(), "an error says what is wrong");
  }
  // The first line doubles as a byte size ("512MiB", "1.5G").
  const std::string_view first_line = text.substr(0, text.find('\n'));
  uc::StatusOr<int64_t> bytes = uc::engine::ParseByteSize(first_line);
  if (bytes.ok()) UC_FUZZ_ASSERT(*bytes >= 0, "a byte size is not negative");
  return 0;
}
