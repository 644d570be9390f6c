#!/usr/bin/env python3
"""Structured output through `undercurrent serve` on a real chat model (SmolLM2-135M-Instruct).

20 JSON schemas (nested objects, arrays, enums, numbers with ranges, required fields) x 3
prompts through the official `openai` SDK with `response_format: json_schema`: every output
finishes with "stop", parses and validates with the `jsonschema` package. Then json_object,
vLLM's `structured_outputs` regex and choice (and the older guided_* names), and bad input: an
invalid schema, an unsupported schema, a bad regex and malformed fields are 400s naming the
field, and the server keeps serving. Tools: the server runs with a Qwen 2.5 chat template
(tests/testdata/chat_templates/qwen2.5_tools.jinja; SmolLM2 speaks the same ChatML turns, but no
Qwen checkpoint is available here, so the call's content is the 135M model's, the mechanics are
Qwen's): a forced call (tool_choice named and "required") comes back as `tool_calls` whose
arguments validate against the function's parameters, the tool's answer goes back in a `tool`
message, and an unknown function in tool_choice is a 400.

Usage: structured_output_test.py UNDERCURRENT_BINARY   (needs $UC_SMOLLM2_GGUF, and the `openai`
and `jsonschema` packages: tests/requirements.txt)
"""
import json
import os
import sys
import unittest

from uc_server import TEMPLATES, Server, smollm2_gguf

try:
    import jsonschema
    import openai
except ImportError:
    sys.exit("error: openai or jsonschema is missing; run scripts/install-deps.sh "
             "(it installs tests/requirements.txt into build/venv)")

BINARY = None


def obj(props, required=None, **extra):
    return {"type": "object", "properties": props,
            "required": list(props) if required is None else required,
            "additionalProperties": False, **extra}


# Integers carry a range: an unbounded one lets a small model write digits until max_tokens (the
# grammar cannot end a number the model will not end), so its output would not parse.
INT = {"type": "integer", "minimum": -1000, "maximum": 1000000}
STR = {"type": "string", "maxLength": 24}
BOOL = {"type": "boolean"}

# Small outputs on purpose: bounded strings and arrays keep max_tokens (and the test) short.
SCHEMAS = [
    obj({"name": STR, "age": {"type": "integer", "minimum": 0, "maximum": 120}}),
    obj({"city": STR, "population": {"type": "integer", "minimum": 1,
                                                           "maximum": 100000000}}),
    obj({"color": {"enum": ["red", "green", "blue"]}}),
    obj({"ok": BOOL, "code": {"type": "integer", "minimum": 100, "maximum": 599}}),
    obj({"temperature": {"type": "number", "minimum": -50, "maximum": 60}}),
    obj({"tags": {"type": "array", "items": STR, "minItems": 1, "maxItems": 3}}),
    obj({"point": obj({"x": INT, "y": INT})}),
    obj({"user": obj({"name": STR, "address": obj({"zip": {"type": "string",
                                                            "pattern": "^[0-9]{5}$"}})})}),
    obj({"scores": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 10},
                    "maxItems": 4}}),
    obj({"answer": {"enum": ["yes", "no", "maybe"]}, "confidence": {"type": "number",
                                                                    "minimum": 0, "maximum": 1}}),
    obj({"title": STR, "pages": {"type": "integer", "minimum": 1, "maximum": 2000},
         "isbn": {"type": ["string", "null"], "maxLength": 17}}, required=["title", "pages"]),
    obj({"items": {"type": "array", "items": obj({"id": INT, "done": BOOL}), "maxItems": 2}}),
    obj({"level": {"type": "integer", "enum": [1, 2, 3]}, "label": STR}),
    obj({"weekday": {"enum": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]},
         "hour": {"type": "integer", "minimum": 0, "maximum": 23}}),
    obj({"price": {"type": "number", "exclusiveMinimum": 0, "maximum": 1000},
         "currency": {"enum": ["USD", "EUR", "GBP"]}}),
    obj({"matrix": {"type": "array", "maxItems": 2,
                    "items": {"type": "array", "items": INT, "maxItems": 2}}}),
    obj({"email": {"type": "string", "pattern": "^[a-z]{1,8}@[a-z]{1,8}\\.com$"}}),
    obj({"meta": obj({"version": INT, "stable": BOOL}), "notes": STR}, required=["meta"]),
    {"type": "array", "items": obj({"k": STR}), "minItems": 1, "maxItems": 2},
    obj({"status": {"const": "active"}, "count": {"type": "integer", "minimum": 0,
                                                  "maximum": 99}}),
]

