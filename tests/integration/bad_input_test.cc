// Truncated, corrupted or inconsistent model files end `undercurrent generate` with exit code 1
// and one clear message naming the file and the field or tensor at fault — never a crash. The
// suite also runs under AddressSanitizer (label badinput).
#include <gtest/gtest.h>

#include <fstream>

#include "common/test_util.h"
#include "models/checkpoint.h"

namespace uc {
namespace {

namespace fs = std::filesystem;
using testing::TestData;

struct CliResult {
  int exit_code;
  std::string output;
};

CliResult Generate(const fs::path& model) {
  CliResult r;
  r.exit_code = testing::RunCommand(testing::CliBinary().string() + " generate --model '" +
                                        model.string() + "' --prompt hello --max-tokens 4",
                                    &r.output);
  return r;
}

void ExpectCleanFailure(const CliResult& r, const std::vector<std::string>& must_mention) {
  EXPECT_EQ(r.exit_code, 1) << r.output;  // not a crash (>= 128) nor success
  EXPECT_EQ(r.output.rfind("error: ", 0), 0u) << r.output;
  // Exactly one line of output.
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  for (const std::string& s : must_mention) {
    EXPECT_NE(r.output.find(s), std::string::npos) << "missing '" << s << "' in: " << r.output;
  }
}

fs::path CopyModelDir(const std::string& name) {
  const fs::path dir = testing::ScratchDir("bad_input/" + name);
  for (const auto& e : fs::directory_iterator(TestData("stories260K-hf"))) {
    fs::copy_file(e.path(), dir / e.path().filename());
  }
  return dir;
}

void EditConfig(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json config = testing::LoadJson(dir / "config.json");
  edit(config);
  std::ofstream(dir / "config.json") << config.dump(2);
}

void Truncate(const fs::path& file, uintmax_t size) { fs::resize_file(file, size); }

void Overwrite(const fs::path& file, std::streamoff offset, const std::string& bytes) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(offset);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(BadInputTest, ValidModelStillWorks) {
  const CliResult r = Generate(TestData("stories260K-hf"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(BadInputTest, MissingPath) {
  ExpectCleanFailure(Generate("/nonexistent/model.gguf"),
                     {"/nonexistent/model.gguf", "no such file"});
}

TEST(BadInputTest, TruncatedSafetensors) {
  const fs::path dir = CopyModelDir("truncated_safetensors");
  Truncate(dir / "model.safetensors", fs::file_size(dir / "model.safetensors") / 2);
  ExpectCleanFailure(Generate(dir), {"model.safetensors", "tensor '"});
}

TEST(BadInputTest, SafetensorsHeaderLengthTooLarge) {
  const fs::path dir = CopyModelDir("bad_header_length");
  Overwrite(dir / "model.safetensors", 0, std::string("\xff\xff\xff\xff\x00\x00\x00\x00", 8));
  ExpectCleanFailure(Generate(dir), {"model.safetensors", "header"});
}

TEST(BadInputTest, SafetensorsHeaderNotJson) {
  const fs::path dir = CopyModelDir("header_not_json");
  Overwrite(dir / "model.safetensors", 8, "#");
  ExpectCleanFailure(Generate(dir), {"model.safetensors", "JSON"});
}

TEST(BadInputTest, MissingConfigField) {
  const fs::path dir = CopyModelDir("missing_field");
  EditConfig(dir, [](nlohmann::json& c) { c.erase("num_hidden_layers"); });
  ExpectCleanFailure(Generate(dir), {"config.json", "num_hidden_layers"});
}

TEST(BadInputTest, WrongTypeConfigField) {
  const fs::path dir = CopyModelDir("wrong_type");
  EditConfig(dir, [](nlohmann::json& c) { c["hidden_size"] = "sixty-four"; });
  ExpectCleanFailure(Generate(dir), {"config.json", "hidden_size", "integer"});
}

TEST(BadInputTest, TensorShapeDisagreesWithConfig) {
  const fs::path dir = CopyModelDir("shape_mismatch");
  EditConfig(dir, [](nlohmann::json& c) { c["intermediate_size"] = 180; });
  ExpectCleanFailure(Generate(dir), {"model.safetensors", "model.layers.0.mlp.gate_proj.weight",
                                     "[172, 64]", "[180, 64]"});
}

TEST(BadInputTest, UnknownArchitecture) {
  const fs::path dir = CopyModelDir("unknown_arch");
  EditConfig(dir, [](nlohmann::json& c) { c["architectures"] = {"MambaForCausalLM"}; });
  ExpectCleanFailure(Generate(dir), {"config.json", "MambaForCausalLM", "LlamaForCausalLM"});
}

TEST(BadInputTest, InconsistentHeads) {
  const fs::path dir = CopyModelDir("bad_heads");
  EditConfig(dir, [](nlohmann::json& c) { c["num_key_value_heads"] = 3; });
  ExpectCleanFailure(Generate(dir), {"config.json", "num_key_value_heads"});
}

TEST(BadInputTest, WrongGgufMagic) {
  const fs::path dir = testing::ScratchDir("bad_input/gguf_magic");
  const fs::path file = dir / "model.gguf";
  fs::copy_file(TestData("stories260K/stories260K.gguf"), file);
  Overwrite(file, 0, "GGML");
  ExpectCleanFailure(Generate(file), {"model.gguf", "GGUF"});
}

TEST(BadInputTest, TruncatedGgufAtManyPoints) {
  const fs::path dir = testing::ScratchDir("bad_input/gguf_truncated");
  const fs::path source = TestData("stories260K/stories260K-F16.gguf");
  const uintmax_t size = fs::file_size(source);
  for (uintmax_t cut :
       {uintmax_t{3}, uintmax_t{20}, uintmax_t{200}, uintmax_t{5000}, size / 2, size - 1}) {
    const fs::path file = dir / ("cut" + std::to_string(cut) + ".gguf");
    fs::copy_file(source, file);
    Truncate(file, cut);
    SCOPED_TRACE("cut at " + std::to_string(cut));
    ExpectCleanFailure(Generate(file), {file.filename().string()});
  }
}

TEST(BadInputTest, Llama2cFileOfWrongSize) {
  const fs::path dir = testing::ScratchDir("bad_input/llama2c");
  fs::copy_file(TestData("stories260K/stories260K.bin"), dir / "stories260K.bin");
  fs::copy_file(TestData("stories260K/tok512.bin"), dir / "tok512.bin");
  Truncate(dir / "stories260K.bin", 100000);
  ExpectCleanFailure(Generate(dir / "stories260K.bin"), {"stories260K.bin", "100000"});
}

TEST(BadInputTest, Llama2cMissingTokenizer) {
  const fs::path dir = testing::ScratchDir("bad_input/llama2c_notok");
  fs::copy_file(TestData("stories260K/stories260K.bin"), dir / "stories260K.bin");
  ExpectCleanFailure(Generate(dir / "stories260K.bin"), {"stories260K.bin", "tokenizer"});
}

// Finds `needle` in `file` (the first occurrence); -1 if absent.
std::streamoff FindBytes(const fs::path& file, const std::string& needle) {
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = bytes.find(needle);
  return at == std::string::npos ? -1 : static_cast<std::streamoff>(at);
}

// A GGUF tensor of a block type we do not run (IQ2_XXS, ggml type 16): one line naming the
// file, the tensor and its type, and listing the supported types.
TEST(BadInputTest, GgufTensorOfUnsupportedType) {
  const fs::path dir = testing::ScratchDir("bad_input/gguf_iq2_xxs");
  const fs::path file = dir / "model.gguf";
  fs::copy_file(TestData("arch/qwen3/model.gguf"), file);
  // Tensor info: name (u64 length + bytes), n_dims (u32), dims (2 x u64), type (u32), offset.
  const std::string name = "blk.1.ffn_down.weight";
  const std::streamoff at = FindBytes(file, name);
  ASSERT_GT(at, 0);
  const std::streamoff type_offset = at + static_cast<std::streamoff>(name.size()) + 4 + 2 * 8;
  Overwrite(file, type_offset, std::string("\x10\0\0\0", 4));
  ExpectCleanFailure(Generate(file), {"model.gguf", name, "IQ2_XXS", "Q4_K", "Q6_K"});
}

TEST(BadInputTest, GgufUnknownArchitecture) {
  const fs::path dir = testing::ScratchDir("bad_input/gguf_arch");
  const fs::path file = dir / "model.gguf";
  fs::copy_file(TestData("arch/qwen3/model.gguf"), file);
  // general.architecture's value "qwen3" becomes "mamba" (same length).
  const std::streamoff key = FindBytes(file, "general.architecture");
  ASSERT_GT(key, 0);
  const std::streamoff value = FindBytes(file, "qwen3");
  ASSERT_GT(value, key);
  Overwrite(file, value, "mamba");
  ExpectCleanFailure(Generate(file), {"model.gguf", "mamba", "gemma3", "qwen3", "llama"});
}

// Control vector files that do not fit the model (a wrong length, a truncated .npy, a block past
// the model, a model GGUF given as a vector): one line naming the file and what is wrong.
TEST(BadInputTest, ControlVectorFilesThatDoNotFit) {
  auto generate = [](const fs::path& vector) {
    CliResult r;
    r.exit_code = testing::RunCommand(testing::CliBinary().string() + " generate --model '" +
                                          TestData("stories260K-hf").string() +
                                          "' --prompt hello --max-tokens 4 --control-vector '" +
                                          vector.string() + "'",
                                      &r.output);
    return r;
  };
  ExpectCleanFailure(generate(TestData("steering/bad_hidden.gguf")),
                     {"bad_hidden.gguf", "direction.2", "48 values", "hidden size is 64"});
  ExpectCleanFailure(generate(TestData("stories260K/stories260K.gguf")),
                     {"stories260K.gguf", "architecture 'llama'", "controlvector"});
  const fs::path dir = testing::ScratchDir("bad_input/control_vectors");
  const fs::path npy = dir / "truncated.npy";
  fs::copy_file(TestData("steering/vectors_c.npy"), npy);
  Truncate(npy, 300);
  ExpectCleanFailure(generate(npy), {"truncated.npy", "truncated"});
  const fs::path past = dir / "past.gguf";
  fs::copy_file(TestData("steering/vectors_a.gguf"), past);
  Overwrite(past, FindBytes(past, "direction.3"), "direction.9");
  ExpectCleanFailure(generate(past), {"past.gguf", "direction.9", "block 9", "0 to 4"});
}

// The same failures through the library API return Status values, never crash.
TEST(BadInputTest, OpenCheckpointReturnsStatus) {
  const fs::path dir = CopyModelDir("api_missing_field");
  EditConfig(dir, [](nlohmann::json& c) { c.erase("vocab_size"); });
  const auto ckpt = models::OpenCheckpoint(dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ckpt.status().message().find("vocab_size"), std::string::npos);
}

}  // namespace
}  // namespace uc
