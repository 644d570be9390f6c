#!/usr/bin/env python3
"""Per-request steering and what transformers does with it, for
tests/integration/steering/request_steering_test.cc.

Writes tests/testdata/steering/p_layer2.gguf (the conditional cases' vector as a llama.cpp
control-vector file, for specs) and tests/testdata/steering/requests.json: per case, the steering vectors of one request
(layer, site, tokens, scale, norm_match, values) as the engine takes them
(worker::SteeringConfig), a 16-token greedy continuation of a fixed prompt (EOS not a stop),
and the logits at the last 4 prompt positions and every generated position of
prompt + continuation, all under the same steering.

From the bundled stories260K (models/stories260K, Hugging Face layout), run by transformers in
float32 with forward hooks, each masked to the token positions it applies to (prompt: position
< len(prompt); generated: the rest; all):
  residual_stream at layer N  model.model.layers[N] output + scale * v
  attn_out at layer N         model.model.layers[N].self_attn output[0] + scale * v
  mlp_out at layer N          model.model.layers[N].mlp output + scale * v
  norm_match                  v is rescaled per token to scale * |h| / |v|, h being the
                              residual stream it joins (for residual_stream: the layer output)
A case's from_position (conditional steering switched on by a probe) masks out every position
before it; until_position (switched off) every position from it on. Greedy decoding recomputes the whole sequence each step (no KV cache), so every position's
mask is exact.

Seeded (numpy default_rng(23)); deterministic. Needs torch, transformers, numpy.
Usage: python3 tools/reference/make_request_steering_reference.py
"""
import os

import numpy as np
import torch
from gguf import GGUFWriter
from transformers import AutoModelForCausalLM

from refutil import dump_json, versions

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "models/stories260K")
OUT = os.path.join(ROOT, "tests/testdata/steering")
PROMPT = [1, 403, 407, 261, 378, 269, 325, 474, 286, 263, 291, 340, 305, 424, 261, 284, 410, 261]
GREEDY = 16
LOGIT_PROMPT_ROWS = 4


def mask_for(tokens, length, n_prompt, start, until):
    pos = torch.arange(length)
    keep = (pos >= start) & (pos < until)
    if tokens == "prompt":
        keep &= pos < n_prompt
    elif tokens == "generated":
        keep &= pos >= n_prompt
    return keep.float()[:, None]


def install(model, vectors, n_prompt, start, until):
    handles = []
    for vec in vectors:
        v = torch.tensor(vec["values"], dtype=torch.float32)
        layer = model.model.layers[vec["layer"]]
        module = {"residual_stream": layer, "attn_out": layer.self_attn, "mlp": None,
                  "mlp_out": layer.mlp}[vec["site"]]

        def hook(_module, _inputs, output, v=v, vec=vec):
            t = output[0] if isinstance(output, tuple) else output
            m = mask_for(vec["tokens"], t.shape[1], n_prompt, start, until)
            if vec["norm_match"]:
                assert vec["site"] == "residual_stream"
                add = vec["scale"] * t.norm(dim=-1, keepdim=True) / v.norm() * v
            else:
                add = vec["scale"] * v
            t = t + m * add
            return (t,) + tuple(output[1:]) if isinstance(output, tuple) else t

        handles.append(module.register_forward_hook(hook))
    return handles


def run(model, vectors, start, until):
    handles = install(model, vectors, len(PROMPT), start, until)
    try:
        with torch.no_grad():
            ids = list(PROMPT)
            for _ in range(GREEDY):
                logits = model(torch.tensor([ids])).logits[0]
                ids.append(int(logits[-1].argmax()))
            logits = model(torch.tensor([ids])).logits[0].numpy()
    finally:
        for h in handles:
            h.remove()
    return ids[len(PROMPT):], logits


def main():
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32)
    model.eval()
    hidden = model.config.hidden_size
    rng = np.random.default_rng(23)

    def direction(norm):
        v = rng.standard_normal(hidden).astype(np.float32)
        return [float(x) for x in v / np.linalg.norm(v) * norm]

    p, q, r = direction(5.0), direction(1.5), direction(1.5)

    def vec(layer, site, tokens, scale, values, norm_match=False):
        return {"layer": layer, "site": site, "tokens": tokens, "scale": scale,
                "norm_match": norm_match, "values": values}

    cases = [
        ("none", []),
        ("prompt_only", [vec(2, "residual_stream", "prompt", 1.0, p)]),
        ("generated_only", [vec(2, "residual_stream", "generated", 1.0, p)]),
        ("both", [vec(2, "residual_stream", "all", 1.0, p)]),
        ("attn_and_mlp", [vec(1, "attn_out", "all", 1.2, q), vec(3, "mlp_out", "all", -0.8, r)]),
        ("norm_matched", [vec(3, "residual_stream", "generated", 0.6, q, True),
                          vec(1, "residual_stream", "all", 0.5, r)]),
    ]
    # Conditional steering switched on from generated token 4's position (a probe flagged the
    # activation of generated[3]).
    # And switched off from there (action: stop).
    starts = {"from_generated_4": len(PROMPT) + 4}
    untils = {"until_generated_4": len(PROMPT) + 4}
    cases.append(("from_generated_4", [vec(2, "residual_stream", "all", 1.0, p)]))
    cases.append(("until_generated_4", [vec(2, "residual_stream", "all", 1.0, p)]))
    out = []
    n = len(PROMPT)
    rows = list(range(n - LOGIT_PROMPT_ROWS, n + GREEDY))
    for name, vectors in cases:
        start = starts.get(name, 0)
        until = untils.get(name, 1 << 30)
        greedy, logits = run(model, vectors, start, until)
        out.append({"name": name, "vectors": vectors, "from_position": start,
                    "until_position": until if name in untils else None, "greedy": greedy,
                    "logit_rows": rows,
                    "logits": [[float(x) for x in logits[i]] for i in rows]})
        print(f"{name}: greedy {greedy}")
    # The conditional cases' vector as a control-vector file, for specs (`vector:`).
    w = GGUFWriter(os.path.join(OUT, "p_layer2.gguf"), "controlvector")
    w.add_string("controlvector.model_hint", "llama")
    w.add_uint32("controlvector.layer_count", 1)
    w.add_tensor("direction.2", np.array(p, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    dump_json({"meta": {"script": "tools/reference/make_request_steering_reference.py",
                        "model": "models/stories260K", "versions": versions(),
                        "hooks": "forward hooks on the layer / self_attn / mlp outputs, masked "
                                 "to the positions each vector applies to"},
               "input_ids": PROMPT, "cases": out}, os.path.join(OUT, "requests.json"))


if __name__ == "__main__":
    main()
