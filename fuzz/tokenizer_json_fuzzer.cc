// Fuzzes the Hugging Face tokenizer.json loader (LoadHfTokenizer reads a path, so the bytes go
// to a scratch file first); a tokenizer it accepts must encode and decode a sample text. Every
// problem must come back as a Status naming the field.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "tokenizer/loaders.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const uc::fuzz::ScratchDir scratch("tokenizer");  // removed at exit
  const auto path = scratch.Write("tokenizer.json", data, size);
  uc::StatusOr<std::unique_ptr<uc::tokenizer::Tokenizer>> tokenizer =
      uc::tokenizer::LoadHfTokenizer(path);
  if (!tokenizer.ok()) {
    UC_FUZZ_ASSERT(!tokenizer.status().message().empty(), "an error says what is wrong");
    return 0;
  }
  const uc::tokenizer::Tokenizer& tok = **tokenizer;
  for (bool parse_special : {false, true}) {
    const std::vector<int32_t> ids =
        tok.Encode("Hello <|im_start|> world\n\t  émoji 🙂 123 <s>", true, parse_special);
    for (int32_t id : ids) UC_FUZZ_ASSERT(id >= 0 && id < tok.vocab_size(), "ids in range");
    (void)tok.Decode(ids);
  }
  for (int32_t id = 0; id < tok.vocab_size() && id < 64; ++id) (void)tok.TokenToPiece(id);
  return 0;
}
