#!/usr/bin/env python3
"""Train a logistic-regression probe on an `undercurrent capture` dataset, numpy only.

  train DATASET --point NAME [--layer L] [--positive LABEL] [--l2 C] --out DIR
      Fits p(label) = sigmoid(w.x + b) on the activations of one extraction point and layer
      (labels from the prompts file: true/false, 0/1, or strings with --positive). Writes
        DIR/probe.safetensors  "weight" [hidden_size] and "bias" [1], F32: the files the
                               built-in `linear` probe loads; its metadata records the
                               model fingerprint, layer and site it was trained on, which
                               undercurrent checks where it is deployed
        DIR/spec.yaml          a spec deploying it at the same point, layer and position:
                               probe_type linear with sigmoid: true, so its score is the
                               probability this script computes
        DIR/monitor.yaml       a cheap monitor: the same probe on every generated token at the
                               same layer, its scores aggregated as EMA-then-max (probe_type
                               ema_max, alpha 0.3, flag at 0.9)
  score PROBE_DIR DATASET
      Prints the Python model's score for every row of the probe's point and layer in DATASET,
      one JSON line each: {"prompt_id", "token_pos", "score", "label"}.
  check PROBE_DIR DATASET DEPLOYED.jsonl [--tolerance 1e-4]
      Compares the scores the deployed probe reported (`undercurrent generate --spec
      PROBE_DIR/spec.yaml --json`: each request's probing verdict, last_score) with the Python
      model's scores of the same prompts' captured activations, and reports the accuracy on
      their labels. Exit status 1 when any score differs by more than the tolerance.
  check-monitor PROBE_DIR DATASET DEPLOYED.jsonl [--tolerance 1e-4]
      The same for the monitor: DATASET captured with PROBE_DIR/monitor.yaml (every generated
      token), DEPLOYED from `generate --spec PROBE_DIR/monitor.yaml --json`; compares each
      request's verdict (max, final, fired_at) with EMA-then-max computed here.
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from undercurrent_dataset import Dataset, read_safetensors, write_safetensors  # noqa: E402


MONITOR_ALPHA = 0.3
MONITOR_THRESHOLD = 0.9


def sigmoid(z):
    z = np.asarray(z, dtype=np.float64)
    out = np.empty_like(z)
    pos = z >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-z[pos]))
    e = np.exp(z[~pos])
    out[~pos] = e / (1.0 + e)
    return out


def select(ds, point, layer):
    """The rows of one point and layer (the only layer when `layer` is None)."""
    layers = ds.point(point)["layers"]
    if layer is None:
        if len(layers) != 1:
            raise SystemExit(f"point {point!r} has layers {layers}; choose one with --layer")
        layer = layers[0]
    rows = ds.rows(point=point, layer=layer)
    if not rows:
        raise SystemExit(f"{ds.path}: no rows for point {point!r} at layer {layer}")
    return layer, rows


def labels_of(rows, positive):
    y = []
    for r in rows:
        label = r["label"]
        if positive is not None:
            y.append(1.0 if str(label) == positive else 0.0)
        elif isinstance(label, bool) or label in (0, 1):
            y.append(float(label))
        else:
            raise SystemExit(f"prompt {r['prompt_id']!r} has label {label!r}; labels must be "
                             "true/false or 0/1, or name the positive one with --positive")
    return np.array(y)


def fit_logistic(x, y, l2, iterations=100):
    """Newton's method on standardized features with an L2 penalty; returns (w, b) in the
    units of the raw activations, so that sigmoid(x @ w + b) is the model."""
    x = x.astype(np.float64)
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    z = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])
    theta = np.zeros(z.shape[1])
    penalty = np.full(z.shape[1], l2 * len(x))
    penalty[-1] = 0.0  # the intercept is not penalized
    for _ in range(iterations):
        p = sigmoid(z @ theta)
        gradient = z.T @ (p - y) + penalty * theta
        hessian = (z * (p * (1 - p))[:, None]).T @ z + np.diag(penalty) + 1e-9 * np.eye(len(theta))
        step = np.linalg.solve(hessian, gradient)
        theta -= step
        if np.max(np.abs(step)) < 1e-10:
            break
    w = theta[:-1] / scale
    b = theta[-1] - np.sum(theta[:-1] * mean / scale)
    return w, b


def load_probe(probe_dir):
    tensors = read_safetensors(os.path.join(probe_dir, "probe.safetensors"))
    with open(os.path.join(probe_dir, "probe.json"), encoding="utf-8") as f:
        info = json.load(f)
    return np.asarray(tensors["weight"], np.float64), float(tensors["bias"][0]), info


def python_scores(probe_dir, dataset):
    """(rows, scores) of the probe's point and layer in `dataset`, scored as the C++ probe does:
    in float64 from the stored float32 weights."""
    w, b, info = load_probe(probe_dir)
    ds = Dataset(dataset)
    _, rows = select(ds, info["point"], info["layer"])
    x = ds.activations(rows).astype(np.float64)
    return rows, sigmoid(x @ w + b), info


def train(args):
    ds = Dataset(args.dataset)
    layer, rows = select(ds, args.point, args.layer)
    x, y = ds.activations(rows), labels_of(rows, args.positive)
    if len(set(y)) != 2:
        raise SystemExit("the training rows need both labels")
    w, b = fit_logistic(x, y, args.l2)
    w32, b32 = w.astype(np.float32), np.array([b], dtype=np.float32)
    accuracy = np.mean((sigmoid(x.astype(np.float64) @ w32 + b32[0]) >= 0.5) == (y == 1))
    os.makedirs(args.out, exist_ok=True)
    point = ds.point(args.point)
    # The probe artifact's metadata (src/probe/probes/trained/artifact.h): what it was trained on,
    # which `undercurrent` checks against where it is deployed (--probe-artifact-policy).
    metadata = {"undercurrent.probe_version": "1", "point": args.point, "layer": layer,
                "layers": json.dumps([layer]),
                "tensor_type": point.get("tensor_type", "residual_stream"),
                "model": json.dumps(ds.manifest["fingerprint"]["model"], sort_keys=True)}
    write_safetensors(os.path.join(args.out, "probe.safetensors"), {"weight": w32, "bias": b32},
                      metadata)
    deployed = {k: point[k] for k in ("tensor_type", "position", "stride", "until", "count")
                if k in point}
    spec = {"version": "1", "extraction_points": [dict(
        name=args.point, layers=[layer], **deployed, probe_type="linear",
        probe_kind="single_shot",
        probe_args={"weights": "probe.safetensors", "sigmoid": True})]}
    with open(os.path.join(args.out, "spec.yaml"), "w", encoding="utf-8") as f:
        f.write("# A linear probe trained by train_linear_probe.py (JSON is valid YAML).\n")
        json.dump(spec, f, indent=2)
        f.write("\n")
    monitor = {"version": "1", "extraction_points": [dict(
        name="monitor", layers=[layer], tensor_type=point.get("tensor_type", "residual_stream"),
        position="generated[*]", probe_type="ema_max", probe_kind="trajectory",
        probe_args={"weights": "probe.safetensors", "sigmoid": True, "alpha": MONITOR_ALPHA,
                    "threshold": MONITOR_THRESHOLD, "action": "flag"})]}
    with open(os.path.join(args.out, "monitor.yaml"), "w", encoding="utf-8") as f:
        f.write("# A cheap monitor: the probe on every generated token, EMA-then-max.\n")
        json.dump(monitor, f, indent=2)
        f.write("\n")
    with open(os.path.join(args.out, "probe.json"), "w", encoding="utf-8") as f:
        json.dump({"point": args.point, "layer": layer, "rows": len(rows),
                   "train_accuracy": accuracy, "l2": args.l2}, f, indent=2)
        f.write("\n")
    print(f"trained on {len(rows)} rows of {args.point}/{layer} (hidden_size {x.shape[1]}): "
          f"train accuracy {accuracy:.3f}; wrote {args.out}/probe.safetensors, spec.yaml and "
          "monitor.yaml")


def score(args):
    rows, scores, _ = python_scores(args.probe, args.dataset)
    for r, s in zip(rows, scores):
        print(json.dumps({"prompt_id": r["prompt_id"], "token_pos": r["token_pos"],
                          "score": float(s), "label": r["label"]}))


def check(args):
    rows, scores, info = python_scores(args.probe, args.dataset)
    expected = {}
    for r, s in zip(rows, scores):
        expected.setdefault(r["prompt_id"], []).append((s, r["label"]))
    deployed = {}
    with open(args.deployed, encoding="utf-8") as f:
        for line in f:
            if line.startswith("{"):  # one JSON object per request
                result = json.loads(line)
                verdict = result["probing"][info["point"]]["verdict"]
                deployed[result["id"]] = verdict["last_score"]
    worst, correct, n = 0.0, 0, 0
    for prompt_id, got in deployed.items():
        if prompt_id not in expected:
            raise SystemExit(f"prompt {prompt_id!r} was deployed but is not in {args.dataset}")
        want, label = expected[prompt_id][-1]  # the verdict's last_score: the last row
        worst = max(worst, abs(got - want))
        if isinstance(label, bool) or label in (0, 1):
            correct += int((want >= 0.5) == bool(label))
            n += 1
    print(f"{len(deployed)} prompts: deployed linear probe vs Python model, max |diff| {worst:.3g}"
          + (f"; held-out accuracy {correct / n:.3f}" if n else ""))
    if worst > args.tolerance or not deployed:
        print(f"FAIL: scores differ by more than {args.tolerance}", file=sys.stderr)
        return 1
    return 0


def ema_max(scores, alpha):
    """(max over t of the EMA, the last EMA, index of the first EMA >= MONITOR_THRESHOLD)."""
    ema, best, fired = 0.0, -np.inf, None
    for t, s in enumerate(scores):
        ema = s if t == 0 else alpha * s + (1 - alpha) * ema
        best = max(best, ema)
        if fired is None and ema >= MONITOR_THRESHOLD:
            fired = t
    return best, ema, fired


def check_monitor(args):
    w, b, info = load_probe(args.probe)
    ds = Dataset(args.dataset)
    rows = ds.rows(point="monitor", layer=info["layer"])
    if not rows:
        raise SystemExit(f"{args.dataset}: no rows of point 'monitor' (capture it with "
                         f"{args.probe}/monitor.yaml)")
    x = ds.activations(rows).astype(np.float64)
    scores = sigmoid(x @ w + b)
    streams = {}
    for r, s in zip(rows, scores):
        streams.setdefault(r["prompt_id"], []).append((r["token_pos"], s))
    worst, compared, flagged, mismatched = 0.0, 0, 0, []
    with open(args.deployed, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("{"):
                continue
            result = json.loads(line)
            verdict = result["probing"]["monitor"]["verdict"]
            stream = sorted(streams.get(result["id"], []))
            best, final, fired = ema_max([s for _, s in stream], MONITOR_ALPHA)
            worst = max(worst, abs(verdict["max"] - best), abs(verdict["final"] - final))
            want_fired = stream[fired][0] if fired is not None else None
            if verdict["fired_at"] != want_fired:
                mismatched.append(result["id"])
            flagged += verdict["flagged"]
            compared += 1
    print(f"{compared} prompts: deployed EMA-max monitor vs numpy, max |diff| {worst:.3g}, "
          f"{flagged} flagged, {len(mismatched)} firing at another token")
    if worst > args.tolerance or mismatched or not compared:
        print("FAIL: " + (f"fired elsewhere: {mismatched}" if mismatched else
                          f"aggregates differ by more than {args.tolerance}"), file=sys.stderr)
        return 1
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("train")
    p.add_argument("dataset")
    p.add_argument("--point", required=True)
    p.add_argument("--layer", type=int)
    p.add_argument("--positive", help="the label value that counts as positive (string labels)")
    p.add_argument("--l2", type=float, default=1e-3, help="L2 penalty per training row")
    p.add_argument("--out", required=True)
    p = sub.add_parser("score")
    p.add_argument("probe")
    p.add_argument("dataset")
    p = sub.add_parser("check")
    p.add_argument("probe")
    p.add_argument("dataset")
    p.add_argument("deployed")
    p.add_argument("--tolerance", type=float, default=1e-4)
    p = sub.add_parser("check-monitor")
    p.add_argument("probe")
    p.add_argument("dataset")
    p.add_argument("deployed")
    p.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args()
    commands = {"train": train, "score": score, "check": check, "check-monitor": check_monitor}
    return commands[args.command](args) or 0


if __name__ == "__main__":
    sys.exit(main())
