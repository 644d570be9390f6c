// `undercurrent quantize` against llama.cpp on a real model: SmolLM2-135M-Instruct as shipped
// (Q4_1 with a Q8_0 embedding; UC_SMOLLM2_GGUF, label model). Converted to f32 it must give the
// tensors recorded by tools/reference/make_quantize_reference.py (our dequantization, which
// matches gguf-py); that f32 file quantized to each recorded type must give, per tensor, the
// type llama.cpp's llama_model_quantize chose and a byte-identical payload (sha256 of the data).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "common/quantize_digests.h"
#include "common/test_util.h"
#include "convert/quantize.h"

namespace uc {
namespace {

namespace fs = std::filesystem;
using testing::ExpectDigests;
using testing::LoadJson;
using testing::ScratchDir;
using testing::TestData;

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
