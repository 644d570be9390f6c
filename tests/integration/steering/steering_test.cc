// Control vectors on the bundled stories260K against Hugging Face transformers with a forward
// hook adding the same vectors to the same decoder blocks' outputs
// (tools/reference/make_steering_reference.py): llama.cpp's control-vector GGUF, safetensors and
// .npy files, scaled and summed, restricted to a layer range. Logits at every position within
// 1e-4 and 16-token greedy continuations identical, through the model and through the serving
// engine; what a probe at the steered layer sees; bad files named.
#include "models/steering.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "common/test_util.h"
#include "engine/llm.h"
#include "models/checkpoint.h"
#include "models/llama_model.h"
#include "worker/sampler.h"

namespace uc {
namespace {

using testing::JsonFloats;
using testing::JsonInts;
using testing::TestData;

std::string ModelPath() { return std::string(UC_SOURCE_DIR) + "/models/stories260K"; }

// The steering a reference case describes.
models::SteeringOptions OptionsOf(const nlohmann::json& c) {
  models::SteeringOptions o;
  for (const auto& v : c["vectors"]) {
    o.files.push_back({TestData("steering/" + v["file"].get<std::string>()), v["scale"]});
  }
  if (!c["layer_range"].is_null()) {
    o.layer_start = c["layer_range"][0];
    o.layer_end = c["layer_range"][1];
  }
  return o;
}

class SteeringTest : public ::testing::Test {
 protected:
  void SetUp() override {
    reference_ = testing::LoadJson(TestData("steering/reference.json"));
    ASSERT_FALSE(reference_.is_null());
    auto ckpt = models::OpenCheckpoint(ModelPath());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    checkpoint_ = *ckpt;
  }

  std::unique_ptr<models::CausalLM> Load(const models::SteeringOptions& steering) {
    auto model = models::CausalLM::Load(checkpoint_, models::LoadOptions{.steering = steering});
    EXPECT_TRUE(model.ok()) << model.status().ToString();
    return model.ok() ? std::move(model).value() : nullptr;
  }

