#!/usr/bin/env python3
"""The official OpenAI Python SDK drives `undercurrent serve` on SmolLM2-135M-Instruct.

A completion, a chat completion (rendered with the model's ChatML template, answered
coherently), a streamed chat completion, logprobs (completions with echo, chat logprobs with
top_logprobs, streamed and not) as the SDK's typed objects, a request an inline probe flags
(finish_reason "content_flagged", with the probing fields read back from the SDK's objects),
and steering through `extra_body`: a registered module (steering_name) and the same vectors
inline (steering_vectors, arrays and base64) give the text `undercurrent generate
--control-vector` gives, unlike the unsteered completion; bad vectors are BadRequestErrors.

Usage: openai_sdk_test.py UNDERCURRENT_BINARY SCRATCH_DIR   (needs $UC_SMOLLM2_GGUF and the
`openai` package: scripts/install-deps.sh puts it in build/venv)
"""
import base64
import json
import os
import subprocess
import sys
import unittest

from uc_server import Server, smollm2_gguf

try:
    import numpy as np
    import openai
except ImportError:
    sys.exit("error: the openai package is missing; run scripts/install-deps.sh "
             "(it installs tests/requirements.txt into build/venv)")

BINARY = None
SCRATCH = None

# One server for every test. `gate` flags a long answer: a norm gate so low that it fires on
# the first activation it sees, placed at the 24th generated token, so answers that end sooner
# are never flagged (and say so: evaluated false).
SPEC = """version: "1"
extraction_points:
  - name: gate
    layers: [15]
    tensor_type: residual_stream
    position: generated[24]
    probe_type: norm_gate
    probe_kind: single_shot
    probe_args: {threshold: 0.001}
"""


class OpenAiSdkTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        gguf = smollm2_gguf()
        spec = os.path.join(SCRATCH, "gate.yaml")
        with open(spec, "w") as f:
            f.write(SPEC)
        # A control vector: fixed random directions on blocks 10 to 14 (30 blocks, hidden 576),
        # strong enough to change greedy text.
        rng = np.random.default_rng(5)
        cls.vectors = np.zeros((30, 576), dtype=np.float32)
        for layer in range(10, 15):
            v = rng.standard_normal(576).astype(np.float32)
            cls.vectors[layer] = v / np.linalg.norm(v) * 12.0
        cls.vector_file = os.path.join(SCRATCH, "direction.npy")
        np.save(cls.vector_file, cls.vectors)
        cls.gguf = gguf
        cls.server = Server(BINARY, ["--model", gguf, "--served-model-name", "smollm2", "--spec", spec,
                             "--api-key", "test-key", "--max-model-len", "2048",
                             "--steering-module", "drift=" + cls.vector_file])
        cls.client = openai.OpenAI(base_url=cls.server.url, api_key="test-key", max_retries=0,
                                   timeout=600)

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        if code != 0:
            raise RuntimeError(f"server exited {code}:\n" + "".join(cls.server.log))

    def test_models(self):
        models = self.client.models.list()
        self.assertEqual([m.id for m in models.data], ["smollm2"])

    def test_completion(self):
        r = self.client.completions.create(model="smollm2", prompt="The capital of France is",
                                           max_tokens=8, temperature=0)
        self.assertEqual(r.object, "text_completion")
        self.assertEqual(len(r.choices), 1)
        self.assertIn("Paris", r.choices[0].text)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens)
        self.assertGreater(r.usage.prompt_tokens, 0)
        self.assertEqual(r.usage.completion_tokens, 8)
        self.assertEqual(r.choices[0].finish_reason, "length")
        probing = r.model_extra["probing"]
        self.assertEqual(probing["gate"]["evaluated"], False)
        self.assertEqual(probing["gate"]["flagged"], False)

    def test_chat_completion_is_coherent(self):
        r = self.client.chat.completions.create(
            model="smollm2", temperature=0, max_tokens=48,
            messages=[{"role": "user", "content": "What is the capital of France?"}])
        answer = r.choices[0].message.content
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertIn("Paris", answer)
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertNotIn("<|im_end|>", answer)
        self.assertFalse(r.model_extra["flagged"])
        self.assertIn("gate", r.model_extra["probing"])

    def test_streamed_chat_completion(self):
        stream = self.client.chat.completions.create(
            model="smollm2", temperature=0, max_tokens=48, stream=True,
            stream_options={"include_usage": True},
            messages=[{"role": "user", "content": "What is the capital of France?"}])
        text, finish, usage, probing, roles = "", None, None, None, 0
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            if (chunk.model_extra or {}).get("probing") is not None:
                probing = chunk.model_extra["probing"]
            for choice in chunk.choices:
                if choice.delta.role:
                    roles += 1
                text += choice.delta.content or ""
                finish = choice.finish_reason or finish
        self.assertEqual(roles, 1)
        self.assertIn("Paris", text)
        self.assertEqual(finish, "stop")
        self.assertIsNotNone(usage)
        self.assertGreater(usage.completion_tokens, 0)
        self.assertIsNotNone(probing)
        self.assertIn("gate", probing)
        # The same request without streaming says the same thing.
        r = self.client.chat.completions.create(
            model="smollm2", temperature=0, max_tokens=48,
            messages=[{"role": "user", "content": "What is the capital of France?"}])
        self.assertEqual(r.choices[0].message.content, text)
        self.assertEqual(r.usage.completion_tokens, usage.completion_tokens)

    def test_flagged_chat_completion(self):
        messages = [{"role": "user", "content": "Write a long story about a dragon."}]
        r = self.client.chat.completions.create(model="smollm2", temperature=0, max_tokens=64,
                                                messages=messages)
        choice = r.choices[0]
        self.assertEqual(choice.finish_reason, "content_flagged")
        self.assertEqual(choice.model_extra["flagged_by"], "gate")
        self.assertIsInstance(choice.model_extra["flagged_score"], float)
        self.assertTrue(r.model_extra["flagged"])
        self.assertEqual(r.model_extra["flagged_by"], "gate")
        self.assertEqual(r.model_extra["probing"]["gate"]["flagged"], True)
        self.assertEqual(r.model_extra["probing"]["gate"]["evaluated"], True)
        self.assertEqual(r.model_extra["probing"]["gate"]["execution_mode"], "inline")
        # Token 24's activation stopped it: nothing after that token came out.
        self.assertEqual(r.usage.completion_tokens, 25)

        stream = self.client.chat.completions.create(model="smollm2", temperature=0,
                                                     max_tokens=64, messages=messages,
                                                     stream=True)
        finish, flagged_by, text, probing = None, None, "", None
        for chunk in stream:
            extra = chunk.model_extra or {}
            if extra.get("probing") is not None:
                probing = extra["probing"]
            for c in chunk.choices:
                text += c.delta.content or ""
                if c.finish_reason:
                    finish = c.finish_reason
                    flagged_by = (c.model_extra or {}).get("flagged_by")
        self.assertEqual(finish, "content_flagged")
        self.assertEqual(flagged_by, "gate")
        self.assertEqual(text, choice.message.content)
        self.assertEqual(probing["gate"]["flagged"], True)

    def test_steering_through_extra_body(self):
        prompt = "The capital of France is"

        def complete(**extra):
            r = self.client.completions.create(model="smollm2", prompt=prompt, max_tokens=16,
                                               temperature=0, extra_body=extra or None)
            return r.choices[0].text

        cli = subprocess.run([BINARY, "generate", "--model", self.gguf, "--prompt", prompt,
                              "--max-tokens", "16", "--temperature", "0", "--json",
                              "--control-vector", self.vector_file],
                             capture_output=True, text=True, timeout=600)
        self.assertEqual(cli.returncode, 0, cli.stderr)
        cli_text = json.loads(cli.stdout)["text"]
        plain = complete()
        named = complete(steering_name="drift")
        inline = complete(steering_vectors={"residual_stream": {
            str(layer): (self.vectors[layer].tolist() if layer % 2 else
                         base64.b64encode(self.vectors[layer].astype("<f4").tobytes()).decode())
            for layer in range(10, 15)}})
        self.assertNotEqual(plain, named)
        self.assertEqual(named, cli_text)
        self.assertEqual(inline, cli_text)
        listed = self.client.get("/steering", cast_to=object)
        self.assertEqual([m["name"] for m in listed["data"]], ["drift"])
        self.assertEqual(listed["data"][0]["layers"], [10, 11, 12, 13, 14])
        with self.assertRaises(openai.BadRequestError) as e:
            complete(steering_vectors={"residual_stream": {"12": [0.5] * 575}})
        self.assertEqual(e.exception.body["param"], "steering_vectors.residual_stream.12")
        with self.assertRaises(openai.BadRequestError) as e:
            complete(steering_name="calm")
        self.assertEqual(e.exception.body["param"], "steering_name")

    def test_logprobs_parse_in_the_sdk(self):
        # Completions with echo, as lm-eval-harness's loglikelihood requests them.
        r = self.client.completions.create(model="smollm2", prompt="The capital of France is",
                                           max_tokens=1, temperature=0, echo=True, logprobs=2)
        lp = r.choices[0].logprobs
        self.assertEqual(len(lp.tokens), r.usage.prompt_tokens + 1)
        self.assertEqual(len(lp.token_logprobs), len(lp.tokens))
        self.assertIsNone(lp.token_logprobs[0])
        self.assertIsNone(lp.top_logprobs[0])
        self.assertTrue(r.choices[0].text.startswith("The capital of France is"))
        self.assertEqual(lp.token_logprobs[-1], max(lp.top_logprobs[-1].values()))
        self.assertEqual(len(lp.text_offset), len(lp.tokens))
        # Chat logprobs, typed by the SDK; greedy tokens are their rows' top entries.
        c = self.client.chat.completions.create(
            model="smollm2", temperature=0, max_tokens=6, logprobs=True, top_logprobs=3,
            messages=[{"role": "user", "content": "What is the capital of France?"}])
        content = c.choices[0].logprobs.content
        self.assertEqual(len(content), c.usage.completion_tokens)
        for entry in content:
            self.assertEqual(len(entry.top_logprobs), 3)
            self.assertEqual(entry.logprob, entry.top_logprobs[0].logprob)
            self.assertEqual(bytes(entry.bytes).decode("utf-8", "replace"), entry.token)
            self.assertLessEqual(entry.logprob, 0.0)
        # Streamed, the same entries arrive chunk by chunk.
        streamed = []
        for chunk in self.client.chat.completions.create(
                model="smollm2", temperature=0, max_tokens=6, logprobs=True, top_logprobs=3,
                stream=True,
                messages=[{"role": "user", "content": "What is the capital of France?"}]):
            for choice in chunk.choices:
                if choice.logprobs is not None and choice.logprobs.content:
                    streamed += choice.logprobs.content
        self.assertEqual([e.logprob for e in streamed], [e.logprob for e in content])
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.completions.create(model="smollm2", prompt="x", logprobs=21)
        self.assertEqual(e.exception.body["param"], "logprobs")
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.completions.create(model="smollm2", prompt="x", n=0)
        self.assertEqual(e.exception.body["param"], "n")

    def test_errors_are_sdk_exceptions(self):
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.completions.create(model="smollm2", prompt="x", max_tokens=8,
                                           extra_body={"spec": "other.yaml"})
        self.assertEqual(e.exception.code, "per_request_spec_not_allowed")
        with self.assertRaises(openai.NotFoundError):
            self.client.completions.create(model="gpt-4", prompt="x")
        with self.assertRaises(openai.AuthenticationError):
            openai.OpenAI(base_url=self.server.url, api_key="wrong",
                          max_retries=0).models.list()


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    BINARY, SCRATCH = sys.argv[1], sys.argv[2]
    os.makedirs(SCRATCH, exist_ok=True)
    unittest.main(argv=sys.argv[:1], verbosity=2)
