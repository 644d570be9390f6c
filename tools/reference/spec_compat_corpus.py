#!/usr/bin/env python3
"""Spec files with Undercurrent v0.1's verdict on each, for the C++ compatibility test.

Produces tests/testdata/spec_compat/ (or --out):
  <case>.yaml / <case>.json   one spec file per case
  manifest.json               {"meta": {...}, "cases": [{"file", "accepted_by_v0_1",
                              "v0_1_message", ["deliberate_difference": REASON]}, ...]}

The cases are
  - v0.1's example specs (examples/specs/ and the content-safety demo specs; the PyPI package
    does not ship them, so they are written here from their description: same fields, same
    values, our own comments);
  - hand-written edge cases: every field with valid and invalid values, every cross-field
    rule, deprecated keys, YAML quirks (merge keys, anchors, duplicate keys, tags, JSON, BOM,
    CRLF, several documents, syntax errors), top-level problems, our two extensions;
  - seeded random mutations of a base point (each field drawn from a pool of good and bad
    values), a few hundred of them.
Each file is parsed with v0.1's own `undercurrent.spec.parse_yaml` and the outcome recorded.

`deliberate_difference` marks a case where we knowingly disagree with v0.1 (the C++ test
expects the opposite verdict there); every other case must get v0.1's verdict. The reasons:
  extension      our keys overflow_policy and count (v0.1 rejects unknown keys)
  bool_as_int    v0.1 (pydantic lax mode) reads a YAML boolean where an int goes as 1/0,
                 e.g. `layers: true`, `position: yes`; we refuse booleans there
  int_range      v0.1 takes Python ints of any size; layers, stride, queue_depth and
                 timeout_ms must fit in int32 here, positions in int64
  unicode_digit  v0.1's position regex (\\d) takes non-ASCII digits such as '٣'; we take
                 ASCII digits only

Requirements: pip install 'undercurrent==0.1.*' (pulls pydantic and PyYAML; tested with
undercurrent 0.1.0, pydantic 2.14.4, PyYAML 6.0.4 on Python 3.11.7).
Usage: python3 tools/reference/spec_compat_corpus.py [--out DIR]
Deterministic: re-running rewrites identical files (the output folder is replaced).
"""

import argparse
import json
import pathlib
import random
import shutil
import sys
import warnings

import pydantic
import yaml
from undercurrent import __version__ as undercurrent_version
from undercurrent.spec import parse_yaml

REASONS = {
    "extension": "our extension keys overflow_policy / count; v0.1 rejects unknown keys",
    "bool_as_int": "v0.1 (pydantic lax mode) reads a YAML boolean where an int goes as 1/0; "
                   "we refuse booleans there",
    "int_range": "v0.1 takes ints of any size; we require int32 for layers/stride/queue_depth/"
                 "timeout_ms and int64 for positions",
    "unicode_digit": "v0.1's position regex (\\d) takes non-ASCII digits; we take ASCII only",
}

HEADER = ("# yaml-language-server: $schema=https://raw.githubusercontent.com/wrynx/undercurrent/"
          "main/schema/probe-spec.schema.json\n")

