"""Probe registries (0.1's tests/core/test_registry.py, ported: same behaviours, this package)."""

import threading
from importlib.metadata import EntryPoint

import pytest

from undercurrent.core import Probe, ProbeFactory, ProbeResult, registry
from undercurrent.core.registry import (
    ENTRY_POINT_GROUP,
    ProbeNotFoundError,
    ProbeRegistry,
    get_probe_factory,
    list_probes,
    register_probe,
    unregister_probe,
)


class ThresholdProbe(Probe):
    probe_kind = "single_shot"

    def __init__(self, threshold: float = 0.5) -> None:
        super().__init__()
        self.threshold = threshold

    def on_start(self, request_ctx):
        pass

    def on_activation(self, record):
        return None

    def on_end(self, request_ctx):
        return ProbeResult(self.request_id, self.extraction_point_name)


class PluginProbe(ThresholdProbe):
    probe_kind = "trajectory"


class AbstractProbe(Probe):
    probe_kind = "single_shot"


class NoKindProbe(Probe):
    def on_start(self, request_ctx):
        pass

    def on_activation(self, record):
        return None

    def on_end(self, request_ctx):
        return None


@pytest.fixture
def reg():
    return ProbeRegistry(load_entry_points=False)


def test_decorator_registers_and_returns_the_class(reg):
    @reg.register("thresh")
    class P(ThresholdProbe):
        pass

    assert reg.get("thresh") == ProbeFactory(P, {})
    assert "thresh" in reg and len(reg) == 1


def test_default_kwargs_reach_spawn(reg):
    reg.register("t", ThresholdProbe, threshold=0.9)
    assert reg.get("t").spawn("r", "p").threshold == 0.9
    assert reg.get("t").spawn("r", "p", threshold=0.1).threshold == 0.1


def test_functional_form_accepts_a_probe_factory(reg):
    reg.register("f", ProbeFactory(ThresholdProbe, {"threshold": 0.1}), threshold=0.2)
    assert reg.get("f").probe_kwargs == {"threshold": 0.2}


def test_duplicate_name_raises_unless_override(reg):
    reg.register("dup", ThresholdProbe)

    class Other(ThresholdProbe):
        pass

    with pytest.raises(ValueError, match=r"already registered.*override=True"):
        reg.register("dup", Other)
    reg.register("dup", Other, override=True)
    assert reg.get("dup").probe_cls is Other


def test_redefining_the_same_class_replaces_without_override(reg):
    def define():
        @reg.register("cell")
        class CellProbe(ThresholdProbe):
            pass

        return CellProbe

    define()
    second = define()
    assert reg.get("cell").probe_cls is second


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (dict, "expected a subclass of undercurrent.core.Probe"),
        (ThresholdProbe(), "expected a subclass"),
        (NoKindProbe, "probe_kind must be one of"),
        (AbstractProbe, "is abstract"),
    ],
)
def test_invalid_probes_are_refused(reg, bad, match):
    with pytest.raises(TypeError, match=match):
        reg.register("bad", bad)
    assert "bad" not in reg


@pytest.mark.parametrize("name", ["", None, 3])
def test_invalid_names_are_refused(reg, name):
    with pytest.raises(ValueError, match="non-empty string"):
        reg.register(name, ThresholdProbe)


def test_unregister(reg):
    reg.register("gone", ThresholdProbe)
    reg.unregister("gone")
    assert "gone" not in reg
    with pytest.raises(ProbeNotFoundError):
        reg.unregister("gone")


def test_lookup_miss_suggests_the_closest_name(reg):
    reg.register("linear_probe", ThresholdProbe)
    reg.register("mlp_probe", ThresholdProbe)
    with pytest.raises(ProbeNotFoundError) as info:
        reg.get("linear_prob")
    msg = str(info.value)
    assert isinstance(info.value, KeyError) and not msg.startswith(("'", '"'))
    assert "no probe registered for probe_type='linear_prob'" in msg
    assert "Did you mean: 'linear_probe'" in msg
    assert "Known probe types: 'linear_probe', 'mlp_probe'" in msg
    assert ENTRY_POINT_GROUP in msg


def test_lookup_miss_on_an_empty_registry(reg):
    with pytest.raises(ProbeNotFoundError, match=r"Known probe types: \(none\)"):
        reg.get("anything")


def test_registries_are_isolated():
    a = ProbeRegistry(load_entry_points=False)
    b = ProbeRegistry(load_entry_points=False)
    a.register("only_in_a", ThresholdProbe)
    assert a.list() == ["only_in_a"] and b.list() == [] and "only_in_a" not in list_probes()


def test_concurrent_registration_is_thread_safe(reg):
    barrier = threading.Barrier(8)
    errors = []

    def worker(i):
        barrier.wait()
        try:
            for j in range(50):
                reg.register(f"p{i}_{j}", ThresholdProbe)
                reg.get(f"p{i}_{j}")
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(reg) == 8 * 50


def test_module_level_functions_use_the_default_registry():
    @register_probe("_default_fn", threshold=0.3)
    class DefaultFnProbe(ThresholdProbe):
        pass

    try:
        assert get_probe_factory("_default_fn") == ProbeFactory(DefaultFnProbe, {"threshold": 0.3})
        assert "_default_fn" in list_probes() and "_default_fn" in registry.default_registry
    finally:
        unregister_probe("_default_fn")
    assert "_default_fn" not in registry.default_registry


def test_entry_points_load_lazily_on_a_miss(monkeypatch):
    calls = []
    eps = [EntryPoint(name="plugin_probe", value=f"{__name__}:PluginProbe", group=ENTRY_POINT_GROUP)]

    def fake(*, group):
        calls.append(group)
        return [ep for ep in eps if ep.group == group]

    monkeypatch.setattr(registry, "entry_points", fake)
    reg = ProbeRegistry()
    reg.register("explicit", ThresholdProbe)
    assert reg.get("explicit").probe_cls is ThresholdProbe
    assert calls == []
    assert reg.get("plugin_probe").probe_cls is PluginProbe
    assert calls == [ENTRY_POINT_GROUP] and "plugin_probe" in reg


def test_mutable_class_state_is_refused_at_definition():
    from undercurrent.errors import ProbeDefinitionError

    with pytest.raises(ProbeDefinitionError, match="class-level list"):

        class Shared(ThresholdProbe):  # noqa: F841
            seen = []
