// The JSON Schema (Draft 2020-12) of the spec format, for editors (VS Code's YAML extension,
// JetBrains) and other tools. It is a subset of what the parser accepts: the parser also takes
// integer strings ("3") and integral floats (3.0) where ints go, as v0.1 does, and the position
// pattern cannot check that a slice's stop is greater than its start, so the parser stays the
// authority.
#include <climits>
#include <cstdint>

#include "probe/spec/spec.h"
#include "probe/spec/spec_util.h"

namespace uc::probe {
namespace {

using Json = nlohmann::ordered_json;

constexpr char kSpace[] = "[ \\t\\n\\r\\f\\v]*";
constexpr char kInt[] = "[0-9]+";

std::string PositionPattern() {
  const std::string n = kInt;
  return std::string("^") + kSpace + "(?:-?" + n + "|prompt\\[-?" + n + "\\](?:[+-]" + n +
         ")?|generated\\[(?:-?" + n + "|\\*|" + n + ":[0-9]*)\\](?:[+-]" + n + ")?)" + kSpace + "$";
}

std::string ContinuousPattern() {
  const std::string n = kInt;
  return std::string("^") + kSpace + "generated\\[(?:\\*|" + n + ":[0-9]*)\\](?:[+-]" + n + ")?" +
         kSpace + "$";
}

template <typename E>
Json EnumDef(const std::string& description) {
  Json values = Json::array();
  for (const std::string_view v : internal::EnumNames<E>()) values.push_back(std::string(v));
  return {{"description", description}, {"type", "string"}, {"enum", values}};
}

Json Ref(const std::string& def) { return {{"$ref", "#/$defs/" + def}}; }

Json Nullable(Json schema) { return {{"anyOf", Json::array({schema, {{"type", "null"}}})}}; }

Json PositiveInt() { return {{"type", "integer"}, {"minimum", 1}, {"maximum", INT_MAX}}; }

Json With(Json schema, const std::string& description, Json extra = Json::object()) {
  schema["description"] = description;
  for (auto it = extra.begin(); it != extra.end(); ++it) schema[it.key()] = it.value();
  return schema;
}

Json LayersSchema() {
  const Json layer = {{"type", "integer"}, {"minimum", 0}, {"maximum", INT_MAX}};
  return {{"anyOf", Json::array({layer, {{"type", "array"}, {"items", layer}, {"minItems", 1}}})}};
}

Json PointProperties() {
  Json p = Json::object();
  p["name"] = {{"type", "string"},
               {"pattern", "\\S"},
               {"description", "Unique name of this extraction point within the spec."}};
  p["layers"] = With(LayersSchema(),
                     "Layer index (0-based) or a non-empty list of them. final_norm is "
                     "addressed as layer num_hidden_layers.");
  p["tensor_type"] =
      With(Ref("TensorType"), "Which tensor to capture at each layer.",
           {{"examples", Json::array({"residual_stream", "mlp_out", "final_norm"})}});
  p["tensor_types"] = With(
      {{"type", "array"}, {"items", Ref("TensorType")}, {"minItems", 1}, {"uniqueItems", true}},
      "Extension, with combine: concat only (instead of tensor_type): several "
      "tensor types read at each layer, in this order.",
      {{"examples", Json::array({Json::array({"residual_stream", "mlp_out"})})}});
  p["combine"] = With({{"type", "string"}, {"enum", Json::array({"none", "concat"})}},
                      "Extension. none: one record per layer. concat: one record per token, the "
                      "rows of every layer (and tensor type) one after the other, layer-major in "
                      "the order written; the probe gets hidden_size times their number.",
                      {{"default", "none"}});
  p["position"] = With(
      {{"anyOf", Json::array({{{"type", "integer"}, {"minimum", INT64_MIN}, {"maximum", INT64_MAX}},
                              {{"type", "string"}, {"pattern", PositionPattern()}}})}},
      "Which token position(s) to capture. One of:\n"
      "- an integer (or integer string): absolute index into prompt + generated tokens, e.g. 5\n"
      "- 'prompt[i]': the i-th prompt token; negative counts from the end ('prompt[-1]' is the "
      "last); past the prompt it never matches\n"
      "- 'generated[i]': the i-th generated token; 'generated[-1]' is the last one (delivered "
      "when the request ends)\n"
      "- 'generated[*]': every generated token (continuous)\n"
      "- 'generated[start:]' or 'generated[start:stop]': generated tokens in [start, stop) "
      "(continuous; stop > start)\n"
      "A bracket form may end in an offset such as '+1' or '-2': 'prompt[-1]+1' is the first "
      "generated token, 'generated[2:]+1' the window shifted by one. 'stride' and 'until' "
      "apply to continuous positions only.",
      {{"examples",
        Json::array({"prompt[-1]", "generated[*]", "generated[5:20]", "prompt[-1]+1", 5})}});
  p["stride"] = With(Nullable(PositiveInt()),
                     "Keep every N-th position of a continuous position's window, counted from "
                     "the window start. Must be >= 1.",
                     {{"default", nullptr}});
  p["until"] = With(Nullable(Ref("Until")),
                    "When a continuous capture stops. Only valid with a continuous position.",
                    {{"default", nullptr}});
  p["count"] = With(Nullable(PositiveInt()),
                    "How many positions to capture with until: fixed_count (only with it). "
                    "Must be >= 1.",
                    {{"default", nullptr}});
  p["probe_type"] = {{"type", "string"},
                     {"pattern", "\\S"},
                     {"description",
                      "Name of the registered probe that consumes these "
                      "activations, e.g. 'linear'."}};
  p["probe_kind"] = With(Ref("ProbeKind"), "The probe's kind; async needs 'trajectory'.",
                         {{"examples", Json::array({"single_shot", "trajectory"})}});
  p["execution_mode"] = With(Ref("ExecutionMode"), "Inline (can abort) or async (observes).",
                             {{"default", "inline"}});
  p["queue_depth"] = With(Nullable(PositiveInt()),
                          "Capacity of this point's async queue. Only valid with "
                          "execution_mode 'async'; omit it for the router's default. >= 1.",
                          {{"default", nullptr}});
  p["overflow_policy"] = With(Nullable(Ref("OverflowPolicy")),
                              "What a full async queue does. Only valid with execution_mode "
                              "'async'; omit it for the router's default.",
                              {{"default", nullptr}});
  p["intervention"] = With(Nullable(Ref("InterventionPolicy")),
                           "Intervention policy of this point; omit it for the router's "
                           "default. Async points may only use mode 'reject'.",
                           {{"default", nullptr}});
  p["escalation"] = With(Nullable(Ref("Escalation")),
                         "Extension: the external classifier asked when this inline point's "
                         "probe signals 'escalate' (probe_args action: escalate). Inline only.",
                         {{"default", nullptr}});
  p["probe_args"] = {{"type", "object"},
                     {"additionalProperties", true},
                     {"description",
                      "Arguments for this point's probe (weights file, "
                      "threshold, ...); relative paths resolve against the "
                      "spec file's directory."}};
  return p;
}

// Deprecated spellings: still accepted (with a warning), hidden from editor suggestions.
void AddDeprecatedAliases(Json* props) {
  for (const auto& [old_key, new_key] : {std::pair<const char*, const char*>{"layer", "layers"},
                                         {"tensor", "tensor_type"},
                                         {"every_n", "stride"}}) {
    Json alias = (*props)[new_key];
    alias.erase("examples");
    alias["description"] = std::string("Deprecated: use '") + new_key + "' instead.";
    alias["deprecated"] = true;
    alias["doNotSuggest"] = true;
    alias["deprecationMessage"] =
        std::string("'") + old_key + "' is deprecated; rename it to '" + new_key + "'.";
    (*props)[old_key] = alias;
  }
}

Json IfPresent(const std::string& key, Json type, Json then) {
  return {{"if", {{"required", Json::array({key})}, {"properties", {{key, type}}}}},
          {"then", then}};
}

Json PointRules() {
  Json rules = Json::array();
  rules.push_back({{"oneOf", Json::array({{{"required", Json::array({"layers"})}},
                                          {{"required", Json::array({"layer"})}}})}});
  rules.push_back({{"oneOf", Json::array({{{"required", Json::array({"tensor_type"})}},
                                          {{"required", Json::array({"tensor"})}},
                                          {{"required", Json::array({"tensor_types"})}}})}});
  rules.push_back(IfPresent("tensor_types", {{"type", "array"}},
                            {{"required", Json::array({"combine"})},
                             {"properties", {{"combine", {{"const", "concat"}}}}}}));
  rules.push_back({{"not", {{"required", Json::array({"stride", "every_n"})}}}});
  const Json async_mode = {{"const", "async"}};
  rules.push_back(IfPresent(
      "execution_mode", async_mode,
      {{"properties",
        {{"probe_kind", {{"const", "trajectory"}}},
         {"intervention",
          {{"anyOf", Json::array({{{"type", "null"}},
                                  {{"properties", {{"mode", {{"const", "reject"}}}}}}})}}},
         {"escalation", {{"type", "null"}}}}}}));
  // probe_args action 'escalate' needs the escalation block.
  rules.push_back({{"if",
                    {{"required", Json::array({"probe_args"})},
                     {"properties",
                      {{"probe_args",
                        {{"required", Json::array({"action"})},
                         {"properties", {{"action", {{"const", "escalate"}}}}}}}}}}},
                   {"then",
                    {{"required", Json::array({"escalation"})},
                     {"properties", {{"escalation", {{"type", "object"}}}}}}}});
  const Json needs_async = {{"required", Json::array({"execution_mode"})},
                            {"properties", {{"execution_mode", async_mode}}}};
  rules.push_back(IfPresent("queue_depth", {{"type", "integer"}}, needs_async));
  rules.push_back(IfPresent("overflow_policy", {{"type", "string"}}, needs_async));
  const Json continuous = {
      {"properties", {{"position", {{"type", "string"}, {"pattern", ContinuousPattern()}}}}}};
  rules.push_back(IfPresent("stride", {{"type", "integer"}}, continuous));
  rules.push_back(IfPresent("every_n", {{"type", "integer"}}, continuous));
  rules.push_back(IfPresent("until", {{"type", "string"}}, continuous));
  rules.push_back(IfPresent("count", {{"type", "integer"}},
                            {{"required", Json::array({"until"})},
                             {"properties", {{"until", {{"const", "fixed_count"}}}}}}));
  return rules;
}

Json PointDef() {
  Json props = PointProperties();
  AddDeprecatedAliases(&props);
  return {
      {"description", "One extraction point: what to capture, where, and which probe consumes it."},
      {"type", "object"},
      {"additionalProperties", false},
      {"required", Json::array({"name", "position", "probe_type", "probe_kind"})},
      {"properties", props},
      {"allOf", PointRules()}};
}

Json InterventionDef() {
  Json props = Json::object();
  props["mode"] = With(Ref("InterventionMode"), "Whether the router waits for the probe.",
                       {{"default", "reject"}});
  props["timeout_ms"] = With(Nullable(PositiveInt()),
                             "How long generation waits for the probe, in milliseconds (>= 1). "
                             "Required for, and only valid with, mode 'block_until_signal'.",
                             {{"default", nullptr}});
  props["on_timeout"] =
      With(Ref("OnTimeout"), "What block_until_signal does when the probe is late or fails.",
           {{"default", "continue"}});
  return {{"description",
           "Intervention policy: whether the router waits for this point's probe before "
           "generation proceeds."},
          {"type", "object"},
          {"additionalProperties", false},
          {"properties", props},
          {"if",
           {{"required", Json::array({"mode"})},
            {"properties", {{"mode", {{"const", "block_until_signal"}}}}}}},
          {"then",
           {{"required", Json::array({"timeout_ms"})},
            {"properties", {{"timeout_ms", {{"type", "integer"}}}}}}},
          {"else",
           {{"properties",
             {{"timeout_ms", {{"type", "null"}}}, {"on_timeout", {{"const", "continue"}}}}}}}};
}

Json EscalationDef() {
  Json props = Json::object();
  props["url"] = {{"type", "string"},
                  {"pattern", "^https?://[^/]"},
                  {"description",
                   "Where the held request is POSTed as JSON {request_id, extraction_point_name, "
                   "token_pos, layer, score, prompt, text, token_ids}; the answer is "
                   "{\"decision\": \"continue\" | \"abort\"}."},
                  {"examples", Json::array({"http://127.0.0.1:8080/classify"})}};
  props["timeout_ms"] = With(PositiveInt(),
                             "How long the request is held at most, in milliseconds (>= 1); "
                             "then on_timeout decides.",
                             {{"examples", Json::array({2000})}});
  props["on_timeout"] = With(Ref("OnTimeout"),
                             "What a late, unreachable or malformed classifier means: 'continue' "
                             "(release the request) or 'abort' it.",
                             {{"default", "continue"}});
  return {{"description",
           "The external classifier of an escalating point: while it decides, the request is "
           "held (no token after the escalated one is released; other requests go on)."},
          {"type", "object"},
          {"additionalProperties", false},
          {"required", Json::array({"url", "timeout_ms"})},
          {"properties", props}};
}

Json Defs() {
  Json defs = Json::object();
  defs["ExecutionMode"] = EnumDef<ExecutionMode>(
      "'inline': runs on the generation path and can abort it. 'async': queued and probed off "
      "the hot path; observes only (trajectory probes only).");
  defs["Escalation"] = EscalationDef();
  defs["ExtractionPoint"] = PointDef();
  defs["InterventionMode"] = EnumDef<InterventionMode>(
      "'reject' (default): no waiting. 'block_until_signal': generation waits up to timeout_ms "
      "for the probe.");
  defs["InterventionPolicy"] = InterventionDef();
  defs["OnTimeout"] = EnumDef<OnTimeout>(
      "What block_until_signal falls back to when timeout_ms elapses or the probe fails: "
      "'continue' generating or 'abort'.");
  defs["OverflowPolicy"] = EnumDef<OverflowPolicy>(
      "What a full async queue does with a new activation: 'drop_oldest' queued one, "
      "'drop_newest' (the new one), or 'block' until there is room.");
  defs["ProbeKind"] = EnumDef<ProbeKind>(
      "'single_shot': decides from one activation (inline only). 'trajectory': keeps state "
      "across activations (inline or async).");
  defs["TensorType"] = EnumDef<TensorType>(
      "'residual_stream' (the residual stream after the layer), 'attn_out', 'mlp_out', 'kv' "
      "(the KV cache), 'final_norm' (the model's final norm output, at layer "
      "num_hidden_layers), or on a mixture-of-experts layer 'router_logits' (the router's "
      "logits before the softmax) or 'expert_weights' (the routing weight of every expert, zero "
      "off the top-k), both num_experts values per token.");
  defs["SteeringEntry"] = {
      {"type", "object"},
      {"additionalProperties", false},
      {"required", Json::array({"name", "vector"})},
      {"properties",
       {{"name", {{"type", "string"}, {"minLength", 1}, {"description", "Unique entry name."}}},
        {"vector",
         {{"type", "string"},
          {"minLength", 1},
          {"description",
           "Control vector file (.gguf as llama.cpp and repeng write, .safetensors with "
           "direction.N tensors, .npy [num_layers, hidden]); relative to the spec's directory."}}},
        {"layers",
         {{"oneOf", Json::array({{{"type", "integer"}, {"minimum", 0}},
                                 {{"type", "array"},
                                  {"minItems", 1},
                                  {"items", {{"type", "integer"}, {"minimum", 0}}}}})},
          {"description", "Only these blocks of the file (default: all it has)."}}},
        {"tensor_type",
         {{"enum", Json::array({"residual_stream", "attn_out", "mlp_out"})},
          {"default", "residual_stream"},
          {"description",
           "Where the vector is added: the residual stream after the block, or what the "
           "attention / MLP block adds to it."}}},
        {"scale", {{"type", "number"}, {"default", 1.0}, {"description", "Multiplier."}}},
        {"norm_match",
         {{"type", "boolean"},
          {"default", false},
          {"description",
           "Rescale per token to scale × ‖residual stream‖ / ‖vector‖ instead of scale × "
           "vector."}}},
        {"tokens",
         {{"enum", Json::array({"all", "prompt", "generated"})},
          {"default", "all"},
          {"description", "Which tokens are steered."}}},
        {"position",
         {{"type", "string"},
          {"description",
           "Only these positions, in the extraction points' selector grammar (\"generated[4:]\", "
           "\"prompt[-1]\", ...); generated[-k] is not allowed."}}},
        {"when",
         {{"type", "object"},
          {"additionalProperties", false},
          {"required", Json::array({"point"})},
          {"properties",
           {{"point",
             {{"type", "string"}, {"description", "An inline extraction point of this spec."}}},
            {"signal", {{"enum", Json::array({"flag"})}, {"default", "flag"}}},
            {"action",
             {{"enum", Json::array({"start", "stop"})},
              {"default", "start"},
              {"description",
               "start: off until the point's probe flags token p, on from token p+1; stop: on "
               "until then, off from token p+1."}}}}},
          {"description", "Conditional steering, token-exact like an abort."}}}}}};
  defs["Until"] = EnumDef<Until>(
      "When a continuous capture stops: at generation end, after 'count' positions "
      "(fixed_count), or at a stop token.");
  return defs;
}

Json Schema() {
  return {{"$schema", "https://json-schema.org/draft/2020-12/schema"},
          {"$id", "https://undercurrent.dev/schema/probe-spec.schema.json"},
          {"title", "Undercurrent probe spec"},
          {"description",
           "Extraction-point spec for Undercurrent: which activations to capture (tensor type, "
           "layers, token positions) during LLM inference, and which probe consumes them, "
           "inline or async. Compatible with Undercurrent v0.1 spec files."},
          {"type", "object"},
          {"additionalProperties", false},
          {"required", Json::array({"extraction_points"})},
          {"properties",
           {{"version",
             {{"type", "string"},
              {"default", "1"},
              {"description", "Spec format version (currently \"1\"); a string."}}},
            {"extraction_points",
             {{"type", "array"},
              {"items", Ref("ExtractionPoint")},
              {"description", "What to capture during inference and which probe consumes it."}}},
            {"steering",
             {{"type", "array"},
              {"items", Ref("SteeringEntry")},
              {"description",
               "Extension: control vectors added to every request's residual stream (or a "
               "block's output), optionally switched on or off by an inline extraction point's "
               "flag from the next token on."}}}}},
          {"$defs", Defs()}};
}

}  // namespace

nlohmann::json SpecJsonSchema() { return nlohmann::json::parse(Schema().dump()); }

std::string SpecJsonSchemaText() { return Schema().dump(2) + "\n"; }

}  // namespace uc::probe
