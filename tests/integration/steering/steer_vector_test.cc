// `undercurrent steer-vector` on stories260K against numpy over transformers' activations
// (tools/reference/make_steer_vector_reference.py): mean-difference and repeng's PCA vectors per
// block, written as a control-vector GGUF that the loader (and so --control-vector,
// --steering-module and specs) reads back; the method's math against the same reference; bad
// input named.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "common/test_util.h"
#include "io/gguf/gguf.h"
#include "models/steering.h"

namespace uc {
namespace {

using testing::JsonFloats;

std::string Model() { return std::string(UC_SOURCE_DIR) + "/models/stories260K"; }

// max |a - b| / max |b|.
double RelativeDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::fabs(double{a[i]} - b[i]));
    scale = std::max(scale, std::fabs(double{b[i]}));
  }
  return diff / scale;
}

std::string SteerVector(const std::string& args, int* code) {
  std::string output;
  *code = testing::RunCommand(testing::CliBinary().string() + " steer-vector " + args + " 2>&1",
                              &output);
  return output;
}

TEST(SteerVectorTest, WritesNumpysVectorsForEveryMethodAndBlock) {
  const nlohmann::json reference =
      testing::LoadJson(testing::TestData("steering/steer_vectors.json"));
  const std::filesystem::path dir = testing::ScratchDir("steer_vector");
  for (const std::string method : {"mean_diff", "pca_diff"}) {
    SCOPED_TRACE(method);
    const std::filesystem::path out = dir / (method + ".gguf");
    int code = 0;
    const std::string log =
        SteerVector("--model " + Model() + " --positive " +
                        testing::TestData("steering/positive.jsonl").string() + " --negative " +
                        testing::TestData("steering/negative.jsonl").string() +
                        " --layers 1-4 --method " + method + " --out " + out.string(),
                    &code);
    ASSERT_EQ(code, 0) << log;
    auto vectors = models::ReadControlVectorFile(out, 64, 5);
    ASSERT_TRUE(vectors.ok()) << vectors.status().ToString();
    ASSERT_EQ(vectors->size(), 4u);
    EXPECT_EQ(vectors->count(0), 0u);
    for (int layer = 1; layer <= 4; ++layer) {
      EXPECT_LE(RelativeDiff(vectors->at(layer), JsonFloats(reference["layers"][layer][method])),
                1e-4)
          << "block " << layer;
    }
    auto file = io::GgufFile::Open(out);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    EXPECT_EQ(*(*file)->GetString("general.architecture"), "controlvector");
    EXPECT_EQ(*(*file)->GetString("controlvector.model_hint"), "llama");
  }
}

TEST(SteerVectorTest, DirectionMathMatchesNumpy) {
  // Two pairs of 3-d rows: differences [3, -1, 1.5] and [0, -1, 0.5], mean_diff [1.5, -1, 1];
  // centered, they are ±[1.5, 0, 0.5], so pca_diff is [1.5, 0, 0.5] / sqrt(2.5), and positive
  // (both positives project above their negatives on it).
  const std::vector<std::vector<float>> pos = {{3, 0, 2}, {1, -1, 1}};
  const std::vector<std::vector<float>> neg = {{0, 1, 0.5f}, {1, 0, 0.5f}};
  auto mean = models::ContrastiveDirection(models::VectorMethod::kMeanDiff, pos, neg);
  ASSERT_TRUE(mean.ok());
  EXPECT_EQ(*mean, (std::vector<float>{1.5f, -1.0f, 1.0f}));
  auto pca = models::ContrastiveDirection(models::VectorMethod::kPcaDiff, pos, neg);
  ASSERT_TRUE(pca.ok());
  double norm = 0.0;
  for (float x : *pca) norm += double{x} * x;
  EXPECT_NEAR(norm, 1.0, 1e-6);
  EXPECT_NEAR((*pca)[0], 1.5 / std::sqrt(2.5), 1e-6);
  EXPECT_NEAR((*pca)[1], 0.0, 1e-6);
  EXPECT_NEAR((*pca)[2], 0.5 / std::sqrt(2.5), 1e-6);
  EXPECT_FALSE(
      models::ContrastiveDirection(models::VectorMethod::kPcaDiff, {pos[0]}, {neg[0]}).ok());
  EXPECT_FALSE(models::ContrastiveDirection(models::VectorMethod::kPcaDiff, pos, {neg[0]}).ok());
  EXPECT_FALSE(models::ContrastiveDirection(models::VectorMethod::kMeanDiff, {}, neg).ok());
}

TEST(SteerVectorTest, BadInputIsNamed) {
  const std::filesystem::path dir = testing::ScratchDir("steer_vector_bad");
  const std::string pos = testing::TestData("steering/positive.jsonl").string();
  const std::string neg = testing::TestData("steering/negative.jsonl").string();
  int code = 0;
  std::string log = SteerVector("--model " + Model() + " --positive " + pos + " --negative " + neg +
                                    " --layers 3-9 --out " + (dir / "x.gguf").string(),
                                &code);
  EXPECT_EQ(code, 2) << log;
  EXPECT_NE(log.find("--layers '3-9': the model has blocks 0 to 4"), std::string::npos) << log;
  std::ofstream(dir / "one.jsonl") << R"({"id": 0, "prompt": "Lily"})"
                                   << "\n";
  log = SteerVector("--model " + Model() + " --positive " + (dir / "one.jsonl").string() +
                        " --negative " + neg + " --method pca_diff --out " +
                        (dir / "x.gguf").string(),
                    &code);
  EXPECT_EQ(code, 1) << log;
  EXPECT_NE(log.find("pca_diff pairs positive and negative examples line by line: 1 positive, "
                     "6 negative"),
            std::string::npos)
      << log;
  log = SteerVector("--model " + Model() + " --positive " + (dir / "missing.jsonl").string() +
                        " --negative " + neg + " --out " + (dir / "x.gguf").string(),
                    &code);
  EXPECT_EQ(code, 1) << log;
  EXPECT_NE(log.find("missing.jsonl"), std::string::npos) << log;
}

}  // namespace
}  // namespace uc
