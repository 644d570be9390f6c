// SAE Lens on GPT-2, end to end, against transformer-lens: SAEs saved by sae-lens for the tiny
// GPT-2 fixture (tests/testdata/arch/gpt2) on blocks.1.hook_resid_pre, placed by the spec from
// the TransformerLens hook name their cfg.json gives, fed the engine's own activations of that
// tap, give the feature activations sae-lens computes on transformer-lens's HookedTransformer of
// the same checkpoint (tools/reference/make_sae_gpt2_reference.py) and fire on the same tokens.
// hook_resid_mid, captured as a tap, equals transformer-lens's blocks.L.hook_resid_mid; on a
// parallel-residual model, which has no such stream, asking for it is a registration error.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "common/test_util.h"
#include "models/checkpoint.h"
#include "models/llama_model.h"
#include "probe/probes/registry.h"
#include "probe/probes/trained/sae.h"
#include "probe/runtime/probing_session.h"
#include "probe/runtime/session_state.h"
#include "probe/spec/spec.h"

namespace uc {
namespace {

using testing::JsonFloats;
using testing::JsonInts;
using testing::TestData;

// Records every tap of one forward call: (site, layer) -> [positions][hidden_size].
class TapRecorder : public models::ForwardHooks {
 public:
  bool Wants(models::TapPoint) const override { return true; }
  void Observe(models::TapPoint point, std::span<const int32_t> positions,
               const Tensor& activation) override {
    auto& rows = taps[{point.site, point.layer}];
    const int64_t h = activation.dim(1);
    for (size_t i = 0; i < positions.size(); ++i) {
      const float* row = activation.data<float>() + static_cast<int64_t>(i) * h;
      if (rows.size() <= static_cast<size_t>(positions[i])) rows.resize(positions[i] + 1);
      rows[positions[i]].assign(row, row + h);
    }
  }
  std::map<std::pair<models::Site, int>, std::vector<std::vector<float>>> taps;
};

double LargestAbs(std::span<const float> v) {
  double m = 0.0;
  for (const float x : v) m = std::max(m, double{std::fabs(x)});
  return m;
}

// A one-point spec capturing `tensor_type` (a TransformerLens hook name) with the SAE probe.
std::string SaeSpec(const std::string& tensor_type, const std::string& sae) {
  return "version: \"1\"\n"
         "extraction_points:\n"
         "  - name: features\n"
         "    tensor_type: " +
         tensor_type +
         "\n"
         "    position: \"prompt[-1]\"\n"
         "    probe_type: sae\n"
         "    probe_kind: single_shot\n"
         "    probe_args: {sae: " +
         sae + ", features: [0, 1]}\n";
}

models::TapPoint TapOf(const probe::ExtractionPoint& p) {
  EXPECT_EQ(p.layers.size(), 1u);
  const std::optional<models::Site> site = probe::session_internal::SiteOf(p.tensor_type);
  EXPECT_TRUE(site.has_value());
  return {p.layers.at(0), site.value_or(models::Site::kResidPost)};
}

class SaeLensGpt2Test : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    reference_ = testing::LoadJson(TestData("probes/sae_gpt2/reference.json"));
    ASSERT_FALSE(reference_.is_null());
    auto ckpt = models::OpenCheckpoint(TestData(GetParam()));
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    checkpoint_ = *ckpt;
    auto model = models::CausalLM::Load(checkpoint_);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(model).value();
    ids_ = JsonInts(reference_["input_ids"]);
    std::vector<int32_t> positions(ids_.size());
    for (size_t i = 0; i < ids_.size(); ++i) positions[i] = static_cast<int32_t>(i);
    models::KvCache cache = model_->NewKvCache(static_cast<int>(ids_.size()));
    Tensor logits = Tensor::Empty({1, model_->config().vocab_size}, DType::kF32);
    model_->Forward(ids_, positions, cache, false, logits, &pool_, &hooks_);
  }

  // The rows the tap of `tensor_type` (the point a spec makes of it, registered with the SAE
  // probe on the model's config: the SAE's placement is checked there) observed.
  const std::vector<std::vector<float>>& Captured(const std::string& tensor_type,
                                                  const std::string& sae) {
    static const std::vector<std::vector<float>> kNone;
    StatusOr<probe::Spec> spec = probe::ParseSpecText(SaeSpec(tensor_type, sae));
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    if (!spec.ok()) return kNone;
    spec->source = TestData("probes/sae_gpt2/spec.yaml");  // SAE paths resolve beside it
    const auto session =
        probe::ProbingSession::Create(*spec, probe::ProbeRegistry::Global(), model_->config());
    EXPECT_TRUE(session.ok()) << session.status().ToString();
    return hooks_
        .taps[{TapOf(spec->extraction_points[0]).site, TapOf(spec->extraction_points[0]).layer}];
  }

