"""`@probe` function probes (0.1's tests/core/test_function_probe.py, ported)."""

import numpy as np
import pytest

from undercurrent import ActivationRecord, ProbeAction, ProbeSignal, probe
from undercurrent.core import ProbeFactory, ProbeRegistry, RequestContext, default_registry
from undercurrent.core.function_probe import FunctionProbe
from undercurrent.errors import ProbeDefinitionError


@pytest.fixture
def reg():
    return ProbeRegistry(load_entry_points=False)


@pytest.fixture
def ctx():
    return RequestContext("req-1", {"model": "m"}, None)


def rec(value=1.0):
    return ActivationRecord("req-1", "ep", 0, 0, "residual_stream", np.full(4, value, np.float32), True)


def run(cls, ctx, values, **kwargs):
    p = cls.spawn("req-1", "ep", **kwargs)
    p.on_start(ctx)
    signals = [p.on_activation(rec(v)) for v in values]
    return signals, p.on_end(ctx)


def test_decorator_returns_a_registered_single_shot_probe_subclass(reg):
    @probe("norm", threshold=1.0, registry=reg)
    def norm(record):
        return float(np.linalg.norm(record.tensor))

    assert issubclass(norm, FunctionProbe) and norm.probe_kind == "single_shot"
    assert reg.get("norm").probe_cls is norm
    assert norm.fn(rec(1.0)) == 2.0


def test_bare_decorator_is_named_after_the_function(reg, monkeypatch):
    monkeypatch.setattr("undercurrent.core.function_probe.default_registry", reg)

    @probe
    def my_probe(record):
        return None

    assert reg.get("my_probe").probe_cls is my_probe


def test_register_false_skips_registration(reg):
    @probe("x", registry=reg, register=False)
    def x(record):
        return None

    assert "x" not in reg


def test_registers_in_the_default_registry_by_default():
    @probe("_fn_default")
    def f(record):
        return None

    try:
        assert default_registry.get("_fn_default").probe_cls is f
    finally:
        default_registry.unregister("_fn_default")


def test_return_values_map_to_signals(ctx):
    @probe("t", threshold=0.5, register=False)
    def t(record):
        v = float(record.tensor[0])
        return {0.0: None, 1.0: True, 2.0: False, 3.0: 0.7, 4.0: 0.2, 5.0: 3}.get(v)

    signals, result = run(t, ctx, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    assert signals[0] is None
    assert signals[1].action is ProbeAction.ABORT and signals[1].confidence == 1.0
    assert signals[2].action is ProbeAction.CONTINUE and signals[2].confidence is None
    assert signals[3].action is ProbeAction.ABORT and signals[3].metadata == {"score": 0.7, "probe": "t"}
    assert signals[4].action is ProbeAction.CONTINUE
    assert signals[5].action is ProbeAction.ABORT and signals[5].confidence == 3.0
    assert result.verdict == {"flagged": True, "max_score": 3.0, "n": 5}
    assert len(result.signal_history) == 5


def test_no_threshold_records_scores_and_never_flags(ctx):
    @probe("s", register=False)
    def s(record):
        return 10.0

    signals, result = run(s, ctx, [1.0])
    assert signals[0].action is ProbeAction.CONTINUE and result.verdict["flagged"] is False


def test_action_flag_and_probe_signal_pass_through(ctx):
    sig = ProbeSignal(ProbeAction.FLAG, {"why": "x"}, 0.3)

    @probe("f", threshold=0.0, action="flag", register=False)
    def f(record):
        return sig if record.tensor[0] > 1 else 1.0

    signals, _ = run(f, ctx, [1.0, 2.0])
    assert signals[0].action is ProbeAction.FLAG and signals[1] is sig


def test_bad_return_type_raises_type_error(ctx):
    @probe("b", register=False)
    def b(record):
        return "high"

    with pytest.raises(TypeError, match="returned str"):
        run(b, ctx, [1.0])


def test_exceptions_propagate(ctx):
    @probe("e", register=False)
    def e(record):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        run(e, ctx, [1.0])


def test_on_end_without_activations(ctx):
    @probe("n", register=False)
    def n(record):
        return 1.0

    _, result = run(n, ctx, [])
    assert result.verdict == {"flagged": False, "max_score": None, "n": 0}


def test_instances_are_isolated(ctx):
    @probe("i", threshold=0.5, register=False)
    def i(record):
        return 1.0

    a = i.spawn("a", "ep")
    b = i.spawn("b", "ep")
    a.on_activation(rec())
    assert b.on_end(RequestContext("b", {}, None)).verdict["n"] == 0


@pytest.mark.parametrize(
    "fn",
    [lambda: None, lambda a, b: None, lambda *a: None],
    ids=["no-arg", "two-args", "varargs"],
)
def test_bad_signatures_are_refused(fn):
    with pytest.raises(ProbeDefinitionError):
        probe("bad", register=False)(fn)


def test_reserved_parameter_names_are_refused():
    with pytest.raises(ProbeDefinitionError, match="threshold"):

        @probe("r", register=False)
        def r(record, *, threshold=1):
            return None


def test_bad_threshold_action_and_name_are_refused():
    with pytest.raises(TypeError, match="threshold"):
        probe("x", threshold="high", register=False)
    with pytest.raises(ValueError, match="action must be one of"):
        probe("x", action="stop", register=False)
    with pytest.raises(ValueError, match="non-empty string"):
        probe("", register=False)


def test_spawn_kwargs_override_and_are_checked(ctx):
    @probe("k", threshold=0.5, register=False)
    def k(record, *, scale: float = 1.0):
        return float(record.tensor[0]) * scale

    signals, _ = run(k, ctx, [1.0], threshold=5.0, scale=2.0)
    assert signals[0].action is ProbeAction.CONTINUE and signals[0].confidence == 2.0
    with pytest.raises(TypeError, match="unexpected argument"):
        k.spawn("r", "p", scal=2.0)

    @probe("req", register=False)
    def req(record, *, weights):
        return None

    with pytest.raises(TypeError, match="requires keyword argument"):
        req.spawn("r", "p")


def test_probe_factory_spawns_with_kwargs(ctx):
    @probe("pf", register=False)
    def pf(record, *, offset: float = 0.0):
        return float(record.tensor[0]) + offset

    p = ProbeFactory(pf, {"offset": 1.0}).spawn("r", "ep")
    assert p.on_activation(rec(1.0)).confidence == 2.0