# v0.1's example specs (inventory §2.7), comments ours.
EXAMPLES = {
    "example_classic_single_token": HEADER + """version: "1"
extraction_points:
  # residual stream after layer 12 at the last prompt token, one linear probe, inline
  - name: last_prompt_token_probe
    layers: 12
    tensor_type: residual_stream
    position: "prompt[-1]"
    probe_type: linear_probe
    probe_kind: single_shot
    execution_mode: inline
""",
    "example_continuous_trajectory": HEADER + """version: "1"
extraction_points:
  # MLP output at three layers, every 2nd generated token, async trajectory probe
  - name: generation_trajectory
    layers: [4, 8, 12]
    tensor_type: mlp_out
    position: "generated[*]"
    stride: 2               # every_n: 2 is the old spelling
    until: generation_end
    probe_type: trajectory_probe
    probe_kind: trajectory
    execution_mode: async
    queue_depth: 8
""",
    "example_offset_dual_position": HEADER + """version: "1"
extraction_points:
  # attention output one token after the last prompt token (the first generated one)
  - name: read_position_at_next_token
    layers: 6
    tensor_type: attn_out
    position: "prompt[-1]+1"
    probe_type: dual_position_probe
    probe_kind: single_shot
    execution_mode: inline
""",
    "example_sliced_range": HEADER + """version: "1"
extraction_points:
  # KV cache at layer 20 over generated tokens 5..19 (parses; no engine captures kv)
  - name: mid_generation_window
    layers: 20
    tensor_type: kv
    position: "generated[5:20]"
    probe_type: trajectory_probe
    probe_kind: trajectory
    execution_mode: inline
""",
    "example_content_safety_gpt2": """version: "1"
extraction_points:
  # gate on the prompt, then watch the generation off the hot path
  - name: prompt_gate
    layers: 6
    tensor_type: residual_stream
    position: "prompt[-1]"
    probe_type: content_safety
    probe_kind: single_shot
    execution_mode: inline
  - name: generation_monitor
    layers: 6
    tensor_type: residual_stream
    position: "generated[*]"
    probe_type: content_safety_trajectory
    probe_kind: trajectory
    execution_mode: async
    queue_depth: 16
""",
    "example_content_safety_llama": """version: "1"
extraction_points:
  - name: prompt_gate
    layers: 16
    tensor_type: residual_stream
    position: "prompt[-1]"
    probe_type: content_safety
    probe_kind: single_shot
    execution_mode: inline
  - name: generation_monitor
    layers: 16
    tensor_type: residual_stream
    position: "generated[*]"
    probe_type: content_safety_trajectory
    probe_kind: trajectory
    execution_mode: async
    queue_depth: 16
""",
    "example_final_norm_llama31": """version: "1"
extraction_points:
  # final norm output of a 32-layer model: addressed as layer 32
  - name: final_hidden
    layers: 32
    tensor_type: final_norm
    position: "prompt[-1]"
    probe_type: content_safety
    probe_kind: single_shot
""",
}

# The base point every field case varies (YAML snippets, in key order).
BASE = {
    "name": "p",
    "layers": "3",
    "tensor_type": "residual_stream",
    "position": '"prompt[-1]"',
    "probe_type": "linear",
    "probe_kind": "single_shot",
}
TRAJECTORY = dict(BASE, position='"generated[*]"', probe_kind="trajectory")
ASYNC = dict(TRAJECTORY, execution_mode="async")


def point_yaml(fields):
    """One list item; a None value drops the key."""
    lines = []
    for key, value in fields.items():
        if value is None:
            continue
        lines.append(("  - " if not lines else "    ") + f"{key}: {value}")
    return "\n".join(lines) + "\n" if lines else "  - {}\n"


def spec_yaml(*points, version='"1"'):
    head = f"version: {version}\n" if version is not None else ""
    return head + "extraction_points:\n" + "".join(point_yaml(p) for p in points)


