#include <fstream>

#include "io/mapped_file.h"
#include "tokenizer/formats/hf_components.h"
#include "tokenizer/loaders.h"

namespace uc::tokenizer {
namespace {

namespace fs = std::filesystem;

bool HasGgufMagic(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string_view(magic, 4) == "GGUF";
}

// tokenizer.model plus the Hugging Face config files next to it.
StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePieceDir(const fs::path& dir) {
  const fs::path file = dir / "tokenizer.model";
  UC_ASSIGN_OR_RETURN(std::shared_ptr<const io::MappedFile> mapped, io::MappedFile::Open(file));
  const std::string_view bytes(reinterpret_cast<const char*>(mapped->data()), mapped->size());
  UC_ASSIGN_OR_RETURN(TokenizerSpec spec, ParseSentencePieceModel(bytes, file.string()));
  UC_RETURN_IF_ERROR(ApplyHfConfigFiles(dir, &spec));
  return Tokenizer::Create(std::move(spec));
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(path / "tokenizer.json", ec)) return LoadHfTokenizer(path);
    if (fs::exists(path / "tokenizer.model", ec)) return LoadSentencePieceDir(path);
    return NotFoundError(path.string() +
                         ": no tokenizer.json or tokenizer.model in this directory");
  }
  if (!fs::exists(path, ec)) return NotFoundError(path.string() + ": no such file or directory");
  const std::string ext = path.extension().string();
  if (ext == ".gguf" || HasGgufMagic(path)) return LoadGgufTokenizer(path);
  if (ext == ".json") return LoadHfTokenizer(path);
  if (ext == ".model") return LoadSentencePieceModel(path);
  return InvalidArgumentError(path.string() +
                              ": cannot tell the tokenizer format (expected a model directory, "
                              "a .gguf file, tokenizer.json or tokenizer.model; llama2.c .bin "
                              "tokenizers need LoadLlama2cTokenizer with the vocab size)");
}

}  // namespace uc::tokenizer
