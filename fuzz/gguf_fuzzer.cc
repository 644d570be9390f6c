// Fuzzes GGUF loading: the input is a whole GGUF file. GgufFile::Open maps a path, so the bytes
// go to a scratch file first. Then everything a model load reads from it: every metadata value
// through the typed accessors, every tensor (which must lie inside the file), the model config
// (ReadCheckpointConfig) and the tokenizer in the metadata (LoadGgufTokenizer), which encodes
// and decodes a sample text. Problems must come back as Status.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "io/gguf/gguf.h"
#include "models/checkpoint.h"
#include "tokenizer/loaders.h"

namespace {

void ReadMetadata(const uc::io::GgufFile& gguf) {
  for (const std::string& key : gguf.Keys()) {
    const uc::io::GgufValue* value = gguf.Find(key);
    UC_FUZZ_ASSERT(value != nullptr, "every listed key is found");
    (void)value->TypeName();
    if (value->is_array()) {
      (void)gguf.GetStringArray(key);
      (void)gguf.GetFloatArray(key);
      (void)gguf.GetInt32Array(key);
    } else {
      (void)gguf.GetString(key);
      (void)gguf.GetInt(key);
      (void)gguf.GetFloat(key);
      (void)gguf.GetBool(key);
    }
  }
}

void ReadTensors(const uc::io::GgufFile& gguf, size_t file_size) {
  for (const uc::io::GgufTensorInfo& info : gguf.tensor_infos()) {
    uc::StatusOr<uc::Tensor> tensor = gguf.Get(info.name);
    if (!tensor.ok()) continue;  // an unsupported ggml type
    const uint64_t begin = gguf.data_offset() + info.offset;
    UC_FUZZ_ASSERT(begin >= info.offset && begin <= file_size &&
                       static_cast<uint64_t>(tensor->nbytes()) <= file_size - begin,
                   "tensor data lies inside the file");
    if (tensor->numel() <= (1 << 16)) {
      const std::vector<float> values = tensor->ToFloatVector();
      UC_FUZZ_ASSERT(static_cast<int64_t>(values.size()) == tensor->numel(), "every value read");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const uc::fuzz::ScratchDir scratch("gguf");  // removed at exit
  const auto path = scratch.Write("model.gguf", data, size);
  uc::StatusOr<std::shared_ptr<const uc::io::GgufFile>> gguf = uc::io::GgufFile::Open(path);
  if (!gguf.ok()) return 0;
  ReadMetadata(**gguf);
  ReadTensors(**gguf, size);
  (void)uc::models::ReadCheckpointConfig(path);
  uc::StatusOr<std::unique_ptr<uc::tokenizer::Tokenizer>> tokenizer =
      uc::tokenizer::LoadGgufTokenizer(**gguf);
  if (tokenizer.ok()) {
    const std::vector<int32_t> ids =
        (*tokenizer)->Encode("Hello <s> world\n\t émoji 🙂 123", true, true);
    (void)(*tokenizer)->Decode(ids);
  }
  return 0;
}