def field_cases():
    """(name, text, tag) for one field varied at a time."""
    cases = []
    numbers = {}

    def vary(field, values, base=BASE, tag_for=None):
        for value in values:
            i = numbers[field] = numbers.get(field, -1) + 1
            tag = (tag_for or {}).get(value)
            cases.append((f"field_{field}_{i:02d}", spec_yaml(dict(base, **{field: value})), tag))

    vary("name", ["x", '"a b"', "\"it's\"", '"ünï"', '"123"', "123", '""', '"  "', "null",
                  "[a]", "yes", "'yes'", "1.5", "2024-01-01", "'2024-01-01'", "!!str 5", None,
                  '"x\\ty"', "{a: 1}"])
    vary("layers", ["0", "31", "[0, 1, 1]", "[]", "-1", "[1, -2]", '"3"', "'3'", "3.0", "3.5",
                    "true", "[true]", "null", '"abc"', "{a: 1}", "0x1F", "017", "1_000",
                    "2147483647", "2147483648", "99999999999", "1e3", "'1e3'", "[1, 2.0, '3']",
                    "[[1]]", '" 4 "', "'4.00'", "'+4'", "'4_0'", "'0x4'", "-0", "[1, null]",
                    "1:30", "0b101", "~", None, "[]   # empty", "false", "[0, off]"],
         tag_for={"true": "bool_as_int", "[true]": "bool_as_int", "false": "bool_as_int",
                  "[0, off]": "bool_as_int", "2147483648": "int_range",
                  "99999999999": "int_range"})
    vary("tensor_type", ["residual_stream", "attn_out", "mlp_out", "kv", "final_norm",
                         "RESIDUAL_STREAM", "residual-stream", "resid_post", '""', "null", "5",
                         "'kv'", "[kv]", None, "attn"])
    vary("position", ['"prompt[-1]"', '"prompt[0]"', "'prompt[3]+2'", '"generated[0]"',
                      '"generated[-1]"', '"generated[5]-2"', "5", "-1", '"7"', "' 7 '",
                      '" prompt[-1] "', '"prompt[-1]\\t"', "prompt[-1]", "'prompt[-0]'",
                      '"007"', "017", "0x1F", "+5", "'+5'", "5.0", "5.5", "true", "yes", "null",
                      "[1]", "{a: 1}", '"prompt[]"', '"generated[]"', '"generated[*"',
                      '"generated[5:2]"', '"generated[3:3]"', '"foo[1]"', '"prompt[1.5]"', '""',
                      '"   "', '"prompt[*]"', '"prompt[0:4]"', '"generated[:5]"',
                      '"generated[-3:]"', '"5+1"', '"prompt[+1]"', '"prompt[ 1]"',
                      '"PROMPT[1]"', "99999999999999999999999", '"99999999999999999999999"',
                      "'prompt[٣]'", '"1e3"', "1e3", "1.0e+3", '"prompt[-1]+1"', None,
                      '"generated[1:2:3]"', '"generated[a]"', "'prompt[1]1'", "2024-01-01",
                      "on", "0", "'-0'"],
         tag_for={"true": "bool_as_int", "yes": "bool_as_int", "on": "bool_as_int",
                  "99999999999999999999999": "int_range",
                  '"99999999999999999999999"': "int_range", "'prompt[٣]'": "unicode_digit"})
    vary("position", ['"generated[*]"', '"generated[5:]"', '"generated[2:8]"', '"generated[*]+1"',
                      '"generated[2:]+1"', '"generated[0:1]-3"', '"generated[5:20]"'],
         base=dict(TRAJECTORY, stride="2"))
    for field in ("stride", "every_n"):
        vary(field, ["1", "2", "0", "-1", '"2"', "2.0", "2.5", "true", "null", "[2]", "abc",
                     "2147483648", "'2'"], base=TRAJECTORY,
             tag_for={"true": "bool_as_int", "2147483648": "int_range"})
        vary(field, ["2", "null"], base=BASE)  # on a point position
    vary("until", ["generation_end", "fixed_count", "stop_token", "null", "end", "GENERATION_END",
                   "1", "[stop_token]"], base=TRAJECTORY)
    vary("until", ["generation_end", "null"], base=BASE)
    vary("probe_type", ["linear", '"my probe"', '""', '"  "', "5", "null", "[a]", "true", None,
                        '"ünicode"'])
    vary("probe_kind", ["single_shot", "trajectory", "Trajectory", "single-shot", "singleshot",
                        "null", "1", None, "'trajectory'"])
    vary("execution_mode", ["inline", "async", "Async", "null", "sync", "''", "[inline]"],
         base=TRAJECTORY)
    vary("execution_mode", ["async"], base=BASE)
    vary("queue_depth", ["1", "8", "0", "-3", '"4"', "4.0", "4.5", "null", "true", "[4]",
                         "2147483647", "2147483648", "four"], base=ASYNC,
         tag_for={"true": "bool_as_int", "2147483648": "int_range"})
    vary("queue_depth", ["8", "null"], base=TRAJECTORY)
    vary("probe_args", ["{}", "null", "{threshold: 0.9}", "{weights: w.safetensors, bias: -1.5, "
                        "tags: [a, b], nested: {x: null, y: true}}", "{1: 2}", "{yes: 1}",
                        "[1, 2]", "threshold", "{a: {1: 2}}", "{when: 2024-01-01}",
                        "{big: 99999999999999999999}", "{f: 1e-05, g: .inf}", "{null: 1}",
                        "{'': 1}"])
    vary("intervention", ["{}", "null", "{mode: reject}", "{mode: block_until_signal}",
                          "{mode: block_until_signal, timeout_ms: 50}",
                          "{mode: block_until_signal, timeout_ms: 0}",
                          "{mode: block_until_signal, timeout_ms: -5}",
                          "{mode: block_until_signal, timeout_ms: '50'}",
                          "{mode: block_until_signal, timeout_ms: 50.0}",
                          "{mode: block_until_signal, timeout_ms: 50.5}",
                          "{mode: block_until_signal, timeout_ms: true}",
                          "{mode: block_until_signal, timeout_ms: 2147483648}",
                          "{mode: block_until_signal, timeout_ms: 50, on_timeout: abort}",
                          "{mode: block_until_signal, timeout_ms: 50, on_timeout: continue}",
                          "{mode: block_until_signal, timeout_ms: null}",
                          "{mode: reject, timeout_ms: 50}", "{mode: reject, timeout_ms: null}",
                          "{mode: reject, on_timeout: abort}",
                          "{mode: reject, on_timeout: continue}",
                          "{on_timeout: abort}", "{timeout_ms: 50}", "{mode: block}",
                          "{mode: null}", "{mode: reject, timeout: 5}", "{on_timeout: null}",
                          "{mode: block_until_signal, timeout_ms: 50, on_timeout: retry}",
                          "[reject]", "reject", "{mode: REJECT}"],
         tag_for={"{mode: block_until_signal, timeout_ms: true}": "bool_as_int",
                  "{mode: block_until_signal, timeout_ms: 2147483648}": "int_range"})
    vary("intervention", ["{mode: reject}", "{mode: block_until_signal, timeout_ms: 50}", "{}",
                          "null", "{mode: block_until_signal}"], base=ASYNC)
    return cases


