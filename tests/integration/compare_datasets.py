#!/usr/bin/env python3
"""Loads two `undercurrent capture` datasets with examples/undercurrent_dataset.py (numpy only,
the safetensors header parsed by hand) and checks they hold the same rows: the same index
entries and activations within a relative tolerance per row. Prints one JSON summary line;
exit status 1 when they differ.

    compare_datasets.py DATASET_A DATASET_B [--tolerance 1e-5]
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples"))
from undercurrent_dataset import Dataset  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--tolerance", type=float, default=1e-5)
    args = parser.parse_args()
    a, b = Dataset(args.a), Dataset(args.b)
    problems = []
    if not (a.complete and b.complete):
        problems.append("a dataset is incomplete")
    if a.index != b.index:
        problems.append("the index entries differ")
    xa, xb = a.activations(a.index), b.activations(b.index)
    summary = {"rows": len(a.index), "hidden_size": a.hidden_size,
               "sum_a": float(np.sum(xa, dtype=np.float64)),
               "sum_b": float(np.sum(xb, dtype=np.float64))}
    if xa.shape == xb.shape and len(xa):
        diff = np.abs(xa.astype(np.float64) - xb.astype(np.float64)).max(axis=1)
        scale = np.abs(xb.astype(np.float64)).max(axis=1)
        rel = np.where(scale > 0, diff / np.where(scale > 0, scale, 1), diff)
        summary["max_abs"] = float(diff.max())
        summary["max_rel"] = float(rel.max())
        if rel.max() > args.tolerance:
            problems.append(f"row {int(rel.argmax())} differs by {rel.max():.3g} relative")
    elif xa.shape != xb.shape:
        problems.append(f"shapes differ: {xa.shape} vs {xb.shape}")
    summary["problems"] = problems
    print(json.dumps(summary))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
