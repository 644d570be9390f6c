#!/usr/bin/env python3
"""Recorded token streams and the streaming aggregations over them, in numpy, for
src/probe/aggregate_probes_test.cc.

The streams: the residual stream after block 2 of the bundled stories260K (models/stories260K,
run by transformers in float32) at every position but the first (BOS) of three prompts, each
followed by its 24-token greedy continuation. The probes' weights are seeded random vectors (numpy
default_rng(41)), scaled so the scores move around their thresholds.

Writes tests/testdata/probes/aggregate/:
  streams.json   {"hidden_size", "streams": [[[float32 x hidden] per token] per stream]}
  linear.json    {"weight": [...], "bias": b}             per-token linear score
  mlp.safetensors fc1.weight [8, hidden], fc1.bias [8], fc2.weight [1, 8], fc2.bias [1]
  attention.json {"query": [...], "value": [...], "bias": b}
  reference.json per case (probe type and args): per stream, after every token, the
                 statistic the threshold is compared with ("values": the EMA, the rolling mean,
                 the pooled score; the verdict's "final" after that token) and its running
                 maximum ("max": the verdict's "max"), float64; the per-token score; the
                 threshold used (halfway between two aggregates near the 90th percentile, so
                 the cases fire in some streams, late or early, and not in others) and the index
                 of the first token whose statistic reaches it (null: never).

The formulas (aggregate_probes.h):
  linear score      s = w.x + b, optionally sigmoid
  mlp score         s = fc2(relu(fc1(x))), optionally sigmoid
  ema_max           ema_1 = s_1, ema_t = a s_t + (1 - a) ema_(t-1); reported max_t ema_t
  rolling_mean_max  m_t = mean(s_(max(1, t-W+1)) .. s_t); reported max_t m_t
  attention_pool    p_t = sum_(i<=t) softmax(q.x)_i (v.x_i) + b, optionally sigmoid
computed here directly from the definitions (the softmax over the whole prefix each time, not
online), in float64 from the float32 activations.

Needs torch, transformers, numpy. Usage: python3 tools/reference/make_aggregate_reference.py
"""
import json
import os
import struct

import numpy as np
import torch
from transformers import AutoModelForCausalLM

from refutil import dump_json, versions

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "models/stories260K")
OUT = os.path.join(ROOT, "tests/testdata/probes/aggregate")
PROMPTS = [
    [1, 403, 407, 261, 378, 269, 325, 474, 286, 263, 291, 340],
    [1, 333, 280, 410, 261, 284, 305, 424],
    [1, 296, 265, 374, 262, 272, 276, 312, 340, 271, 399, 286, 281, 265, 396, 307],
]
GREEDY = 24
LAYER = 2  # residual stream after block 2 = hidden_states[3]