def rule_cases():
    """Cross-field rules, deprecated keys, several points, several problems at once."""
    t = TRAJECTORY
    c = [
        ("rule_async_single_shot", spec_yaml(dict(BASE, execution_mode="async")), None),
        ("rule_async_single_shot_queue", spec_yaml(dict(BASE, execution_mode="async",
                                                        queue_depth="4")), None),
        ("rule_queue_depth_inline", spec_yaml(dict(t, execution_mode="inline", queue_depth="4")),
         None),
        ("rule_queue_depth_default_mode", spec_yaml(dict(t, queue_depth="4")), None),
        ("rule_stride_prompt", spec_yaml(dict(BASE, stride="2")), None),
        ("rule_stride_absolute", spec_yaml(dict(BASE, position="5", stride="2")), None),
        ("rule_stride_generated_point", spec_yaml(dict(BASE, position='"generated[3]"',
                                                       stride="2")), None),
        ("rule_until_prompt", spec_yaml(dict(BASE, until="fixed_count")), None),
        ("rule_until_and_stride_point", spec_yaml(dict(BASE, until="stop_token", stride="3")),
         None),
        ("rule_async_block", spec_yaml(dict(ASYNC, intervention="{mode: block_until_signal, "
                                            "timeout_ms: 5}")), None),
        ("rule_everything_wrong", spec_yaml(dict(BASE, execution_mode="async", queue_depth="0",
                                                 stride="0", until="bogus",
                                                 intervention="{mode: reject, timeout_ms: 1}")),
         None),
        ("rule_stride_every_n_both", spec_yaml(dict(t, stride="2", every_n="3")), None),
        ("rule_stride_every_n_same", spec_yaml(dict(t, stride="2", every_n="2")), None),
        ("rule_layer_deprecated", spec_yaml({**{k: v for k, v in BASE.items() if k != "layers"},
                                             "layer": "4"}), None),
        ("rule_tensor_deprecated", spec_yaml({**{k: v for k, v in BASE.items()
                                                 if k != "tensor_type"}, "tensor": "mlp_out"}),
         None),
        ("rule_every_n_deprecated", spec_yaml(dict(t, every_n="2")), None),
        ("rule_layer_and_layers", spec_yaml(dict(BASE, layer="4")), None),
        ("rule_tensor_and_tensor_type", spec_yaml(dict(BASE, tensor="kv")), None),
        ("rule_all_deprecated", spec_yaml({"name": "old", "layer": "[1, 2]", "tensor": "attn_out",
                                           "position": '"generated[*]"', "every_n": "4",
                                           "probe_type": "x", "probe_kind": "trajectory"}), None),
        ("rule_bad_deprecated_value", spec_yaml({**{k: v for k, v in BASE.items()
                                                    if k != "tensor_type"}, "tensor": "bogus"}),
         None),
        ("rule_duplicate_names", spec_yaml(BASE, dict(BASE, layers="4")), None),
        ("rule_duplicate_names_three", spec_yaml(BASE, dict(BASE, name="q"), BASE), None),
        ("rule_distinct_names", spec_yaml(BASE, dict(BASE, name="q"), dict(BASE, name="P")), None),
        ("rule_unknown_key", spec_yaml(dict(BASE, layr="3")), None),
        ("rule_unknown_key_typo", spec_yaml(dict(BASE, probe_kinds="single_shot")), None),
        ("rule_unknown_keys_two", spec_yaml(dict(BASE, foo="1", bar="2")), None),
        ("rule_missing_all", spec_yaml({"name": "p"}), None),
        ("rule_missing_name_bad_layer", spec_yaml({k: v for k, v in dict(BASE, layers="-1").items()
                                                   if k != "name"}), None),
        ("rule_empty_point", "extraction_points:\n  - {}\n", None),
        ("rule_point_not_mapping", "extraction_points:\n  - just a string\n", None),
        ("rule_point_list", "extraction_points:\n  - [1, 2]\n", None),
        ("rule_point_null", "extraction_points:\n  -\n", None),
        ("rule_many_points_mixed", spec_yaml(BASE, dict(BASE, name="q", layers="-1"),
                                             dict(ASYNC, name="r"), dict(BASE, name="s",
                                                                         position='"bad"')), None),
        ("rule_flow_point", 'extraction_points: [{name: p, layers: [1, 2], tensor_type: kv, '
                            'position: "generated[*]", probe_type: t, probe_kind: trajectory, '
                            'execution_mode: async, queue_depth: 3}]\n', None),
        # Our extensions (v0.1 rejects the keys; we validate them).
        ("ext_overflow_policy", spec_yaml(dict(ASYNC, queue_depth="4",
                                               overflow_policy="drop_oldest")), "extension"),
        ("ext_overflow_policy_newest", spec_yaml(dict(ASYNC, overflow_policy="drop_newest")),
         "extension"),
        ("ext_overflow_policy_block", spec_yaml(dict(ASYNC, overflow_policy="block")),
         "extension"),
        ("ext_overflow_policy_null", spec_yaml(dict(ASYNC, overflow_policy="null")), "extension"),
        ("ext_overflow_policy_inline", spec_yaml(dict(t, overflow_policy="drop_oldest")), None),
        ("ext_overflow_policy_bad", spec_yaml(dict(ASYNC, overflow_policy="drop_old")), None),
        ("ext_count", spec_yaml(dict(t, until="fixed_count", count="8")), "extension"),
        ("ext_count_slice", spec_yaml(dict(t, position='"generated[4:]"', until="fixed_count",
                                           count="'3'")), "extension"),
        ("ext_count_null", spec_yaml(dict(t, count="null")), "extension"),
        ("ext_count_no_until", spec_yaml(dict(t, count="8")), None),
        ("ext_count_other_until", spec_yaml(dict(t, until="generation_end", count="8")), None),
        ("ext_count_zero", spec_yaml(dict(t, until="fixed_count", count="0")), None),
        ("ext_count_point_position", spec_yaml(dict(BASE, until="fixed_count", count="2")), None),
        ("ext_both", spec_yaml(dict(ASYNC, until="fixed_count", count="16",
                                    overflow_policy="drop_newest", queue_depth="2")), "extension"),
    ]
    return c


