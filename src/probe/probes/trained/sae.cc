#include "probe/probes/trained/sae.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "base/check.h"
#include "io/json_file.h"
#include "io/safetensors/safetensors.h"
#include "models/forward_hooks.h"
#include "probe/probes/probe_args.h"
#include "probe/probes/score_probe.h"

namespace uc::probe {

using nlohmann::json;

namespace {

Status Bad(const std::filesystem::path& file, const std::string& message) {
  return InvalidArgumentError(file.string() + ": " + message);
}

// The F32 tensor `name` with `shape`, as floats.
StatusOr<std::vector<float>> Read(const io::SafetensorsFile& file, const std::string& name,
                                  const Shape& shape) {
  if (!file.Has(name)) return Bad(file.path(), "no tensor '" + name + "'");
  UC_ASSIGN_OR_RETURN(Tensor t, file.Get(name));
  if (t.shape() != shape) {
    return Bad(file.path(), "tensor '" + name + "' has shape " + ShapeToString(t.shape()) +
                                ", expected " + ShapeToString(shape) +
                                " (d_in, d_sae of cfg.json)");
  }
  return t.ToFloatVector();
}

double Dot(std::span<const float> a, std::span<const double> b) {
  double sum = 0.0;
  for (size_t i = 0; i < a.size(); ++i) sum += static_cast<double>(a[i]) * b[i];
  return sum;
}

}  // namespace

StatusOr<std::shared_ptr<const SaeEncoder>> SaeEncoder::Load(const std::filesystem::path& dir,
                                                             std::vector<int64_t> features) {
  const std::filesystem::path cfg_path = dir / "cfg.json";
  UC_ASSIGN_OR_RETURN(json cfg, io::ReadJsonFile(cfg_path));
  std::shared_ptr<SaeEncoder> sae(new SaeEncoder());
  const auto integer = [&](const char* key) -> StatusOr<int64_t> {
    if (!cfg.contains(key) || !cfg[key].is_number_integer() || cfg[key].get<int64_t>() <= 0) {
      return Bad(cfg_path, std::string("'") + key + "' must be a positive integer");
    }
    return cfg[key].get<int64_t>();
  };
  UC_ASSIGN_OR_RETURN(sae->d_in_, integer("d_in"));
  UC_ASSIGN_OR_RETURN(sae->d_sae_, integer("d_sae"));
  for (const json* holder :
       {&cfg,
        cfg.contains("metadata") && cfg["metadata"].is_object() ? &cfg["metadata"] : nullptr}) {
    if (holder == nullptr) continue;
    if (holder->contains("hook_name") && (*holder)["hook_name"].is_string()) {
      sae->hook_name_ = (*holder)["hook_name"].get<std::string>();
    }
    if (holder->contains("hook_layer") && (*holder)["hook_layer"].is_number_integer()) {
      sae->hook_layer_ = (*holder)["hook_layer"].get<int>();
    }
  }
  const std::string arch = cfg.value("architecture", "standard");
  if (arch == "standard") {
    sae->architecture_ = Architecture::kStandard;
  } else if (arch == "jumprelu") {
    sae->architecture_ = Architecture::kJumpRelu;
  } else if (arch == "topk") {
    sae->architecture_ = Architecture::kTopK;
    UC_ASSIGN_OR_RETURN(sae->k_, integer("k"));
    if (sae->k_ > sae->d_sae_) return Bad(cfg_path, "'k' exceeds d_sae");
  } else {
    return Bad(cfg_path,
               "architecture '" + arch + "' is not supported (standard, jumprelu or topk)");
  }
  for (const char* key : {"normalize_activations", "reshape_activations"}) {
    const std::string value = cfg.value(key, "none");
    if (value != "none") {
      return Bad(cfg_path,
                 std::string("'") + key + "' is '" + value + "'; only 'none' is supported");
    }
  }
  if (features.empty()) return InvalidArgumentError("no features named");
  for (const int64_t f : features) {
    if (f < 0 || f >= sae->d_sae_) {
      return InvalidArgumentError("feature " + std::to_string(f) + " is out of range: " +
                                  dir.string() + " has " + std::to_string(sae->d_sae_));
    }
  }
  sae->features_ = std::move(features);

  const std::filesystem::path weights_path = dir / "sae_weights.safetensors";
  UC_ASSIGN_OR_RETURN(auto file, io::SafetensorsFile::Open(weights_path));
  const int64_t d_in = sae->d_in_, d_sae = sae->d_sae_;
  sae->b_dec_.assign(static_cast<size_t>(d_in), 0.0f);
  if (cfg.value("apply_b_dec_to_input", true)) {
    UC_ASSIGN_OR_RETURN(sae->b_dec_, Read(*file, "b_dec", {d_in}));
  }
  UC_ASSIGN_OR_RETURN(std::vector<float> b_enc, Read(*file, "b_enc", {d_sae}));
  if (!file->Has("W_enc")) return Bad(weights_path, "no tensor 'W_enc'");
  UC_ASSIGN_OR_RETURN(Tensor w_enc, file->Get("W_enc"));
  if (w_enc.shape() != Shape{d_in, d_sae} || w_enc.dtype() != DType::kF32) {
    return Bad(weights_path, "tensor 'W_enc' is " + std::string(DTypeName(w_enc.dtype())) + " " +
                                 ShapeToString(w_enc.shape()) + ", expected F32 [" +
                                 std::to_string(d_in) + ", " + std::to_string(d_sae) + "]");
  }
  const float* w = w_enc.data<float>();
  if (sae->architecture_ == Architecture::kTopK) {
    sae->w_enc_.assign(w, w + d_in * d_sae);
    sae->b_enc_ = std::move(b_enc);
    if (cfg.value("rescale_acts_by_decoder_norm", false)) {
      UC_ASSIGN_OR_RETURN(std::vector<float> w_dec, Read(*file, "W_dec", {d_sae, d_in}));
      sae->scale_.resize(static_cast<size_t>(d_sae));
      for (int64_t f = 0; f < d_sae; ++f) {
        double sum = 0.0;
        for (int64_t i = 0; i < d_in; ++i) {
          const double v = w_dec[static_cast<size_t>(f * d_in + i)];
          sum += v * v;
        }
        sae->scale_[static_cast<size_t>(f)] = std::sqrt(sum);
      }
    }
    return std::shared_ptr<const SaeEncoder>(std::move(sae));
  }
  // Only the named columns of W_enc (and entries of b_enc, threshold) are read.
  const auto n = static_cast<int64_t>(sae->features_.size());
  sae->w_enc_.resize(static_cast<size_t>(n * d_in));
  for (int64_t j = 0; j < n; ++j) {
    const int64_t f = sae->features_[static_cast<size_t>(j)];
    for (int64_t i = 0; i < d_in; ++i)
      sae->w_enc_[static_cast<size_t>(j * d_in + i)] = w[i * d_sae + f];
    sae->b_enc_.push_back(b_enc[static_cast<size_t>(f)]);
  }
  if (sae->architecture_ == Architecture::kJumpRelu) {
    UC_ASSIGN_OR_RETURN(std::vector<float> threshold, Read(*file, "threshold", {d_sae}));
    for (const int64_t f : sae->features_)
      sae->threshold_.push_back(threshold[static_cast<size_t>(f)]);
  }
  return std::shared_ptr<const SaeEncoder>(std::move(sae));
}

std::vector<double> SaeEncoder::Encode(std::span<const float> x) const {
  UC_CHECK(static_cast<int64_t>(x.size()) == d_in_,
           "SAE input has %zu values, the SAE's d_in is %lld", x.size(),
           static_cast<long long>(d_in_));
  std::vector<double> in(x.size());
  for (size_t i = 0; i < x.size(); ++i) in[i] = static_cast<double>(x[i]) - b_dec_[i];
  std::vector<double> out;
  out.reserve(features_.size());
  if (architecture_ != Architecture::kTopK) {
    for (size_t j = 0; j < features_.size(); ++j) {
      const std::span<const float> column(w_enc_.data() + j * static_cast<size_t>(d_in_),
                                          static_cast<size_t>(d_in_));
      const double pre = Dot(column, in) + b_enc_[j];
      const bool open = architecture_ == Architecture::kStandard || pre > threshold_[j];
      out.push_back(open && pre > 0.0 ? pre : 0.0);
    }
    return out;
  }
  // TopK: every pre-activation, then the k largest (ReLU'd); the named ones are read off.
  std::vector<double> pre(b_enc_.begin(), b_enc_.end());
  for (int64_t i = 0; i < d_in_; ++i) {
    const double xi = in[static_cast<size_t>(i)];
    const float* row = w_enc_.data() + i * d_sae_;
    for (int64_t f = 0; f < d_sae_; ++f) pre[static_cast<size_t>(f)] += xi * row[f];
  }
  if (!scale_.empty()) {
    for (size_t f = 0; f < pre.size(); ++f) pre[f] *= scale_[f];
  }
  std::vector<double> sorted = pre;
  std::nth_element(sorted.begin(), sorted.begin() + (k_ - 1), sorted.end(), std::greater<>());
  const double kth = sorted[static_cast<size_t>(k_ - 1)];
  for (const int64_t f : features_) {
    const double p = pre[static_cast<size_t>(f)];
    out.push_back(p >= kth && p > 0.0 ? p : 0.0);
  }
  return out;
}

namespace {

class SaeScorer : public Scorer {
 public:
  SaeScorer(std::shared_ptr<const SaeEncoder> sae, bool sum) : sae_(std::move(sae)), sum_(sum) {}
  std::optional<double> Score(const ActivationRecord& record) const override {
    const std::vector<double> f = sae_->Encode(record.values);
    if (sum_) {
      double total = 0.0;
      for (double v : f) total += v;
      return total;
    }
    return *std::max_element(f.begin(), f.end());
  }

