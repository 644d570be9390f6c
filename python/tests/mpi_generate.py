"""Run by test_mpi.py, alone or as every rank of `mpirun -np N python mpi_generate.py`: generates
for three prompts with a recording probe and an inline ABORT at generated[3], and (on rank 0)
writes the token ids and the records to OUT.npz.  Usage: mpi_generate.py OUT TP PP MODEL"""

import sys

import numpy as np

from oracle_probes import AbortAt3, Keep
from undercurrent import ProbedModel


def point(name, probe_type, kind, position, layers):
    return {"name": name, "layers": layers, "tensor_type": "residual_stream", "position": position,
            "probe_type": probe_type, "probe_kind": kind}


out_path, tp, pp, model_path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
spec = {"extraction_points": [
    point("keep", "keep", "trajectory", "generated[*]", [0, 2, 4]),
    point("last", "keep", "trajectory", "prompt[-1]", [1, 3]),
    point("gate", "abort_at_3", "single_shot", "generated[*]", [3]),
]}
prompts = ["Once upon a time", "The little dog", "Lily wanted to"]
with ProbedModel.from_pretrained(model_path, spec=spec, probes={"keep": Keep, "abort_at_3": AbortAt3}, threads=1,
                                 tensor_parallel_size=tp, pipeline_parallel_size=pp) as model:
    outs = model.generate(prompts, max_new_tokens=12, ignore_eos=True)
arrays = {}
for i, out in enumerate(outs):
    arrays[f"tokens{i}"] = np.array(out.token_ids)
    arrays[f"aborted{i}"] = np.array([out.aborted, out.abort_point == "gate"])
    for name in ("keep", "last"):
        rows = out.probe_results[name].verdict
        arrays[f"{name}{i}_pos"] = np.array([(p, l) for p, l, _ in rows])
        arrays[f"{name}{i}_values"] = np.stack([v for _, _, v in rows])
np.savez(out_path, **arrays)
