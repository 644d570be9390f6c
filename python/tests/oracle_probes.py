"""The Python probes the oracle tests share (test_oracles.py in one process, mpi_generate.py on
every rank under mpirun): Keep records every row it sees, AbortAt3 aborts at generated[3]."""

import numpy as np

from undercurrent import Probe, ProbeAction, ProbeResult, ProbeSignal


class Keep(Probe):
    """Trajectory probe whose verdict is [(token_pos, layer, float32 row copy), ...]."""

    probe_kind = "trajectory"

    def on_start(self, ctx):
        self.rows = []

    def on_activation(self, record):
        self.rows.append((record.token_pos, record.layer, np.array(record.tensor, dtype=np.float32, copy=True)))

    def on_end(self, ctx):
        return ProbeResult(ctx.request_id, self.extraction_point_name, verdict=self.rows)


class AbortAt3(Probe):
    """Inline probe that aborts the request when it sees generated[3]."""

    probe_kind = "single_shot"

    def on_start(self, ctx):
        pass

    def on_activation(self, record):
        return ProbeSignal(ProbeAction.ABORT, confidence=1.0) if record.generated_index == 3 else None

    def on_end(self, ctx):
        return ProbeResult(ctx.request_id, self.extraction_point_name)
