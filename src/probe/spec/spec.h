// File: spec.h
// -----------------------------------------------------------------------------
// The extraction-point spec: which activations to capture (tensor type, layers, positions) and
// which probe gets them, inline or async. The YAML format is Undercurrent v0.1's, deprecated
// keys `layer`, `tensor`, `every_n` included, plus our extensions `overflow_policy` (async
// queues) and `count` (for until: fixed_count). A spec v0.1 accepts is accepted with the same
// meaning, except where v0.1 takes a value we deliberately refuse:
//   - a YAML boolean where an integer goes (`layers: true`, `stride: yes`, `position: yes`):
//     v0.1 (pydantic's lax mode) silently reads it as 1 or 0; we report it;
//   - integers out of range: layers, stride, queue_depth and timeout_ms must fit in int32,
//     positions in int64 (v0.1 takes Python ints of any size);
//   - non-ASCII digits in a position (`generated[٣]`), which v0.1's regex (\d) takes.
// tests/testdata/spec_compat/manifest.json marks each such case of the compatibility corpus
// (`deliberate_difference`); SpecCompatTest (spec_test.cc) checks every other case gets v0.1's
// verdict, and the validate tests (tests/integration/spec_cli_test.cc) its messages.
//
//   version: "1"
//   extraction_points:
//     - name: toxicity
//       layers: [3, 4]
//       tensor_type: residual_stream
//       position: generated[*]
//       probe_type: linear
//       probe_kind: single_shot
//       probe_args: {weights: probe.safetensors, threshold: 0.9}
//
// Parsing reports every problem at once, sorted by line, each as
//   FILE:LINE: extraction_points[I] 'NAME'.FIELD: MESSAGE
// with a did-you-mean for unknown keys and bad enum values; raw YAML errors never escape.
// Model-dependent checks (layer range, probe types) happen at registration, not here.
// Plain value types.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "probe/spec/position.h"

namespace uc::probe {

// kResidMid (named "resid_mid" in records) is written in a spec only as TransformerLens's
// hook_resid_mid / blocks.L.hook_resid_mid; the plain names are v0.1's five plus the two of
// mixture-of-experts layers: router_logits (the router's pre-softmax logits) and expert_weights
// (the dense routing weights, zero off the top-k), both [num_experts] per token rather than
// [hidden_size]; a session refuses them on a dense model or a layer without experts.
enum class TensorType {
  kResidualStream,
  kAttnOut,
  kMlpOut,
  kKv,
  kFinalNorm,
  kRouterLogits,
  kExpertWeights,
  kResidMid,
};
enum class ProbeKind { kSingleShot, kTrajectory };
enum class ExecutionMode { kInline, kAsync };
enum class Until { kGenerationEnd, kFixedCount, kStopToken };
enum class InterventionMode { kReject, kBlockUntilSignal };
enum class OnTimeout { kContinue, kAbort };
enum class OverflowPolicy { kDropOldest, kDropNewest, kBlock };
enum class Combine { kNone, kConcat };

// Spec spellings: "residual_stream", "single_shot", "block_until_signal", "drop_oldest", ...
std::string_view Name(TensorType v);
std::string_view Name(ProbeKind v);
std::string_view Name(ExecutionMode v);
std::string_view Name(Until v);
std::string_view Name(InterventionMode v);
std::string_view Name(OnTimeout v);
std::string_view Name(OverflowPolicy v);
std::string_view Name(Combine v);

struct InterventionPolicy {
  InterventionMode mode = InterventionMode::kReject;
  std::optional<int> timeout_ms;  // required for, and only with, block_until_signal
  OnTimeout on_timeout = OnTimeout::kContinue;
  bool operator==(const InterventionPolicy&) const = default;
};

// One (layer, tensor type) a point reads.
struct PointInput {
  int layer = 0;
  TensorType tensor_type = TensorType::kResidualStream;
  bool operator==(const PointInput&) const = default;
};

// Extension: where an inline point's `escalate` signal goes. The request is held (no token
// after the escalated one is released; its KV is kept; other requests go on) while `url` gets
// a JSON POST {request_id, extraction_point_name, token_pos, layer, score, prompt, text,
// token_ids}; the answer {"decision": "continue" | "abort"} releases or aborts it. No answer
// within timeout_ms, an unreachable classifier or a malformed answer: on_timeout decides.
//
//   escalation: {url: "http://127.0.0.1:8080/classify", timeout_ms: 2000, on_timeout: abort}
struct EscalationConfig {
  std::string url;  // http://host:port/path (https when the build supports it)
  int timeout_ms = 1000;
  OnTimeout on_timeout = OnTimeout::kContinue;
  bool operator==(const EscalationConfig&) const = default;
};

struct ExtractionPoint {
  std::string name;
  std::vector<int> layers;  // as written (duplicates kept); final_norm uses num_hidden_layers
  TensorType tensor_type = TensorType::kResidualStream;
  // Extension. kNone: one record per layer (v0.1). kConcat: one record per token, its values
  // the rows of every input (Inputs()) one after the other; the probe gets
  // hidden_size * Inputs().size() values, the record's layer and tensor_type are the first
  // input's.
  Combine combine = Combine::kNone;
  // Extension, with combine: concat only: several tensor types (tensor_type is then the first).
  std::vector<TensorType> tensor_types;
  PositionSelector position;
  std::optional<int> stride;   // continuous positions only; >= 1
  std::optional<Until> until;  // continuous positions only
  std::optional<int> count;    // extension: matches kept at most, with until: fixed_count
  std::string probe_type;
  ProbeKind probe_kind = ProbeKind::kSingleShot;
  nlohmann::json probe_args = nlohmann::json::object();
  ExecutionMode execution_mode = ExecutionMode::kInline;
  std::optional<int> queue_depth;                  // async only; null: router default
  std::optional<OverflowPolicy> overflow_policy;   // extension; async only
  std::optional<InterventionPolicy> intervention;  // null: the router's default policy
  std::optional<EscalationConfig> escalation;      // extension; inline only
  int line = 0;  // line of the point in its file (0 when not from a file)