 private:
  std::shared_ptr<const SaeEncoder> sae_;
  bool sum_;
};

std::string TypeName(TensorType t) { return std::string(Name(t)); }

// The SAE's hook (cfg.json) against where `point` captures: an error message naming both, or
// "" when they agree or the SAE does not say.
std::string PlacementProblem(const SaeEncoder& sae, const std::filesystem::path& dir,
                             const ExtractionPoint& point) {
  if (sae.hook_name().empty()) return "";
  const std::string where = (dir / "cfg.json").string() + " hook_name '" + sae.hook_name() + "'";
  const std::optional<models::TlHookName> hook = models::ParseTransformerLensHook(sae.hook_name());
  if (!hook.has_value()) {
    return where +
           " is not a TransformerLens block hook this engine taps (hook_resid_pre, "
           "hook_resid_mid, hook_resid_post, hook_attn_out, hook_mlp_out of blocks.L)";
  }
  const int layer = hook->layer.value_or(sae.hook_layer());
  if (layer < 0) return where + " names no block and cfg.json has no hook_layer";
  const StatusOr<models::TapPoint> tap = models::TapOfTransformerLensHook(hook->hook, layer);
  if (!tap.ok()) return where + ": " + tap.status().message();
  const TensorType type = tap->site == models::Site::kAttnOut    ? TensorType::kAttnOut
                          : tap->site == models::Site::kMlpOut   ? TensorType::kMlpOut
                          : tap->site == models::Site::kResidMid ? TensorType::kResidMid
                                                                 : TensorType::kResidualStream;
  const std::vector<PointInput> inputs = point.Inputs();
  const bool same = !inputs.empty() && std::all_of(inputs.begin(), inputs.end(), [&](auto& in) {
    return in.layer == tap->layer && in.tensor_type == type;
  });
  if (same) return "";
  std::string captures;
  for (const PointInput& in : inputs) {
    captures += (captures.empty() ? "" : ", ") + TypeName(in.tensor_type) + " of layer " +
                std::to_string(in.layer);
  }
  return where + " is " + TypeName(type) + " of layer " + std::to_string(tap->layer) +
         ", but extraction point '" + point.name + "' captures " + captures +
         " (write tensor_type: " + sae.hook_name() + ")";
}

StatusOr<std::unique_ptr<ProbeType>> MakeSae(const json& raw, const ProbeEnv& env) {
  UC_ASSIGN_OR_RETURN(
      ProbeArgs args,
      ProbeArgs::Parse("sae", raw, {"sae", "features", "score", "threshold", "action"}));
  if (!args.Has("sae") || !args.raw()["sae"].is_string()) {
    return args.Error("sae", "required: the SAELens directory (cfg.json, sae_weights.safetensors)");
  }
  std::filesystem::path dir = args.raw()["sae"].get<std::string>();
  if (dir.is_relative() && !env.base_dir.empty()) dir = env.base_dir / dir;
  const json& listed = args.raw().value("features", json());
  std::vector<int64_t> features;
  if (!listed.is_array() || listed.empty()) {
    return args.Error("features", "required: a non-empty list of feature indices");
  }
  for (const json& f : listed) {
    if (!f.is_number_integer()) {
      return args.Error("features", "expected integers (got " + f.dump() + ")");
    }
    features.push_back(f.get<int64_t>());
  }
  StatusOr<std::shared_ptr<const SaeEncoder>> sae = SaeEncoder::Load(dir, std::move(features));
  if (!sae.ok())
    return args.Error(sae.status().message().find("feature") == 0 ? "features" : "sae",
                      sae.status().message());
  if (env.hidden_size > 0 && (*sae)->d_in() != env.hidden_size) {
    return args.Error("sae", dir.string() + " has d_in " + std::to_string((*sae)->d_in()) +
                                 ", but the activations have hidden_size " +
                                 std::to_string(env.hidden_size));
  }
  if (env.point != nullptr) {
    const std::string problem = PlacementProblem(**sae, dir, *env.point);
    if (!problem.empty()) return args.Error("sae", problem);
  }
  UC_ASSIGN_OR_RETURN(std::string score, args.Choice("score", {"max", "sum"}, "max"));
  ScoreProbeOptions options;
  options.verdict_last_score = true;
  UC_ASSIGN_OR_RETURN(options.threshold, args.OptionalNumber("threshold"));
  UC_ASSIGN_OR_RETURN(options.action, args.Action());
  return MakeScoreProbeType(std::make_shared<SaeScorer>(std::move(sae).value(), score == "sum"),
                            std::move(options));
}

}  // namespace

void RegisterSaeProbe(ProbeRegistry& registry) {
  const Status status =
      registry.Register("sae", ProbeKind::kSingleShot, MakeSae, /*override=*/true);
  UC_CHECK(status.ok(), "registering built-in probe sae: %s", status.ToString().c_str());
}

}  // namespace uc::probe