def document_cases():
    """Top level and YAML itself."""
    base = point_yaml(BASE)
    c = [
        ("doc_minimal", "extraction_points:\n" + base, None),
        ("doc_version_2", 'version: "2"\nextraction_points:\n' + base, None),
        ("doc_version_v1", "version: v1\nextraction_points:\n" + base, None),
        ("doc_version_int", "version: 1\nextraction_points:\n" + base, None),
        ("doc_version_float", "version: 1.0\nextraction_points:\n" + base, None),
        ("doc_version_null", "version:\nextraction_points:\n" + base, None),
        ("doc_version_list", "version: [1]\nextraction_points:\n" + base, None),
        ("doc_version_after", "extraction_points:\n" + base + 'version: "1"\n', None),
        ("doc_empty_list", 'version: "1"\nextraction_points: []\n', None),
        ("doc_points_null", "extraction_points:\n", None),
        ("doc_points_mapping", "extraction_points:\n  a: 1\n", None),
        ("doc_points_string", "extraction_points: none\n", None),
        ("doc_missing_points", 'version: "1"\n', None),
        ("doc_unknown_top_key", "extraction_point:\n" + base, None),
        ("doc_unknown_top_key_extra", "extraction_points:\n" + base + "comment: hi\n", None),
        ("doc_top_list", "- " + "\n- ".join(["a", "b"]) + "\n", None),
        ("doc_top_string", "just text\n", None),
        ("doc_top_int", "5\n", None),
        ("doc_empty", "", None),
        ("doc_comment_only", "# nothing here\n", None),
        ("doc_explicit_empty", "---\n...\n", None),
        ("doc_two_documents", "extraction_points: []\n---\nextraction_points: []\n", None),
        ("doc_start_marker", "---\nextraction_points:\n" + base, None),
        ("doc_syntax_flow", "extraction_points: [this: is not, valid: yaml: at all\n", None),
        ("doc_syntax_indent", "extraction_points:\n  - name: p\n   layers: 3\n", None),
        ("doc_syntax_quote", 'extraction_points:\n  - name: "p\n', None),
        ("doc_syntax_tab", "extraction_points:\n\t- name: p\n", None),
        ("doc_syntax_colon", "extraction_points: a: b\n", None),
        ("doc_crlf", ("extraction_points:\n" + base).replace("\n", "\r\n"), None),
        ("doc_bom", "\ufeffextraction_points:\n" + base, None),
        ("doc_comments_everywhere", "# head\nextraction_points: # list\n" +
         base.replace("\n", "  # c\n"), None),
        ("doc_duplicate_top_key", "extraction_points: []\nextraction_points:\n" + base, None),
        ("doc_duplicate_point_key", "extraction_points:\n" + base + "    name: q\n", None),
        ("doc_duplicate_key_bad_last", "extraction_points:\n" + base + "    layers: -1\n", None),
        ("doc_anchor_alias", "extraction_points:\n  - &p\n    name: p\n    layers: 3\n"
                             "    tensor_type: kv\n    position: 1\n    probe_type: t\n"
                             "    probe_kind: single_shot\n  - *p\n", None),
        ("doc_merge_key", "extraction_points:\n  - &p\n    name: p\n    layers: 3\n"
                          "    tensor_type: kv\n    position: 1\n    probe_type: t\n"
                          "    probe_kind: single_shot\n  - <<: *p\n    name: q\n", None),
        ("doc_merge_list", "defaults: &d {layers: 1, tensor_type: kv}\n", None),
        ("doc_merge_two", "extraction_points:\n  - &a {name: a, layers: 1, tensor_type: kv, "
                          "position: 1, probe_type: t, probe_kind: single_shot}\n"
                          "  - &b {name: b, layers: 2, tensor_type: mlp_out, position: 2, "
                          "probe_type: u, probe_kind: single_shot}\n"
                          "  - <<: [*a, *b]\n    name: c\n", None),
        ("doc_merge_bad", "extraction_points:\n  - <<: 5\n    name: q\n", None),
        ("doc_tag_str", "extraction_points:\n" + base.replace("name: p", "name: !!str 5"), None),
        ("doc_tag_unknown", "extraction_points:\n" + base.replace("name: p", "name: !foo p"),
         None),
        ("doc_tag_int_bad", "extraction_points:\n" + base.replace("layers: 3", "layers: !!int x"),
         None),
        ("doc_tag_int", "extraction_points:\n" + base.replace("layers: 3", "layers: !!int '3'"),
         None),
        ("doc_block_scalar", "extraction_points:\n" + base.replace("name: p", "name: |\n      p"),
         None),
        ("doc_folded_position", "extraction_points:\n" +
         base.replace('position: "prompt[-1]"', "position: >-\n      prompt[-1]"), None),
        ("doc_literal_newline_position", "extraction_points:\n" +
         base.replace('position: "prompt[-1]"', "position: |\n      prompt[-1]"), None),
    ]
    json_point = {"name": "j", "layers": [1, 2], "tensor_type": "attn_out",
                  "position": "generated[2:8]", "stride": 2, "probe_type": "t",
                  "probe_kind": "trajectory", "execution_mode": "async", "queue_depth": 4,
                  "intervention": {"mode": "reject"}, "probe_args": {"w": [0.5, -1], "on": True}}
    c.append(("json_spec", json.dumps({"version": "1", "extraction_points": [json_point]},
                                      indent=2) + "\n", None))
    c.append(("json_compact", json.dumps({"extraction_points": [json_point]}) + "\n", None))
    c.append(("json_bad_version", json.dumps({"version": 1, "extraction_points": []}) + "\n",
              None))
    c.append(("json_float_exponent", json.dumps({"extraction_points": [dict(
        json_point, queue_depth=1e3)]}) + "\n", None))
    return c