  // What the point reads, layer-major in the order written: for each layer, each tensor type
  // (tensor_types, or tensor_type alone).
  std::vector<PointInput> Inputs() const;
};

// A steering entry (extension; `steering:` beside `extraction_points:`): a control vector file
// added to the residual stream (or a block's output) of every request, optionally only once an
// inline extraction point's probe flags (`when`), token-exactly from the next token on.
//
//   steering:
//     - name: calm
//       vector: calm.gguf            # control vector file: .gguf, .safetensors, .npy
//       layers: [10, 11]             # optional: only these blocks of the file
//       tensor_type: residual_stream # or attn_out, mlp_out
//       scale: 4.0
//       norm_match: false
//       tokens: generated            # prompt, generated or all (default)
//       position: "generated[4:]"    # optional: the points' selector grammar
//       when: {point: toxicity, signal: flag, action: start}   # or action: stop
enum class SteeringAction { kStart, kStop };
std::string_view Name(SteeringAction v);

struct SteeringTrigger {
  std::string point;  // an inline extraction point of the spec
  SteeringAction action = SteeringAction::kStart;
  bool operator==(const SteeringTrigger&) const = default;
};

struct SteeringEntry {
  std::string name;
  std::string vector;       // the file as written; relative paths resolve against the spec's dir
  std::vector<int> layers;  // empty: every block the file has
  TensorType tensor_type = TensorType::kResidualStream;  // residual_stream, attn_out or mlp_out
  double scale = 1.0;
  bool norm_match = false;
  std::string tokens = "all";  // prompt, generated or all
  // Only these positions (the extraction points' grammar, except generated[-k], which is not
  // known while generating); unset: every position `tokens` allows.
  std::optional<PositionSelector> position;
  std::optional<SteeringTrigger> when;
  int line = 0;
};

struct Spec {
  std::string version = "1";
  std::vector<ExtractionPoint> extraction_points;
  std::vector<SteeringEntry> steering;  // extension; empty in a v0.1 spec
  std::filesystem::path source;         // file it came from (empty for text); relative probe_args
                                        // paths resolve against its directory
  std::vector<std::string> warnings;    // deprecations etc., one line each, "FILE:LINE: ..."
  // The part of `warnings` that Undercurrent v0.1 gives too, and so what `validate --strict`
  // fails on: the deprecated keys `layer` and `tensor`. (v0.1 takes `every_n` as a plain alias
  // and duplicate keys silently; those stay warnings under --strict.)
  std::vector<std::string> strict_warnings;
  // Those deprecations in v0.1's words and order, one per use:
  // "extraction point 'NAME' uses 'layer', rename it to 'layers'".
  std::vector<std::string> v0_1_deprecations;
};

// Parses a spec file (YAML or JSON). NotFound if unreadable; InvalidArgument listing every
// problem ("N problems in the spec:\n  - FILE:LINE: extraction_points[I] 'NAME'.FIELD: MSG").
StatusOr<Spec> ParseSpecFile(const std::filesystem::path& path);
// Parses spec text; `name` stands for the file in messages (may be empty).
StatusOr<Spec> ParseSpecText(std::string_view text, const std::string& name = "");

// The outcome of checking a spec with its problems kept apart (ParseSpec* combine them into
// one message), for tools that list them (`undercurrent validate`).
struct SpecReport {
  std::optional<Spec> spec;           // set exactly when there are no problems
  std::vector<std::string> problems;  // one rendered line each, sorted by line
};
// Like ParseSpecText. Never fails; problems go in the report.
SpecReport CheckSpecText(std::string_view text, const std::string& name = "");
// How problems are rendered: ours ("FILE:LINE: WHERE: MESSAGE"), or v0.1's validate's
// ("line LINE: WHERE: MESSAGE"; an unreadable file's problem is the bare reason).
enum class MessageStyle { kOurs, kV0_1 };
// Like ParseSpecFile; an unreadable file is one problem ("PATH: file not found; ...").
SpecReport CheckSpecFile(const std::filesystem::path& path,
                         MessageStyle style = MessageStyle::kOurs);
// The one problem itself, or "N problems in the spec:" and a "\n  - PROBLEM" line for each.
std::string CombineSpecProblems(const std::vector<std::string>& problems);

// Canonical YAML: new key names only, defaults omitted, single-element layers as an int;
// ParseSpecText(WriteSpecYaml(s)) gives an equal spec (round trip lossless in meaning).
std::string WriteSpecYaml(const Spec& spec);

// The Draft 2020-12 JSON Schema of the format (deterministic key order), with the position
// regex, bounds, deprecated aliases and if/then encodings of the cross-field rules.
nlohmann::json SpecJsonSchema();
// The same schema as text, keys in reading order ($schema, $id, title, ...), 2-space indent,
// ending in a newline: what `undercurrent schema` prints.
std::string SpecJsonSchemaText();

}  // namespace uc::probe
