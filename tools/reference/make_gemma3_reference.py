#!/usr/bin/env python3
"""Reference logits and greedy continuations of Gemma 3 270M (Q4_K_M GGUF) from transformers.

Produces tests/testdata/gemma3/reference.json for tests/integration/models/gemma3_test.cc: transformers
loads the GGUF file (every tensor dequantized by the gguf package to float32, norms converted
back to w by its Gemma tensor processor) and runs it in float32 with eager attention. The model
file itself is not committed (Gemma's terms); scripts/fetch-gemma3.sh downloads it, and this
script takes its path as the first argument (default build/models/gemma3/gemma-3-270m-q4_k_m.gguf).

For each prompt: the input ids (tokenized by transformers from the GGUF vocabulary, BOS first),
and at each recorded position the 32 largest logits (ids and values) and the logits of 64 fixed
vocabulary ids (numpy default_rng(7), the same for every position), the argmax, and a greedy
continuation of 24 tokens (generate(do_sample=False), KV cache, EOS not a stop) with the
top-1/top-2 margin at every step. Prompts:
  story     plain text
  code      plain text (code)
  chat      a conversation through Gemma 3's chat template
            (tests/testdata/chat_templates/gemma-3-it.jinja, add_generation_prompt)
  long      ~600 tokens of text, longer than the 512-token sliding window; positions recorded:
            every 16th and the last 8.

Run with: python 3.11.7, torch 2.15.0 (CPU), transformers 5.24.0, gguf 0.19.0, numpy 2.4.6
(also in the output's meta). ~1 min on 2 cores.
Usage: python3 tools/reference/make_gemma3_reference.py [GGUF]
"""

import os
import sys

import numpy as np

os.environ.setdefault("TQDM_DISABLE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refutil import dump_json, versions  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
N_NEW = 24
TOP_K = 32

STORY = "Once upon a time, in a small village at the edge of a great forest, there lived a girl"
CODE = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n"
CHAT = [
    {"role": "system", "content": "You are a concise assistant."},
    {"role": "user", "content": "What is the capital of France? Answer in one sentence."},
]
LONG_UNIT = (
    "The river carried the boat past fields of wheat and quiet farms, and the travellers "
    "counted the bridges as they went: the stone bridge, the iron bridge, the wooden one. "
)


def main():
    import torch
    import transformers

    transformers.utils.logging.set_verbosity_error()
    torch.set_num_threads(2)
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        REPO, "build", "models", "gemma3", "gemma-3-270m-q4_k_m.gguf")
    d, name = os.path.dirname(os.path.abspath(path)), os.path.basename(path)
    tok = transformers.AutoTokenizer.from_pretrained(d, gguf_file=name)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        d, gguf_file=name, dtype=torch.float32, attn_implementation="eager").eval()
    vocab = model.config.vocab_size
    sample_ids = sorted(np.random.default_rng(7).choice(vocab, 64, replace=False).tolist())
    with open(os.path.join(REPO, "tests", "testdata", "chat_templates", "gemma-3-it.jinja")) as f:
        template = f.read()

    prompts = {
        "story": tok(STORY).input_ids,
        "code": tok(CODE).input_ids,
        "chat": tok.apply_chat_template(CHAT, chat_template=template, add_generation_prompt=True,
                                        tokenize=True, return_dict=True)["input_ids"],
    }
    long_ids = tok(LONG_UNIT * 30).input_ids
    prompts["long"] = long_ids[:600]
    assert len(prompts["long"]) == 600 and prompts["long"][0] == tok.bos_token_id

    cases = []
    for pname, ids in prompts.items():
        assert ids[0] == tok.bos_token_id, pname
        with torch.no_grad():
            logits = model(torch.tensor([ids]), use_cache=False).logits[0].float().numpy()
        n = len(ids)
        if pname == "long":
            rec = sorted(set(list(range(0, n, 16)) + list(range(n - 8, n))))
        else:
            rec = list(range(n))
        rows = []
        for p in rec:
            r = logits[p]
            top = np.argsort(-r, kind="stable")[:TOP_K]
            rows.append({
                "position": p,
                "top_ids": [int(i) for i in top],
                "top_logits": [float(r[i]) for i in top],
                "sample_logits": [float(r[i]) for i in sample_ids],
            })
        gen_cfg = transformers.GenerationConfig(
            do_sample=False, max_new_tokens=N_NEW, min_new_tokens=N_NEW, eos_token_id=None,
            pad_token_id=0, num_beams=1, temperature=None, top_k=None, top_p=None)
        t = torch.tensor([ids])
        with torch.no_grad():
            g = model.generate(t, generation_config=gen_cfg, attention_mask=torch.ones_like(t),
                               return_dict_in_generate=True, output_logits=True)
        new = g.sequences[0, n:].tolist()
        margins = []
        for i, l in enumerate(g.logits):
            r = l[0].float().numpy()
            o = np.argsort(-r, kind="stable")[:2]
            assert int(o[0]) == new[i]
            margins.append(float(r[o[0]] - r[o[1]]))
        cases.append({
            "name": pname,
            "input_ids": [int(i) for i in ids],
            "positions": rows,
            "greedy": {"new_ids": new, "top2_margins": margins, "min_margin": min(margins),
                       "text": tok.decode(new)},
        })
        print(f"{pname}: {n} ids, greedy {tok.decode(new)!r}, min margin {min(margins):.4f}")

    out = {
        "meta": {
            "versions": versions(),
            "script": "tools/reference/make_gemma3_reference.py",
            "model": name,
            "model_sha256": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            "compute": "transformers from the GGUF (gguf dequantization), float32, eager attention",
            "vocab_size": vocab,
            "top_k": TOP_K,
        },
        "sample_ids": sample_ids,
        "cases": cases,
    }
    dump_json(out, os.path.join(REPO, "tests", "testdata", "gemma3", "reference.json"))


if __name__ == "__main__":
    main()
