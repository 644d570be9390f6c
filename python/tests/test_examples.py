"""examples/python: Undercurrent 0.1's quickstart.py and function_probe.py, changed only in the
model argument, run as scripts and print what they print on 0.1."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest


def run(root, script, *args):
    env = dict(os.environ)
    return subprocess.run(
        [sys.executable, str(root / "examples" / "python" / script), *args],
        capture_output=True, text=True, check=True, cwd=root, env=env, timeout=600,
    ).stdout


def test_quickstart_on_the_tiny_model(root):
    out = run(root, "quickstart.py")
    assert re.fullmatch(r"GenerationOutput\(text='.*', probe_results=\{prompt_norm: verdict=[0-9.]+\}\)\n", out, re.S), out


@pytest.mark.model
def test_quickstart_on_smollm2(root, smollm2):
    out = run(root, "quickstart.py", smollm2)
    assert re.fullmatch(r"GenerationOutput\(text='.*', probe_results=\{prompt_norm: verdict=[0-9.]+\}\)\n", out, re.S), out


def test_function_probe(root):
    if importlib.util.find_spec("torch") is None:
        pytest.skip("function_probe.py builds a torch.nn.Linear: torch is not installed")
    out = run(root, "function_probe.py")
    assert re.match(r"score: [0-9.e-]+\naction: continue metadata: \{'score': [0-9.e-]+, 'probe': 'toxicity'\}\n", out), out


def test_llm_example_generates_captures_and_steers(root):
    out = run(root, "llm.py")
    lines = out.splitlines()
    assert re.fullmatch(r"'Once upon a time' -> '.+' \((length|stop)\)", lines[0]), out
    assert re.fullmatch(r"captured \(\d+, 64\) rows; generated rows of prompt 0: \(\d+, 64\)", lines[2]), out
    assert lines[3].startswith("steered: '"), out
