"""Several processes from Python (label `mpi`): `mpirun -np 2 python SCRIPT` at TP 2 and at PP 2
gives rank 0 the token ids and records of one process (values within DESIGN.md's 1e-5), and an
inline Python ABORT at generated[3] returns exactly 4 tokens in every topology."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.mpi


def run(root, tiny_model, out, tp, pp):
    cmd = [sys.executable, str(root / "python" / "tests" / "mpi_generate.py"), str(out), str(tp), str(pp), tiny_model]
    if tp * pp > 1:
        cmd = ["mpirun", "-np", str(tp * pp), "--oversubscribe", "--bind-to", "none"] + cmd
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return np.load(out)


@pytest.fixture(scope="module")
def single(root, tiny_model, tmp_path_factory):
    return run(root, tiny_model, tmp_path_factory.mktemp("mpi") / "single.npz", 1, 1)


@pytest.mark.parametrize("tp,pp", [(2, 1), (1, 2)])
def test_ranks_give_the_records_of_one_process(root, tiny_model, tmp_path, single, tp, pp):
    if shutil.which("mpirun") is None:
        pytest.fail("mpirun is not installed")
    multi = run(root, tiny_model, tmp_path / "multi.npz", tp, pp)
    assert sorted(multi.files) == sorted(single.files)
    for i in range(3):
        assert list(single[f"tokens{i}"]) == list(multi[f"tokens{i}"])
        assert len(multi[f"tokens{i}"]) == 4 and multi[f"aborted{i}"].all()  # ABORT at generated[3]
        for name in ("keep", "last"):
            assert np.array_equal(single[f"{name}{i}_pos"], multi[f"{name}{i}_pos"])
            np.testing.assert_allclose(multi[f"{name}{i}_values"], single[f"{name}{i}_values"], rtol=1e-5, atol=1e-5)
    assert len(single["keep0_pos"]) == 4 * 3  # generated[0..3] at 3 layers: nothing after the abort


def test_several_ranks_without_a_launcher_are_refused(tiny_model):
    from undercurrent import ProbedModel, ProbingError

    with pytest.raises(ProbingError, match="mpirun -np 2"):
        ProbedModel.from_pretrained(tiny_model, tensor_parallel_size=2)
