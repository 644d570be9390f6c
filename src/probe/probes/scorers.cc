#include "probe/probes/scorers.h"

#include <cmath>
#include <span>
#include <utility>

#include "base/check.h"
#include "probe/probes/trained/artifact.h"
#include "probe/probes/trained/weights.h"

namespace uc::probe {

namespace {

void CheckLength(const ActivationRecord& record, size_t expected) {
  UC_CHECK(record.values.size() == expected,
           "probe weights hold %zu values but the activation of point '%s' (layer %d) has %zu",
           expected, record.point.c_str(), record.layer, record.values.size());
}

// s = w·x + b, or the mean of x when w is empty; then optionally sigmoid(s).
class LinearScorer : public Scorer {
 public:
  LinearScorer(std::vector<float> weight, double bias, bool sigmoid)
      : weight_(std::move(weight)), bias_(bias), sigmoid_(sigmoid) {}

  std::optional<double> Score(const ActivationRecord& record) const override {
    double s;
    if (weight_.empty()) {
      s = 0.0;
      for (const float x : record.values) s += x;
      s = record.values.empty() ? 0.0 : s / static_cast<double>(record.values.size());
    } else {
      CheckLength(record, weight_.size());
      s = ScoreDot(weight_, record.values) + bias_;
    }
    return sigmoid_ ? Sigmoid(s) : s;
  }

 private:
  std::vector<float> weight_;  // [hidden_size], or empty: the mean
  double bias_;
  bool sigmoid_;
};

enum class Activation { kRelu, kGelu, kTanh };

double Apply(Activation act, double x) {
  switch (act) {
    case Activation::kRelu:
      return x > 0 ? x : 0.0;
    case Activation::kGelu:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case Activation::kTanh:
      return std::tanh(x);
  }
  return x;
}

// s = fc2(act(fc1(x))); fc2 has one output.
class MlpScorer : public Scorer {
 public:
  MlpScorer(DenseWeights fc1, DenseWeights fc2, Activation act, bool sigmoid)
      : fc1_(std::move(fc1)), fc2_(std::move(fc2)), act_(act), sigmoid_(sigmoid) {}

  std::optional<double> Score(const ActivationRecord& record) const override {
    CheckLength(record, static_cast<size_t>(fc1_.in_features));
    const std::span<const float> w1(fc1_.weight);
    double s = fc2_.bias[0];
    for (int64_t j = 0; j < fc1_.out_features; ++j) {
      const auto row = w1.subspan(static_cast<size_t>(j * fc1_.in_features),
                                  static_cast<size_t>(fc1_.in_features));
      s += fc2_.weight[static_cast<size_t>(j)] *
           Apply(act_, ScoreDot(row, record.values) + fc1_.bias[j]);
    }
    return sigmoid_ ? Sigmoid(s) : s;
  }

 private:
  DenseWeights fc1_;  // [d, hidden_size]
  DenseWeights fc2_;  // [1, d]
  Activation act_;
  bool sigmoid_;
};

class NormScorer : public Scorer {
 public:
  std::optional<double> Score(const ActivationRecord& record) const override {
    return std::sqrt(ScoreDot(record.values, record.values));
  }
};

class CosineScorer : public Scorer {
 public:
  // REQUIRES: direction has a non-zero norm.
  explicit CosineScorer(std::vector<float> direction)
      : direction_(std::move(direction)), norm_(std::sqrt(ScoreDot(direction_, direction_))) {}

  std::optional<double> Score(const ActivationRecord& record) const override {
    CheckLength(record, direction_.size());
    const double x_norm = std::sqrt(ScoreDot(record.values, record.values));
    if (x_norm == 0.0) return 0.0;
    return ScoreDot(direction_, record.values) / (x_norm * norm_);
  }

