"""The package's public names: 0.1's front door is pinned, and importing stays light."""

import subprocess
import sys

import undercurrent

FRONT_DOOR = [
    "ProbedModel",
    "GenerationOutput",
    "probe",
    "register_probe",
    "Probe",
    "ExtractionPoint",
    "load_spec",
    "ProbingError",
    "__version__",
]

ADVANCED = [
    "ActivationRecord",
    "ExecutionMode",
    "FileLogSink",
    "InMemoryMetricsRegistry",
    "InterventionMode",
    "InterventionPolicy",
    "MetricsSink",
    "MetricsSnapshot",
    "OverflowPolicy",
    "ProbeAction",
    "ProbeFactory",
    "ProbeKind",
    "ProbeNotFoundError",
    "ProbeResult",
    "ProbeSignal",
    "ProbeSpec",
    "RequestContext",
    "SpecValidationError",
    "TensorType",
    "TimeoutAction",
    "WebhookLogSink",
    "chain",
    "drop_keys",
    "redact_keys",
]


VLLM_STYLE = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "Activations"]


def test_front_door_comes_first_in_all():
    assert undercurrent.__all__[: len(FRONT_DOOR)] == FRONT_DOOR


def test_every_name_in_all_resolves():
    for name in undercurrent.__all__:
        assert getattr(undercurrent, name) is not None, name
    assert set(ADVANCED) <= set(undercurrent.__all__)
    assert set(VLLM_STYLE) <= set(undercurrent.__all__)


def test_unknown_attribute_raises_attribute_error():
    try:
        undercurrent.NotAThing  # noqa: B018
    except AttributeError as exc:
        assert "NotAThing" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def test_version_is_the_projects():
    assert undercurrent.__version__.count(".") == 2


def test_errors_are_probing_errors_and_builtin_types():
    from undercurrent import ProbeNotFoundError, ProbingError, SpecValidationError

    assert issubclass(SpecValidationError, ProbingError) and issubclass(SpecValidationError, ValueError)
    assert issubclass(ProbeNotFoundError, ProbingError) and issubclass(ProbeNotFoundError, KeyError)


def test_import_is_light():
    code = (
        "import sys, undercurrent; undercurrent.Probe; undercurrent.probe; "
        "print(sorted(m for m in ('torch', 'numpy', 'undercurrent._core') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