def record_streams():
    model = AutoModelForCausalLM.from_pretrained(MODEL, torch_dtype=torch.float32)
    model.eval()
    streams = []
    for prompt in PROMPTS:
        ids = list(prompt)
        with torch.no_grad():
            for _ in range(GREEDY):
                logits = model(torch.tensor([ids])).logits
                ids.append(int(logits[0, -1].argmax()))
            hidden = model(torch.tensor([ids]), output_hidden_states=True).hidden_states
        # Position 0 (BOS) is the same in every stream: left out.
        streams.append(hidden[LAYER + 1][0, 1:].numpy().astype(np.float32))
    return streams


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def write_safetensors(path, tensors):
    header = {}
    offset = 0
    blobs = []
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def main():
    streams = record_streams()
    hidden = streams[0].shape[1]
    rng = np.random.default_rng(41)
    scale = 1.0 / np.sqrt(hidden) / float(np.mean([np.abs(s).mean() for s in streams]))
    w = (rng.standard_normal(hidden) * scale).astype(np.float32)
    b = np.float32(0.125)
    fc1_w = (rng.standard_normal((8, hidden)) * scale).astype(np.float32)
    fc1_b = (rng.standard_normal(8) * 0.1).astype(np.float32)
    fc2_w = (rng.standard_normal((1, 8)) * 0.5).astype(np.float32)
    fc2_b = np.array([0.0625], dtype=np.float32)
    q = (rng.standard_normal(hidden) * scale * 2.0).astype(np.float32)
    v = (rng.standard_normal(hidden) * scale).astype(np.float32)
    qb = np.float32(-0.25)

    f64 = lambda a: np.asarray(a, dtype=np.float64)

    def linear_scores(x, use_sigmoid):
        s = f64(x) @ f64(w) + float(b)
        return sigmoid(s) if use_sigmoid else s

    def mlp_scores(x, use_sigmoid):
        h = np.maximum(f64(x) @ f64(fc1_w).T + f64(fc1_b), 0.0)
        s = h @ f64(fc2_w)[0] + float(fc2_b[0])
        return sigmoid(s) if use_sigmoid else s

    def ema(s, alpha):
        out, value = [], 0.0
        for t, x in enumerate(s):
            value = x if t == 0 else alpha * x + (1 - alpha) * value
            out.append(value)
        return out

    def rolling_mean(s, window):
        return [float(np.mean(s[max(0, t - window + 1): t + 1])) for t in range(len(s))]

    def attention_pool(x, use_sigmoid):
        a = f64(x) @ f64(q)
        vals = f64(x) @ f64(v)
        out = []
        for t in range(len(a)):
            p = np.exp(a[: t + 1] - a[: t + 1].max())
            pooled = float((p / p.sum()) @ vals[: t + 1]) + float(qb)
            out.append(sigmoid(pooled) if use_sigmoid else pooled)
        return out, vals

    cases = []

    def add(name, probe_type, args, per_stream):
        aggregates, scores = zip(*per_stream)  # per token: the statistic, the score
        # Halfway between two distinct aggregates near the 90th percentile, so float rounding in the
        # engine cannot move a crossing.
        values = np.unique(np.concatenate([np.asarray(a) for a in aggregates]))
        k = len(values) * 9 // 10
        threshold = float((values[k - 1] + values[k]) / 2)
        fired = []
        for agg in aggregates:
            hits = [t for t, a in enumerate(agg) if a >= threshold]
            fired.append(hits[0] if hits else None)
        cases.append({"name": name, "probe_type": probe_type, "args": args,
                      "threshold": threshold, "fired_at": fired,
                      "values": [list(map(float, a)) for a in aggregates],
                      "max": [list(map(float, np.maximum.accumulate(a))) for a in aggregates],
                      "scores": [list(map(float, s)) for s in scores]})

    add("ema_max_linear", "ema_max", {"alpha": 0.3, "weights": "linear.json"},
        [(ema(linear_scores(x, False), 0.3), linear_scores(x, False)) for x in streams])
    add("ema_max_mlp_sigmoid", "ema_max",
        {"alpha": 0.5, "scorer": "mlp", "weights": "mlp.safetensors", "sigmoid": True},
        [(ema(mlp_scores(x, True), 0.5), mlp_scores(x, True)) for x in streams])
    add("rolling_mean_max_5", "rolling_mean_max", {"window": 5, "weights": "linear.json"},
        [(rolling_mean(linear_scores(x, False), 5), linear_scores(x, False)) for x in streams])
    add("rolling_mean_max_1_sigmoid", "rolling_mean_max",
        {"window": 1, "weights": "linear.json", "sigmoid": True},
        [(rolling_mean(linear_scores(x, True), 1), linear_scores(x, True)) for x in streams])
    add("attention_pool", "attention_pool", {"weights": "attention.json"},
        [attention_pool(x, False) for x in streams])
    add("attention_pool_sigmoid", "attention_pool", {"weights": "attention.json", "sigmoid": True},
        [attention_pool(x, True) for x in streams])

    os.makedirs(OUT, exist_ok=True)
    dump_json({"hidden_size": hidden, "layer": LAYER,
               "streams": [s.tolist() for s in streams]}, os.path.join(OUT, "streams.json"))
    dump_json({"weight": w.tolist(), "bias": float(b)}, os.path.join(OUT, "linear.json"))
    dump_json({"query": q.tolist(), "value": v.tolist(), "bias": float(qb)},
              os.path.join(OUT, "attention.json"))
    write_safetensors(os.path.join(OUT, "mlp.safetensors"),
                      {"fc1.weight": fc1_w, "fc1.bias": fc1_b, "fc2.weight": fc2_w,
                       "fc2.bias": fc2_b})
    # Aggregates are float64 and compared to 1e-6 relative: written with 17 digits, not
    # dump_json's float32 rounding.
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump({"meta": {"versions": versions(),
                            "script": "tools/reference/make_aggregate_reference.py"},
                   "cases": cases}, f, indent=1)
        f.write("\n")
    for c in cases:
        print(c["name"], "threshold", round(c["threshold"], 4), "fired_at", c["fired_at"])


if __name__ == "__main__":
    main()