 private:
  std::vector<float> direction_;  // [hidden_size]
  double norm_;
};

}  // namespace

// Accumulates in double: activations reach thousands of elements and the scores are compared
// with thresholds, so float rounding would make verdicts depend on summation order.
double ScoreDot(std::span<const float> a, std::span<const float> b) {
  double sum = 0.0;
  for (size_t i = 0; i < a.size(); ++i) sum += static_cast<double>(a[i]) * b[i];
  return sum;
}

double Sigmoid(double z) {
  if (z >= 0) return 1.0 / (1.0 + std::exp(-z));
  const double e = std::exp(z);
  return e / (1.0 + e);
}

StatusOr<VectorWeights> LoadVectorArg(const ProbeArgs& args, std::string_view key,
                                      const ProbeEnv& env, const std::vector<std::string>& names) {
  UC_ASSIGN_OR_RETURN(std::filesystem::path path, args.File(key, env));
  StatusOr<VectorWeights> loaded = LoadVectorWeights(path, names);
  if (!loaded.ok()) return args.Error(key, loaded.status().message());
  if (Status checked = CheckArtifact(loaded->metadata, path, env); !checked.ok()) {
    return args.Error(key, checked.message());
  }
  const size_t n = loaded->weight.size();
  if (env.hidden_size > 0 && n != static_cast<size_t>(env.hidden_size)) {
    return args.Error(key, path.string() + " holds " + std::to_string(n) +
                               " values, but the activations have hidden_size " +
                               std::to_string(env.hidden_size));
  }
  return loaded;
}

// The linear scorer of args weights / bias / sigmoid; with `optional_weights` and no weights,
// the mean scorer.
StatusOr<std::shared_ptr<const Scorer>> LinearScorerFromArgs(const ProbeArgs& args,
                                                             const ProbeEnv& env,
                                                             bool optional_weights) {
  UC_ASSIGN_OR_RETURN(bool sigmoid, args.Bool("sigmoid", false));
  UC_ASSIGN_OR_RETURN(std::optional<double> bias, args.OptionalNumber("bias"));
  VectorWeights weights;
  if (!optional_weights || args.Has("weights")) {
    UC_ASSIGN_OR_RETURN(weights, LoadVectorArg(args, "weights", env, {"weight"}));
  } else if (bias) {
    return args.Error("bias", "needs 'weights' (without them the score is the activation mean)");
  }
  const double b = bias ? *bias : weights.bias.value_or(0.0);
  return std::shared_ptr<const Scorer>(
      std::make_shared<LinearScorer>(std::move(weights.weight), b, sigmoid));
}

// Reads and cross-checks the two layers of an mlp probe.
StatusOr<std::shared_ptr<const Scorer>> MlpScorerFromArgs(const ProbeArgs& args,
                                                          const ProbeEnv& env) {
  UC_ASSIGN_OR_RETURN(std::filesystem::path path, args.File("weights", env));
  if (path.extension() != ".safetensors") {
    return args.Error("weights", path.string() + ": an mlp probe reads a .safetensors file");
  }
  UC_ASSIGN_OR_RETURN(std::string fc1_name, args.String("fc1", "fc1"));
  UC_ASSIGN_OR_RETURN(std::string fc2_name, args.String("fc2", "fc2"));
  StatusOr<std::shared_ptr<const io::SafetensorsFile>> file = io::SafetensorsFile::Open(path);
  if (!file.ok()) return args.Error("weights", file.status().message());
  if (Status checked = CheckArtifact((*file)->metadata(), path, env); !checked.ok()) {
    return args.Error("weights", checked.message());
  }
  StatusOr<DenseWeights> fc1 = ReadDense(**file, fc1_name);
  if (!fc1.ok()) return args.Error("weights", fc1.status().message());
  StatusOr<DenseWeights> fc2 = ReadDense(**file, fc2_name);
  if (!fc2.ok()) return args.Error("weights", fc2.status().message());
  const std::string where = path.string() + ": ";
  if (env.hidden_size > 0 && fc1->in_features != env.hidden_size) {
    return args.Error("weights", where + "'" + fc1_name + ".weight' takes " +
                                     std::to_string(fc1->in_features) +
                                     " inputs, but the activations have hidden_size " +
                                     std::to_string(env.hidden_size));
  }
  if (fc2->in_features != fc1->out_features || fc2->out_features != 1) {
    return args.Error("weights", where + "'" + fc2_name + ".weight' has shape [" +
                                     std::to_string(fc2->out_features) + ", " +
                                     std::to_string(fc2->in_features) + "], expected [1, " +
                                     std::to_string(fc1->out_features) + "]");
  }
  UC_ASSIGN_OR_RETURN(std::string act, args.Choice("activation", {"relu", "gelu", "tanh"}, "relu"));
  UC_ASSIGN_OR_RETURN(bool sigmoid, args.Bool("sigmoid", false));
  const Activation activation = act == "relu"   ? Activation::kRelu
                                : act == "gelu" ? Activation::kGelu
                                                : Activation::kTanh;
  return std::shared_ptr<const Scorer>(
      std::make_shared<MlpScorer>(std::move(*fc1), std::move(*fc2), activation, sigmoid));
}

StatusOr<std::shared_ptr<const Scorer>> CosineScorerFromArgs(const ProbeArgs& args,
                                                             const ProbeEnv& env) {
  UC_ASSIGN_OR_RETURN(VectorWeights direction,
                      LoadVectorArg(args, "direction", env, {"direction", "weight"}));
  if (ScoreDot(direction.weight, direction.weight) == 0.0) {
    return args.Error("direction", "the direction vector is all zeros");
  }
  return std::shared_ptr<const Scorer>(std::make_shared<CosineScorer>(std::move(direction.weight)));
}

std::shared_ptr<const Scorer> MakeNormScorer() { return std::make_shared<NormScorer>(); }

}  // namespace uc::probe