# Pools for random specs: (yaml snippet, tag). None drops the key.
POOLS = {
    "name": [("p", None), ('"q r"', None), ('""', None), ("5", None), (None, None)],
    "layers": [("3", None), ("[0, 2]", None), ("[]", None), ("-1", None), ('"4"', None),
               ("true", "bool_as_int"), ("2.0", None), ("2.5", None), (None, None)],
    "tensor_type": [("residual_stream", None), ("mlp_out", None), ("final_norm", None),
                    ("kv", None), ("resid", None), (None, None)],
    "position": [('"prompt[-1]"', None), ('"generated[*]"', None), ('"generated[2:6]"', None),
                 ('"generated[-1]"', None), ("7", None), ('"prompt[-1]+1"', None),
                 ('"generated[4:]+1"', None), ('"generated[6:2]"', None), ('"prompt[*]"', None),
                 ("yes", "bool_as_int"), (None, None)],
    "stride": [(None, None), (None, None), ("2", None), ("0", None), ('"3"', None)],
    "every_n": [(None, None), (None, None), (None, None), ("2", None)],
    "until": [(None, None), (None, None), ("generation_end", None), ("fixed_count", None),
              ("forever", None)],
    "probe_type": [("linear", None), ("mlp", None), ('" "', None), (None, None)],
    "probe_kind": [("single_shot", None), ("trajectory", None), ("trajectory", None),
                   ("single", None), (None, None)],
    "execution_mode": [(None, None), ("inline", None), ("async", None), ("async", None),
                       ("later", None)],
    "queue_depth": [(None, None), (None, None), ("4", None), ("0", None), ("null", None)],
    "intervention": [(None, None), (None, None), ("{mode: reject}", None),
                     ("{mode: block_until_signal, timeout_ms: 20}", None),
                     ("{mode: block_until_signal}", None), ("{mode: reject, timeout_ms: 3}", None),
                     ("{mode: block_until_signal, timeout_ms: 9, on_timeout: abort}", None)],
    "probe_args": [(None, None), (None, None), ("{threshold: 0.5}", None), ("[]", None)],
}


