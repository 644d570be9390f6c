// Canonical YAML for a Spec: new key names only, defaults omitted, single-element layers as an
// int, strings quoted whenever a YAML 1.1 reader could take them for something else, and
// probe_args as a flow mapping whose floats always carry a '.' (PyYAML reads 1e-05 as a string).
#include <cmath>
#include <regex>

#include "probe/spec/spec.h"
#include "probe/spec/spec_yaml.h"

namespace uc::probe {
namespace {

std::string Quoted(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Plain when every YAML reader takes it back as this string (y/n are booleans in YAML 1.1).
std::string Scalar(const std::string& text) {
  static const std::regex kPlain("[A-Za-z_][A-Za-z0-9_.-]*");
  if (std::regex_match(text, kPlain) &&
      internal::PlainScalarKind(text) == internal::ScalarKind::kString && text != "y" &&
      text != "n" && text != "Y" && text != "N") {
    return text;
  }
  return Quoted(text);
}

std::string Float(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  std::string text = nlohmann::json(v).dump();
  const size_t e = text.find_first_of("eE");
  if (text.find('.') == std::string::npos) {
    text.insert(e == std::string::npos ? text.size() : e, ".0");
  }
  const size_t exp = text.find_first_of("eE");
  if (exp != std::string::npos && text[exp + 1] != '+' && text[exp + 1] != '-') {
    text.insert(exp + 1, "+");
  }
  return text;
}

std::string Flow(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::object: {
      std::string out = "{";
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (out.size() > 1) out += ", ";
        out += Quoted(it.key()) + ": " + Flow(it.value());
      }
      return out + "}";
    }
    case nlohmann::json::value_t::array: {
      std::string out = "[";
      for (const nlohmann::json& item : v) {
        if (out.size() > 1) out += ", ";
        out += Flow(item);
      }
      return out + "]";
    }
    case nlohmann::json::value_t::string:
      return Quoted(v.get<std::string>());
    case nlohmann::json::value_t::number_float:
      return Float(v.get<double>());
    default:
      return v.dump();  // null, booleans, integers
  }
}

std::string Layers(const std::vector<int>& layers) {
  if (layers.size() == 1) return std::to_string(layers[0]);
  std::string out = "[";
  for (size_t i = 0; i < layers.size(); ++i) {
    out += (i > 0 ? ", " : "") + std::to_string(layers[i]);
  }
  return out + "]";
}

std::string Intervention(const InterventionPolicy& policy) {
  std::string out = "{mode: " + std::string(Name(policy.mode));
  if (policy.timeout_ms.has_value()) out += ", timeout_ms: " + std::to_string(*policy.timeout_ms);
  if (policy.on_timeout != OnTimeout::kContinue) {
    out += ", on_timeout: " + std::string(Name(policy.on_timeout));
  }
  return out + "}";
}

std::string Escalation(const EscalationConfig& e) {
  std::string out = "{url: " + Scalar(e.url) + ", timeout_ms: " + std::to_string(e.timeout_ms);
  if (e.on_timeout != OnTimeout::kContinue)
    out += ", on_timeout: " + std::string(Name(e.on_timeout));
  return out + "}";
}

void WritePoint(const ExtractionPoint& p, std::string* out) {
  auto line = [out](std::string_view key, const std::string& value) {
    *out += "    " + std::string(key) + ": " + value + "\n";
  };
  *out += "  - name: " + Scalar(p.name) + "\n";
  line("layers", Layers(p.layers));
  if (p.tensor_types.empty()) {  // resid_mid has only its TransformerLens spelling in a spec
    line("tensor_type", p.tensor_type == TensorType::kResidMid ? std::string("hook_resid_mid")
                                                               : std::string(Name(p.tensor_type)));
  } else {
    std::string types;
    for (TensorType t : p.tensor_types) types += (types.empty() ? "" : ", ") + std::string(Name(t));
    line("tensor_types", "[" + types + "]");
  }
  if (p.combine != Combine::kNone) line("combine", std::string(Name(p.combine)));
  line("position", p.position.kind() == PositionSelector::Kind::kAbsolute
                       ? p.position.ToString()
                       : Quoted(p.position.ToString()));
  if (p.stride.has_value()) line("stride", std::to_string(*p.stride));
  if (p.until.has_value()) line("until", std::string(Name(*p.until)));
  if (p.count.has_value()) line("count", std::to_string(*p.count));
  line("probe_type", Scalar(p.probe_type));
  line("probe_kind", std::string(Name(p.probe_kind)));
  if (p.execution_mode != ExecutionMode::kInline) {
    line("execution_mode", std::string(Name(p.execution_mode)));
  }
  if (p.queue_depth.has_value()) line("queue_depth", std::to_string(*p.queue_depth));
  if (p.overflow_policy.has_value()) {
    line("overflow_policy", std::string(Name(*p.overflow_policy)));
  }
  if (p.intervention.has_value()) line("intervention", Intervention(*p.intervention));
  if (p.escalation.has_value()) line("escalation", Escalation(*p.escalation));
  if (p.probe_args.is_object() && !p.probe_args.empty()) line("probe_args", Flow(p.probe_args));
}

void WriteSteering(const SteeringEntry& s, std::string* out) {
  auto line = [out](std::string_view key, const std::string& value) {
    *out += "    " + std::string(key) + ": " + value + "\n";
  };
  *out += "  - name: " + Scalar(s.name) + "\n";
  line("vector", Scalar(s.vector));
  if (!s.layers.empty()) line("layers", Layers(s.layers));
  if (s.tensor_type != TensorType::kResidualStream) {
    line("tensor_type", std::string(Name(s.tensor_type)));
  }
  if (s.scale != 1.0) line("scale", Float(s.scale));
  if (s.norm_match) line("norm_match", "true");
  if (s.tokens != "all") line("tokens", s.tokens);
  if (s.position.has_value()) line("position", Quoted(s.position->ToString()));
  if (s.when.has_value()) {
    line("when", "{point: " + Scalar(s.when->point) +
                     ", signal: flag, action: " + std::string(Name(s.when->action)) + "}");
  }
}

}  // namespace

std::string WriteSpecYaml(const Spec& spec) {
  std::string out = "version: " + Quoted(spec.version) + "\n";
  if (spec.extraction_points.empty()) {
    out += "extraction_points: []\n";
  } else {
    out += "extraction_points:\n";
    for (const ExtractionPoint& p : spec.extraction_points) WritePoint(p, &out);
  }
  if (!spec.steering.empty()) {
    out += "steering:\n";
    for (const SteeringEntry& s : spec.steering) WriteSteering(s, &out);
  }
  return out;
}

}  // namespace uc::probe