  models::Checkpoint checkpoint_;
  nlohmann::json reference_;
  ThreadPool pool_{2};
};

TEST_F(SteeringTest, LogitsAndGreedyMatchTransformersWithTheSameHooks) {
  const std::vector<int32_t> ids = JsonInts(reference_["input_ids"]);
  const int n = static_cast<int>(ids.size());
  std::vector<int32_t> positions(ids.size());
  for (int i = 0; i < n; ++i) positions[i] = i;
  for (const auto& c : reference_["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    std::unique_ptr<models::CausalLM> model = Load(OptionsOf(c));
    ASSERT_NE(model, nullptr);
    const int64_t vocab = model->config().vocab_size;
    const std::vector<int32_t> greedy = JsonInts(c["greedy"]);
    models::KvCache cache = model->NewKvCache(n + static_cast<int>(greedy.size()));
    Tensor logits = Tensor::Empty({n, vocab}, DType::kF32);
    model->Forward(ids, positions, cache, true, logits, &pool_);
    double worst = 0.0;
    for (int p = 0; p < n; ++p) {
      const std::vector<float> expected = JsonFloats(c["logits"][p]);
      const float* row = logits.data<float>() + p * vocab;
      for (int64_t v = 0; v < vocab; ++v) {
        worst = std::max(worst, double{std::fabs(row[v] - expected[v])});
      }
    }
    EXPECT_LE(worst, 1e-4);
    // Greedy continuation, one token at a time from the last prompt position.
    std::vector<int32_t> generated;
    int32_t next = worker::Sampler::Argmax(
        {logits.data<float>() + (n - 1) * vocab, static_cast<size_t>(vocab)});
    Tensor step = Tensor::Empty({1, vocab}, DType::kF32);
    for (size_t s = 0; s < greedy.size(); ++s) {
      generated.push_back(next);
      const int32_t pos = n + static_cast<int32_t>(s);
      model->Forward({&next, 1}, {&pos, 1}, cache, false, step, &pool_);
      next = worker::Sampler::Argmax({step.data<float>(), static_cast<size_t>(vocab)});
    }
    EXPECT_EQ(generated, greedy);
  }
  // The cases differ from each other: the vectors do steer.
  EXPECT_NE(JsonInts(reference_["cases"][0]["greedy"]), JsonInts(reference_["cases"][1]["greedy"]));
}

// The serving engine with control vectors (every request steered) generates the reference's
// greedy continuation for each case, several requests batched together.
TEST_F(SteeringTest, EngineGeneratesTheSteeredContinuations) {
  const std::vector<int32_t> ids = JsonInts(reference_["input_ids"]);
  for (const auto& c : reference_["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    engine::EngineOptions options;
    options.model_path = ModelPath();
    options.num_threads = 2;
    options.max_model_len = 64;
    options.max_prefill_chunk = 8;
    options.load.steering = OptionsOf(c);
    auto llm = engine::LLM::Open(options);
    ASSERT_TRUE(llm.ok()) << llm.status().ToString();
    const std::vector<int32_t> greedy = JsonInts(c["greedy"]);
    std::vector<engine::GenerateRequest> requests;
    for (int r = 0; r < 3; ++r) {
      requests.push_back({"r" + std::to_string(r), engine::Prompt::Ids(ids),
                          testing::Greedy(static_cast<int>(greedy.size()))});
    }
    for (const engine::GenerateResult& r : (*llm)->Generate(requests)) {
      ASSERT_TRUE(r.status.ok()) << r.status.ToString();
      EXPECT_EQ(r.output.output_ids, greedy) << r.id;
    }
  }
}

// Records the residual stream and the MLP output of one layer.
class RecordLayer : public models::ForwardHooks {
 public:
  explicit RecordLayer(int layer) : layer_(layer) {}
  bool Wants(models::TapPoint point) const override {
    return point.layer == layer_ || point.layer == layer_ - 1;
  }
  void Observe(models::TapPoint point, std::span<const int32_t>,
               const Tensor& activation) override {
    records[{point.layer, point.site}] = activation.ToFloatVector();
  }
  std::map<std::pair<int, models::Site>, std::vector<float>> records;

 private:
  int layer_;
};

// What probes at the steered block see: its residual stream includes the vector (resid(l) =
// resid(l-1) + attn_out(l) + mlp_out(l) + v), its attn_out and mlp_out do not.
TEST_F(SteeringTest, ProbeAtTheSteeredLayerSeesTheVectorInTheResidualStreamOnly) {
  const std::string file = TestData("steering/vectors_a.gguf");
  auto vectors = models::ReadControlVectorFile(file, 64, 5);
  ASSERT_TRUE(vectors.ok()) << vectors.status().ToString();
  ASSERT_EQ(vectors->count(3), 1u);
  const std::vector<float>& v = vectors->at(3);
  models::SteeringOptions steering;
  steering.files.push_back({file, 2.0f});
  std::unique_ptr<models::CausalLM> plain = Load({});
  std::unique_ptr<models::CausalLM> steered = Load(steering);
  ASSERT_TRUE(plain && steered);
  const std::vector<int32_t> ids = JsonInts(reference_["input_ids"]);
  std::vector<int32_t> positions(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) positions[i] = static_cast<int32_t>(i);
  auto record = [&](models::CausalLM& model) {
    RecordLayer hooks(3);
    models::KvCache cache = model.NewKvCache(static_cast<int>(ids.size()));
    Tensor logits = Tensor::Empty({1, model.config().vocab_size}, DType::kF32);
    model.Forward(ids, positions, cache, false, logits, &pool_, &hooks);
    return hooks.records;
  };
  const auto a = record(*plain);
  const auto s = record(*steered);
  using models::Site;
  const auto& prev = s.at({2, Site::kResidPost});
  const auto& attn = s.at({3, Site::kAttnOut});
  const auto& mlp = s.at({3, Site::kMlpOut});
  const auto& resid = s.at({3, Site::kResidPost});
  ASSERT_EQ(resid.size(), prev.size());
  // The unsteered model's stream differs (vectors_a also steers block 1).
  EXPECT_NE(resid, a.at({3, Site::kResidPost}));
  double err = 0.0;
  for (size_t i = 0; i < resid.size(); ++i) {
    const double sum = double{prev[i]} + attn[i] + mlp[i] + 2.0 * v[i % v.size()];
    err = std::max(err, std::fabs(sum - resid[i]));
  }
  EXPECT_LE(err, 1e-4);
}

TEST(SteeringFilesTest, BadFilesAreNamedWithWhatIsWrong) {
  auto message = [](const std::filesystem::path& path, int hidden = 64, int layers = 5) {
    auto read = models::ReadControlVectorFile(path, hidden, layers);
    EXPECT_FALSE(read.ok()) << path;
    return read.ok() ? std::string() : read.status().message();
  };
  const std::filesystem::path dir = testing::ScratchDir("steering_files");
  EXPECT_EQ(message(TestData("steering/bad_hidden.gguf")),
            TestData("steering/bad_hidden.gguf").string() +
                ": tensor 'direction.2' has 48 values; the model's hidden size is 64");
  EXPECT_NE(message(TestData("steering/vectors_a.gguf"), 64, 2).find("is for block 3"),
            std::string::npos);
  EXPECT_NE(message(TestData("stories260K/stories260K.gguf")).find("architecture 'llama'"),
            std::string::npos);
  EXPECT_NE(message(TestData("steering/vectors_c.npy"), 32).find("array shape (5, 64)"),
            std::string::npos);
  const std::filesystem::path txt = dir / "vector.txt";
  std::ofstream(txt) << "1 2 3\n";
  EXPECT_NE(message(txt).find("unknown control vector format '.txt'"), std::string::npos);
  const std::filesystem::path npy = dir / "not.npy";
  std::ofstream(npy) << "not numpy";
  EXPECT_NE(message(npy).find("not a .npy file"), std::string::npos);
  EXPECT_NE(message(dir / "missing.gguf").find("missing.gguf"), std::string::npos);
  // A range outside the model.
  models::SteeringOptions range;
  range.files.push_back({TestData("steering/vectors_a.gguf"), 1.0f});
  range.layer_start = 2;
  range.layer_end = 7;
  auto loaded = models::LoadControlVectors(range, 64, 5);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("[2, 7]"), std::string::npos);
}

TEST(SteeringFilesTest, ScalesAddUpAndTheRangeKeepsItsBlocks) {
  models::SteeringOptions o;
  o.files.push_back({TestData("steering/vectors_a.gguf"), 0.5f});
  o.files.push_back({TestData("steering/vectors_a.gguf"), 1.5f});
  o.files.push_back({TestData("steering/vectors_b.safetensors"), -1.0f});
  o.layer_start = 2;
  auto sum = models::LoadControlVectors(o, 64, 5);
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();
  auto a = models::ReadControlVectorFile(TestData("steering/vectors_a.gguf"), 64, 5);
  auto b = models::ReadControlVectorFile(TestData("steering/vectors_b.safetensors"), 64, 5);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(sum->size(), 2u);  // block 1 is outside [2, 4]; blocks 2 and 3 remain
  for (int i = 0; i < 64; ++i) {
    EXPECT_FLOAT_EQ(sum->at(2)[i], -b->at(2)[i]);
    EXPECT_FLOAT_EQ(sum->at(3)[i], 0.5f * a->at(3)[i] + 1.5f * a->at(3)[i] - b->at(3)[i]);
  }
}

}  // namespace
}  // namespace uc
