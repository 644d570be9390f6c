// `undercurrent quantize` against llama.cpp on a real model: SmolLM2-135M-Instruct as shipped
// (Q4_1 with a Q8_0 embedding; UC_SMOLLM2_GGUF, label model). Converted to f32 it must give the
// tensors recorded by tools/reference/make_quantize_reference.py (our dequantization, which
// matches gguf-py); that f32 file quantized to each recorded type must give, per tensor, the
// type llama.cpp's llama_model_quantize chose and a byte-identical payload (sha256 of the data).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "common/sha256.h"
#include "common/test_util.h"
#include "convert/quantize.h"
#include "io/gguf.h"
#include "io/gguf_types.h"

namespace uc {
namespace {

namespace fs = std::filesystem;
using testing::LoadJson;
using testing::ScratchDir;
using testing::TestData;

std::map<std::string, std::pair<std::string, std::string>> TensorDigests(const fs::path& path) {
  std::map<std::string, std::pair<std::string, std::string>> out;
  const StatusOr<std::shared_ptr<const io::GgufFile>> file = io::GgufFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  if (!file.ok()) return out;
  for (const io::GgufTensorInfo& info : (*file)->tensor_infos()) {
    const StatusOr<Tensor> t = (*file)->Get(info.name);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    if (!t.ok()) continue;
    testing::Sha256 sha;
    sha.Update(t->raw(), static_cast<size_t>(t->nbytes()));
    out[info.name] = {io::GgmlTypeName(info.ggml_type), sha.HexDigest()};
  }
  return out;
}

void ExpectDigests(const fs::path& path, const nlohmann::json& want, const std::string& what) {
  const auto got = TensorDigests(path);
  EXPECT_EQ(got.size(), want.size()) << what;
  int type_mismatches = 0, byte_mismatches = 0;
  for (const auto& t : want) {
    const std::string name = t["name"].get<std::string>();
    auto it = got.find(name);
    if (it == got.end()) {
      ADD_FAILURE() << what << ": tensor " << name << " missing";
      continue;
    }
    if (it->second.first != t["type"].get<std::string>()) {
      if (++type_mismatches <= 5) {
        ADD_FAILURE() << what << " " << name << ": type " << it->second.first << ", llama.cpp "
                      << t["type"].get<std::string>();
      }
    } else if (it->second.second != t["sha256"].get<std::string>()) {
      if (++byte_mismatches <= 5) ADD_FAILURE() << what << " " << name << ": bytes differ";
    }
  }
  EXPECT_EQ(type_mismatches, 0) << what;
  EXPECT_EQ(byte_mismatches, 0) << what;
}

TEST(QuantizeSmolLm2Test, MatchesLlamaCppPerTensor) {
  const char* model = std::getenv("UC_SMOLLM2_GGUF");
  ASSERT_TRUE(model != nullptr && *model != '\0')
      << "UC_SMOLLM2_GGUF is not set: run scripts/fetch-smollm2.sh and export its output";
  const nlohmann::json ref = LoadJson(TestData("quantize/smollm2_llamacpp.json"));
  const fs::path dir = ScratchDir("quantize_smollm2");
  const fs::path f32 = dir / "smollm2-f32.gguf";
  const StatusOr<convert::QuantizeReport> report =
      convert::QuantizeModel(model, f32, {convert::QuantizeType::kF32, 0});
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ExpectDigests(f32, ref["types"]["f32"], "f32");
  for (const auto& [name, tensors] : ref["types"].items()) {
    if (name == "f32") continue;
    const StatusOr<convert::QuantizeType> type = convert::ParseQuantizeType(name);
    ASSERT_TRUE(type.ok()) << name;
    const fs::path out = dir / ("smollm2-" + name + ".gguf");
    const StatusOr<convert::QuantizeReport> report = convert::QuantizeModel(f32, out, {*type, 0});
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    ExpectDigests(out, tensors, name);
    fs::remove(out);
  }
}

}  // namespace
}  // namespace uc