  void ExpectRowsMatch(const std::vector<std::vector<float>>& rows, const nlohmann::json& want,
                       const std::string& what) {
    ASSERT_EQ(rows.size(), ids_.size()) << what;
    ASSERT_EQ(want.size(), ids_.size()) << what;
    for (size_t p = 0; p < ids_.size(); ++p) {
      const std::vector<float> expected = JsonFloats(want[p]);
      const auto d = testing::MaxAbsDiff(rows[p], expected);
      EXPECT_LE(d.max_abs, 1e-5 * std::max(1.0, LargestAbs(expected)))
          << what << " position " << p << " element " << d.worst_index;
    }
  }

  nlohmann::json reference_;
  models::Checkpoint checkpoint_;
  std::unique_ptr<models::CausalLM> model_;
  std::vector<int32_t> ids_;
  TapRecorder hooks_;
  ThreadPool pool_{2};
};

// Every feature of every position within 1e-5 of max(|v|, 0.1) of sae-lens's, and the same
// (position, feature) pairs fire (> 0), for the standard, JumpReLU and TopK SAEs.
TEST_P(SaeLensGpt2Test, FeaturesEqualSaeLensOnTransformerLens) {
  for (const std::string arch : {"standard", "jumprelu", "topk"}) {
    const auto& rows = Captured("blocks.1.hook_resid_pre", arch);
    ExpectRowsMatch(rows, reference_["hook_resid_pre"]["1"], "blocks.1.hook_resid_pre");
    const nlohmann::json& want = reference_["saes"][arch]["features"];
    const int64_t d_sae = static_cast<int64_t>(want[0].size());
    std::vector<int64_t> all(d_sae);
    for (int64_t f = 0; f < d_sae; ++f) all[f] = f;
    const auto sae = probe::SaeEncoder::Load(TestData("probes/sae_gpt2/" + arch), all);
    ASSERT_TRUE(sae.ok()) << sae.status().ToString();
    EXPECT_EQ((*sae)->hook_name(), "blocks.1.hook_resid_pre");
    ASSERT_EQ(rows.size(), want.size());
    int fired = 0;
    for (size_t p = 0; p < rows.size(); ++p) {
      const std::vector<double> got = (*sae)->Encode(rows[p]);
      const std::vector<float> expected = JsonFloats(want[p]);
      for (int64_t f = 0; f < d_sae; ++f) {
        EXPECT_LE(std::fabs(got[f] - expected[f]),
                  1e-5 * std::max(double{std::fabs(expected[f])}, 0.1))
            << arch << " position " << p << " feature " << f;
        EXPECT_EQ(got[f] > 0.0, expected[f] > 0.0f) << arch << " position " << p << " feature " << f
                                                    << ": " << got[f] << " vs " << expected[f];
        fired += expected[f] > 0.0f;
      }
    }
    EXPECT_GT(fired, 0) << arch;  // the reference fires: the comparison means something
  }
}

TEST_P(SaeLensGpt2Test, ResidMidEqualsTransformerLens) {
  for (const auto& [layer, want] : reference_["hook_resid_mid"].items()) {
    const std::string hook = "blocks." + layer + ".hook_resid_mid";
    const auto& rows = hooks_.taps[{models::Site::kResidMid, std::stoi(layer)}];
    ExpectRowsMatch(rows, want, hook);
  }
  // The spec's alias resolves to that tap.
  StatusOr<probe::Spec> spec = probe::ParseSpecText(SaeSpec("blocks.1.hook_resid_mid", "x"));
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(TapOf(spec->extraction_points[0]), (models::TapPoint{1, models::Site::kResidMid}));
  EXPECT_EQ(probe::Name(spec->extraction_points[0].tensor_type), "resid_mid");
}

INSTANTIATE_TEST_SUITE_P(Gpt2, SaeLensGpt2Test,
                         ::testing::Values("arch/gpt2", "arch/gpt2/model.gguf"),
                         [](const auto& info) {
                           return std::string(info.index == 0 ? "safetensors" : "gguf");
                         });

// A parallel-residual block (GPT-NeoX) has no stream between attention and MLP.
TEST(ResidMidTest, ParallelResidualModelRefusesIt) {
  auto config = models::ReadCheckpointConfig(TestData("arch/gptneox_parallel"));
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ASSERT_TRUE(config->parallel_residual);
  const std::string text =
      "version: \"1\"\n"
      "extraction_points:\n"
      "  - name: mid\n"
      "    tensor_type: blocks.1.hook_resid_mid\n"
      "    position: \"prompt[-1]\"\n"
      "    probe_type: linear\n"
      "    probe_kind: single_shot\n"
      "    probe_args: {weights: [1.0], bias: 0.0}\n";
  StatusOr<probe::Spec> spec = probe::ParseSpecText(text);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  const auto session =
      probe::ProbingSession::Create(*spec, probe::ProbeRegistry::Global(), *config);
  ASSERT_FALSE(session.ok());
  EXPECT_NE(session.status().message().find("hook_resid_mid does not exist on this model"),
            std::string::npos)
      << session.status().message();
}

}  // namespace
}  // namespace uc
