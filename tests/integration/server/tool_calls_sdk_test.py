#!/usr/bin/env python3
"""Tool calls through `undercurrent serve` with the official `openai` SDK, per chat-template
family, streamed and not.

Two servers on SmolLM2-135M-Instruct, one with Meta's Llama 3.1 chat template
(tests/testdata/chat_templates/llama-3.1-instruct.jinja: tools rendered into the first user
message, the answer is `{"name": ..., "parameters": {...}}`) and one with Qwen 2.5's
(qwen2.5_tools.jinja: `<tool_call>` blocks). No Llama or Qwen checkpoint is available here, so
the calls' content is the 135M model's; the mechanics are the templates'. The server picks the
format from the template text, not from the model.

- Llama: a forced call (a named function, and "required") comes back as `tool_calls` whose
  arguments validate against the function's parameters (jsonschema), content null; the call and
  the tool's answer go back through the template (its ipython turn) and the model answers.
- Streams, both templates: `stream=True` with tools gives `delta.tool_calls` chunks that the
  SDK's own stream accumulation (`client.chat.completions.stream`) reassembles into exactly the
  message of the same request not streamed (greedy: the oracle is the non-streamed response),
  with finish_reason "tool_calls"; raw chunks carry no call text as content. With tool_choice
  "auto" the streamed and non-streamed messages agree too (content or calls).

Usage: tool_calls_sdk_test.py UNDERCURRENT_BINARY [TEST...]   (needs $UC_SMOLLM2_GGUF, and the `openai`
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

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 20},
        "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {
        "zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}}}
TOOLS = {"get_weather": WEATHER, "get_time": TIME}
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]


def start(template):
    gguf = smollm2_gguf()
    server = Server(BINARY, ["--model", gguf, "--served-model-name", "m", "--max-model-len",
                             "2048", "--max-num-seqs", "4", "--chat-template",
                             os.path.join(TEMPLATES, template)])
    client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=300)
    return server, client


class ToolCallsBase:
    TEMPLATE = None

    @classmethod
    def setUpClass(cls):
        cls.server, cls.client = start(cls.TEMPLATE)

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        if code != 0:
            raise RuntimeError("server exited with %d:\n%s" % (code, "".join(cls.server.log)))

    def create(self, **kwargs):
        return self.client.chat.completions.create(model="m", temperature=0, **kwargs)

    def check_call(self, call, name=None):
        self.assertEqual(call.type, "function")
        self.assertIn(call.function.name, TOOLS)
        if name is not None:
            self.assertEqual(call.function.name, name)
        jsonschema.validate(json.loads(call.function.arguments),
                            TOOLS[call.function.name]["function"]["parameters"])

    def test_streamed_calls_reassemble_into_the_unstreamed_message(self):
        for choice in ({"type": "function", "function": {"name": "get_weather"}}, "required",
                       "auto"):
            with self.subTest(tool_choice=choice):
                args = dict(messages=QUESTION, tools=[WEATHER, TIME], tool_choice=choice,
                            max_tokens=16 if choice == "auto" else 60)
                whole = self.create(**args).choices[0]
                with self.client.chat.completions.stream(model="m", temperature=0,
                                                         **args) as stream:
                    raw = [event.chunk for event in stream if event.type == "chunk"]
                    try:
                        final = stream.get_final_completion().choices[0]
                    except openai.LengthFinishReasonError as e:  # "auto" may run out of tokens
                        final = e.completion.choices[0]
                self.assertEqual(final.finish_reason, whole.finish_reason)
                self.assertEqual(final.message.content or None, whole.message.content or None)
                got = [(c.function.name, c.function.arguments) for c in
                       final.message.tool_calls or []]
                want = [(c.function.name, c.function.arguments) for c in
                        whole.message.tool_calls or []]
                self.assertEqual(got, want)
                if choice != "auto":
                    self.assertEqual(final.finish_reason, "tool_calls")
                    self.assertEqual(len(got), 1)
                    self.check_call(final.message.tool_calls[0])
                    # OpenAI's shape: ids and names in the first delta of each call, no call
                    # text as content.
                    deltas = [c.choices[0].delta for c in raw if c.choices]
                    heads = [t for d in deltas for t in d.tool_calls or [] if t.id]
                    self.assertEqual(len(heads), 1)
                    self.assertEqual(heads[0].index, 0)
                    self.assertEqual(heads[0].type, "function")
                    self.assertTrue(all(not d.content for d in deltas))


class LlamaToolCallsTest(ToolCallsBase, unittest.TestCase):
    TEMPLATE = "llama-3.1-instruct.jinja"

    def test_forced_call_round_trip(self):
        messages = list(QUESTION)
        for choice in ({"type": "function", "function": {"name": "get_weather"}}, "required"):
            with self.subTest(tool_choice=choice):
                r = self.create(messages=messages, tools=[WEATHER, TIME], tool_choice=choice,
                                max_tokens=60)
                msg = r.choices[0].message
                self.assertEqual(r.choices[0].finish_reason, "tool_calls", msg)
                self.assertIsNone(msg.content)
                self.assertEqual(len(msg.tool_calls), 1, msg)
                call = msg.tool_calls[0]
                self.check_call(call, "get_weather" if choice != "required" else None)
        # The call and the tool's answer go back (the template's ipython turn); the model answers.
        messages += [{"role": "assistant", "content": None, "tool_calls": [
                         {"id": call.id, "type": "function",
                          "function": {"name": call.function.name,
                                       "arguments": call.function.arguments}}]},
                     {"role": "tool", "tool_call_id": call.id,
                      "content": json.dumps({"temperature": 21, "unit": "celsius"})}]
        r = self.create(messages=messages, tools=[WEATHER, TIME], max_tokens=30)
        self.assertIn(r.choices[0].finish_reason, ("stop", "length", "tool_calls"))
        self.assertIsNotNone(r.choices[0].message.content or r.choices[0].message.tool_calls)
        # tool_choice "none": nothing is parsed.
        r = self.create(messages=QUESTION, tools=[WEATHER], tool_choice="none", max_tokens=10)
        self.assertIsNone(r.choices[0].message.tool_calls)
        with self.assertRaises(openai.BadRequestError) as ctx:
            self.create(messages=QUESTION, tools=[WEATHER], max_tokens=4,
                        tool_choice={"type": "function", "function": {"name": "nope"}})
        self.assertEqual(ctx.exception.body.get("param"), "tool_choice")


class QwenToolCallsTest(ToolCallsBase, unittest.TestCase):
    TEMPLATE = "qwen2.5_tools.jinja"


def main():
    global BINARY
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    BINARY = sys.argv[1]
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:], verbosity=2)


if __name__ == "__main__":
    main()