PROMPTS = [
    "Describe a person you know as JSON.",
    "Give me some data about a city, in JSON.",
    "Reply with a JSON object about your favourite book.",
]


class StructuredOutputTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        gguf = smollm2_gguf()
        template = os.path.join(TEMPLATES, "qwen2.5_tools.jinja")
        cls.server = Server(BINARY, ["--model", gguf, "--served-model-name", "m", "--max-model-len", "1024",
                             "--max-num-seqs", "8",
                             "--chat-template", template])
        cls.client = openai.OpenAI(base_url=cls.server.url, api_key="unused", max_retries=0,
                                   timeout=300)

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        if code != 0:
            raise RuntimeError("server exited with %d:\n%s" % (code, "".join(cls.server.log)))

    def chat(self, prompt, max_tokens=96, **kwargs):
        return self.client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens,
            temperature=0, **kwargs)

    def test_twenty_schemas_times_three_prompts_validate(self):
        from concurrent.futures import ThreadPoolExecutor
        jobs = [(i, p) for i in range(len(SCHEMAS)) for p in PROMPTS]

        def run(job):
            i, prompt = job
            fmt = {"type": "json_schema",
                   "json_schema": {"name": f"s{i}", "schema": SCHEMAS[i], "strict": True}}
            return i, prompt, self.chat(prompt, response_format=fmt)

        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(run, jobs))
        self.assertEqual(len(results), 60)
        for i, prompt, r in results:
            text = r.choices[0].message.content
            with self.subTest(schema=i, prompt=prompt, text=text):
                self.assertEqual(r.choices[0].finish_reason, "stop")
                jsonschema.validate(json.loads(text), SCHEMAS[i])

    def test_json_object_regex_and_choice(self):
        r = self.chat("Give me a JSON object.", response_format={"type": "json_object"})
        self.assertIsInstance(json.loads(r.choices[0].message.content), dict)
        r = self.chat("What is the date?", max_tokens=20,
                      extra_body={"structured_outputs": {"regex": "20[0-9]{2}-[01][0-9]"}})
        self.assertRegex(r.choices[0].message.content, r"^20[0-9]{2}-[01][0-9]$")
        self.assertEqual(r.choices[0].finish_reason, "stop")
        for body in ({"structured_outputs": {"choice": ["positive", "negative"]}},
                     {"guided_choice": ["positive", "negative"]}):
            r = self.chat("Is 'I love it' positive or negative?", max_tokens=8, extra_body=body)
            self.assertIn(r.choices[0].message.content, ["positive", "negative"])
        r = self.client.completions.create(model="m", prompt="Numbers: ", max_tokens=10,
                                           temperature=0, extra_body={"guided_regex": "[0-9]+"})
        self.assertRegex(r.choices[0].text, r"^[0-9]+$")

    def test_bad_input_is_a_400_naming_the_field(self):
        cases = [
            ({"response_format": {"type": "json_schema",
                                  "json_schema": {"name": "x", "schema": {"type": "nope"}}}},
             "response_format.json_schema.schema"),
            ({"response_format": {"type": "json_schema", "json_schema": {
                "name": "x", "schema": {"type": "array", "uniqueItems": True}}}},
             "response_format.json_schema.schema"),
            ({"response_format": {"type": "xml"}}, "response_format.type"),
            ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
            ({"structured_outputs": {"regex": "([a-z]"}}, "structured_outputs.regex"),
            ({"structured_outputs": {"choice": []}}, "structured_outputs.choice"),
            ({"structured_outputs": {"json": "{not json"}}, "structured_outputs.json"),
            ({"structured_outputs": {"grammar": "root ::= nothing_here"}},
             "structured_outputs.grammar"),
            ({"structured_outputs": {"bogus": 1}}, "structured_outputs.bogus"),
            ({"guided_json": {"type": "object"}, "guided_regex": "a+"}, "guided_regex"),
        ]
        for body, param in cases:
            with self.subTest(body=body):
                with self.assertRaises(openai.BadRequestError) as ctx:
                    self.chat("hi", max_tokens=4, extra_body=body)
                self.assertEqual(ctx.exception.status_code, 400)
                self.assertEqual(ctx.exception.body.get("param"), param, ctx.exception.body)
        r = self.chat("hi", max_tokens=4)  # still serving
        self.assertTrue(r.choices[0].message.content is not None)

    WEATHER = {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 20},
            "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"], "additionalProperties": False}}}
    TIME = {"type": "function", "function": {
        "name": "get_time", "parameters": {"type": "object", "properties": {
            "zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}}}

    def test_tool_call_round_trip(self):
        messages = [{"role": "user", "content": "What is the weather in Paris?"}]
        for choice in ({"type": "function", "function": {"name": "get_weather"}}, "required"):
            with self.subTest(tool_choice=choice):
                r = self.client.chat.completions.create(
                    model="m", messages=messages, tools=[self.WEATHER, self.TIME],
                    tool_choice=choice, max_tokens=60, temperature=0)
                msg = r.choices[0].message
                self.assertEqual(r.choices[0].finish_reason, "tool_calls", msg)
                self.assertEqual(len(msg.tool_calls), 1, msg)
                call = msg.tool_calls[0]
                self.assertEqual(call.type, "function")
                tool = {"get_weather": self.WEATHER, "get_time": self.TIME}[call.function.name]
                if choice != "required":
                    self.assertEqual(call.function.name, "get_weather")
                jsonschema.validate(json.loads(call.function.arguments),
                                    tool["function"]["parameters"])
        # The call and the tool's answer go back; the model answers in text.
        messages += [{"role": "assistant", "content": None, "tool_calls": [
                         {"id": call.id, "type": "function",
                          "function": {"name": call.function.name,
                                       "arguments": call.function.arguments}}]},
                     {"role": "tool", "tool_call_id": call.id,
                      "content": json.dumps({"temperature": 21, "unit": "celsius"})}]
        r = self.client.chat.completions.create(model="m", messages=messages,
                                                tools=[self.WEATHER, self.TIME], max_tokens=30,
                                                temperature=0)
        self.assertIsNotNone(r.choices[0].message.content or r.choices[0].message.tool_calls)
        # tool_choice "none": no call is parsed, the text is the content.
        r = self.client.chat.completions.create(model="m", messages=messages[:1],
                                                tools=[self.WEATHER], tool_choice="none",
                                                max_tokens=10, temperature=0)
        self.assertIsNone(r.choices[0].message.tool_calls)
        for body, param in (({"tools": [self.WEATHER],
                              "tool_choice": {"type": "function", "function": {"name": "nope"}}},
                             "tool_choice"),
                            ({"tool_choice": "required"}, "tool_choice"),
                            ({"tools": [{"type": "function", "function": {"name": ""}}]},
                             "tools.0.function.name"),
                            ({"tools": [self.WEATHER], "tool_choice": "required",
                              "response_format": {"type": "json_object"}}, "tool_choice")):
            with self.subTest(body=body):
                with self.assertRaises(openai.BadRequestError) as ctx:
                    self.chat("hi", max_tokens=4, extra_body=body)
                self.assertEqual(ctx.exception.body.get("param"), param, ctx.exception.body)


def main():
    global BINARY
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    BINARY = sys.argv[1]
    unittest.main(argv=[sys.argv[0]], verbosity=2)


if __name__ == "__main__":
    main()