def random_cases(count, seed):
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        points = []
        tags = set()
        for j in range(rng.choice([1, 1, 1, 2, 3])):
            fields = {}
            for key, pool in POOLS.items():
                value, tag = rng.choice(pool)
                if key == "name" and value == "p":
                    value = f"p{j}" if rng.random() < 0.8 else "p"
                fields[key] = value
                if value is not None and tag:
                    tags.add(tag)
            points.append(fields)
        cases.append((f"random_{i:03d}", spec_yaml(*points), ",".join(sorted(tags)) or None))
    return cases


def v01_verdict(text):
    """(accepted, message): v0.1's parse of the text."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            parse_yaml(text)
            return True, None
        except Exception as exc:  # noqa: BLE001 -- any failure is a rejection
            return False, f"{type(exc).__name__}: {exc}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = pathlib.Path(__file__).resolve().parents[2]
    parser.add_argument("--out", type=pathlib.Path, default=root / "tests/testdata/spec_compat")
    args = parser.parse_args()
    if not undercurrent_version.startswith("0.1."):
        sys.exit(f"needs undercurrent 0.1.x, found {undercurrent_version}")

    cases = ([(name, text, None) for name, text in EXAMPLES.items()] + field_cases() +
             rule_cases() + document_cases() + random_cases(240, seed=20261002))
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    manifest = []
    for name, text, tag in cases:
        suffix = ".json" if name.startswith("json_") else ".yaml"
        path = args.out / (name + suffix)
        path.write_bytes(text.encode("utf-8"))
        accepted, message = v01_verdict(text)
        entry = {"file": path.name, "accepted_by_v0_1": accepted, "v0_1_message": message}
        # A tagged value only makes a difference where v0.1 accepts the spec because of it;
        # extension cases differ whenever we accept them, which the tag asserts.
        if tag and (accepted or tag == "extension"):
            entry["deliberate_difference"] = "; ".join(REASONS[t] for t in tag.split(","))
        manifest.append(entry)
    meta = {
        "generator": "tools/reference/spec_compat_corpus.py",
        "undercurrent": undercurrent_version,
        "pydantic": pydantic.VERSION,
        "pyyaml": yaml.__version__,
        "python": sys.version.split()[0],
        "cases": len(manifest),
        "accepted_by_v0_1": sum(e["accepted_by_v0_1"] for e in manifest),
        "deliberate_differences": sum("deliberate_difference" in e for e in manifest),
    }
    with open(args.out / "manifest.json", "w", encoding="utf-8") as f:
        json.dump({"meta": meta, "cases": manifest}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {len(manifest)} cases to {args.out} "
          f"({meta['accepted_by_v0_1']} accepted by v0.1, "
          f"{meta['deliberate_differences']} deliberate differences)")


if __name__ == "__main__":
    main()
