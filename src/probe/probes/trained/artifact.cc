#include "probe/probes/trained/artifact.h"

#include <algorithm>

#include "base/logging.h"

namespace uc::probe {

using nlohmann::json;

namespace {

// The fields of two model fingerprints that differ, "name theirs, here ours"; the context
// length (max_model_len) is a serving choice, not the model.
std::string ModelDifferences(const json& trained, const json& here) {
  std::string out;
  for (const auto& [key, value] : trained.items()) {
    if (key == "max_model_len" || !here.contains(key) || here[key] == value) continue;
    out += (out.empty() ? "" : ", ") + key + " " + value.dump() + ", here " + here[key].dump();
  }
  return out;
}

void Append(std::string& all, const std::string& one) {
  if (!one.empty()) all += (all.empty() ? "" : "; ") + one;
}

}  // namespace

std::string ArtifactMismatches(const std::map<std::string, std::string>& metadata,
                               const ProbeEnv& env) {
  std::string out;
  const auto model = metadata.find("model");
  if (model != metadata.end() && env.model_fingerprint.is_object()) {
    const json trained = json::parse(model->second, nullptr, /*allow_exceptions=*/false);
    if (trained.is_object()) {
      const std::string diff = ModelDifferences(trained, env.model_fingerprint);
      if (!diff.empty()) Append(out, "trained on another model (" + diff + ")");
    }
  }
  if (env.point == nullptr) return out;
  const auto layers = metadata.find("layers");
  if (layers != metadata.end()) {
    const json trained = json::parse(layers->second, nullptr, /*allow_exceptions=*/false);
    if (trained.is_array()) {
      for (int layer : env.point->layers) {
        if (std::find(trained.begin(), trained.end(), json(layer)) == trained.end()) {
          Append(out, "trained on layers " + trained.dump() + ", deployed at layer " +
                          std::to_string(layer));
          break;
        }
      }
    }
  }
  const auto site = metadata.find("tensor_type");
  if (site != metadata.end() && site->second != Name(env.point->tensor_type)) {
    Append(out, "trained on " + site->second + ", deployed on " +
                    std::string(Name(env.point->tensor_type)));
  }
  return out;
}

Status CheckArtifact(const std::map<std::string, std::string>& metadata,
                     const std::filesystem::path& file, const ProbeEnv& env) {
  if (env.artifact_policy == ArtifactPolicy::kIgnore) return OkStatus();
  const std::string mismatches = ArtifactMismatches(metadata, env);
  if (mismatches.empty()) return OkStatus();
  if (env.artifact_policy == ArtifactPolicy::kRefuse) {
    return InvalidArgumentError(file.string() + ": " + mismatches +
                                " (--probe-artifact-policy refuse; 'warn' loads it anyway)");
  }
  UC_LOG(WARNING) << file.string() << ": " << mismatches
                  << "; loading it anyway (--probe-artifact-policy refuse stops here)";
  return OkStatus();
}

StatusOr<ArtifactPolicy> ParseArtifactPolicy(const std::string& name) {
  if (name == "ignore") return ArtifactPolicy::kIgnore;
  if (name == "warn") return ArtifactPolicy::kWarn;
  if (name == "refuse") return ArtifactPolicy::kRefuse;
  return InvalidArgumentError("probe artifact policy '" + name +
                              "': expected 'ignore', 'warn' or 'refuse'");
}

}  // namespace uc::probe
