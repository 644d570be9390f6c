"""Shared helpers for the reference-data scripts in tools/reference/.

Not a generator itself. Provides:
  - dump_json(obj, path): deterministic JSON writer that prints every float as the shortest
    "%.9g"-style text that round-trips the float32 value (floats are first rounded to float32),
    puts lists of scalars on one line, and sorts nothing (insertion order is kept).
  - versions(): the package versions recorded in every output's "meta".
  - sha256_file(path)
"""

import hashlib
import math
import platform
import sys

import numpy as np


def _fmt_float(x):
    f = np.float32(x)
    if not math.isfinite(float(f)):
        raise ValueError(f"non-finite float {x!r} cannot be written to JSON")
    # shortest repr that round-trips float32 (at most 9 significant digits)
    for digits in range(6, 10):
        s = "%.*g" % (digits, float(f))
        if np.float32(float(s)) == f:
            break
    if "e" not in s and "." not in s and "n" not in s:
        s += ".0"
    return s


def _is_scalar(v):
    return isinstance(v, (bool, int, float, str, type(None), np.integer, np.floating, np.bool_))


def _enc(v, indent, level):
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return _fmt_float(v)
    if isinstance(v, str):
        import json

        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if isinstance(v, (list, tuple)):
        if all(_is_scalar(e) for e in v):
            return "[" + ", ".join(_enc(e, indent, level + 1) for e in v) + "]"
        pad = " " * (indent * (level + 1))
        end = " " * (indent * level)
        return "[\n" + ",\n".join(pad + _enc(e, indent, level + 1) for e in v) + "\n" + end + "]"
    if isinstance(v, dict):
        if not v:
            return "{}"
        pad = " " * (indent * (level + 1))
        end = " " * (indent * level)
        items = []
        for k, e in v.items():
            items.append(pad + _enc(str(k), indent, level + 1) + ": " + _enc(e, indent, level + 1))
        return "{\n" + ",\n".join(items) + "\n" + end + "}"
    raise TypeError(f"cannot encode {type(v)}")


def dump_json(obj, path, indent=1):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(_enc(obj, indent, 0))
        f.write("\n")


def versions(*extra_modules):
    out = {"python": platform.python_version()}
    for name in ("numpy", "torch", "transformers", "tokenizers", "safetensors", "gguf", "accelerate") + tuple(
        extra_modules
    ):
        try:
            from importlib.metadata import version

            out[name] = version(name)
        except Exception:  # not installed
            pass
    return out


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def add_script_dir_to_path():
    import os

    d = os.path.dirname(os.path.abspath(__file__))
    if d not in sys.path:
        sys.path.insert(0, d)


def run_fixture_cases(cases, make_case, description, default_out):
    """The command line of the make_*_fixtures scripts: `--out DIR` (default `default_out`) and
    `--only NAME...`; quiets transformers, pins torch to 2 threads (the fixtures are made the
    same way everywhere) and calls make_case(case, index, out) for each selected case, index
    being the case's position in `cases` (its seed offset)."""
    import argparse
    import os

    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", default=default_out)
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()

    import torch
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(2)
    os.makedirs(args.out, exist_ok=True)
    for i, case in enumerate(cases):
        if args.only and case["name"] not in args.only:
            continue
        make_case(case, i, args.out)
