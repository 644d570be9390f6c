"""`ProbedModel`: a local model served by the engine with probes attached (Undercurrent 0.1's
front door), and `GenerationOutput`.

Differences from 0.1, where 0.1 was wrong or weak (README "Moving from Undercurrent 0.1"): a
list of prompts runs in one continuous batch (``max_concurrency`` caps the sequences running at
once, not threads); an inline ABORT is token-exact (no token after the triggering one is
returned); ``temperature=None`` means greedy, as 0.1's default Hugging Face backend did; models
are local Hugging Face folders or GGUF files (or an in-memory transformers model, written to a
temporary folder first).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .core.probe import ProbeFactory
from .core.registry import ProbeNotFoundError, ProbeRegistry, default_registry
from .core.result import ProbeResult
from .core.signal import ProbeAction, ProbeSignal
from .errors import ProbingError, ProbingRuntimeError, ProbingTypeError, ProbingValueError, SpecValidationError, did_you_mean
from .spec import ProbeSpec, load_spec

logger = logging.getLogger("undercurrent")

_PREVIEW = 60

# ProbedModel keyword arguments that configure the engine (the CLI's flags), and their types.
ENGINE_OPTIONS: dict[str, type | tuple[type, ...]] = {
    "threads": int,
    "max_model_len": int,
    "max_num_seqs": int,
    "max_num_batched_tokens": int,
    "max_prefill_chunk": int,
    "kv_cache_memory": (int, str),
    "matmul": str,
    "batch_invariant": bool,
    "tokenizer": (str, os.PathLike),
    "tensor_parallel_size": int,
    "pipeline_parallel_size": int,
    "enable_expert_parallel": bool,
    "step_timeout": (int, float),
}
_ROUTER_OPTIONS = {
    "worker_pool_size": "workers",
    "default_queue_depth": "default_queue_depth",
    "default_overflow_policy": "default_overflow_policy",
    "drain_timeout": "drain_timeout",
    "circuit_breaker_threshold": "circuit_breaker_threshold",
}


@dataclass
class GenerationOutput:
    """One prompt's generation: 0.1's fields (text, prompt, request_id, probe_results, aborted,
    abort_reason, abort_signal, abort_point) and this engine's (token_ids, prompt_token_ids,
    finish_reason "stop" | "length" | "abort", stop_reason, usage, metrics)."""

    text: str
    prompt: str
    request_id: str
    probe_results: Mapping[str, ProbeResult] = field(default_factory=dict)
    aborted: bool = False
    abort_reason: str | None = None
    abort_signal: ProbeSignal | None = None
    abort_point: str | None = None
    token_ids: list[int] = field(default_factory=list)
    prompt_token_ids: list[int] = field(default_factory=list)
    finish_reason: str = "length"
    stop_reason: str = ""
    usage: dict[str, int] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)

    def __repr__(self) -> str:
        text = self.text if len(self.text) <= _PREVIEW else self.text[: _PREVIEW - 1] + "…"
        results = ", ".join(f"{name}: verdict={_short(r.verdict)}" for name, r in self.probe_results.items())
        parts = [f"text={text!r}"]
        if self.aborted:
            parts.append(f"aborted=True, abort_point={self.abort_point!r}")
        parts.append(f"probe_results={{{results}}}")
        return f"GenerationOutput({', '.join(parts)})"


def _short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _bytes(value: int | str) -> int:
    if isinstance(value, int):
        return value
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]?)(i?B)?\s*", value, re.IGNORECASE)
    if not m:
        raise ProbingValueError(f"kv_cache_memory: expected bytes or a size such as '2GiB', got {value!r}")
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m.group(2).upper()]
    return int(float(m.group(1)) * scale)


def _core() -> Any:
    from . import _core

    return _core


# Open models, closed at exit before MPI ends (rank 0's close releases the other ranks).
_OPEN: weakref.WeakSet[ProbedModel] = weakref.WeakSet()


def _finalize_mpi() -> None:
    for model in list(_OPEN):
        model.close()
    _core().finalize_mpi()


atexit.register(lambda: _finalize_mpi() if "undercurrent._core" in sys.modules else None)


def _error(exc: Exception) -> ProbingError:
    """A _core.Error as 0.1's exception types."""
    code, message = (exc.args + ("", ""))[:2] if len(exc.args) >= 2 else ("", str(exc))
    if "unknown probe_type" in message:
        name = re.search(r"unknown probe_type '([^']*)'", message)
        err = ProbeNotFoundError(name.group(1) if name else "", [])
        err.message = message
        err.args = (message,)
        return err
    if "extraction_points[" in message or "steering[" in message or "spec" in message.split(":")[0]:
        return SpecValidationError(message)
    return ProbingValueError(message)


# What a tokenizer's save_pretrained writes, and what the engine reads from a model folder.
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json",
                    "vocab.json", "merges.txt", "added_tokens.json", "generation_config.json")


def _save_in_memory_model(model: Any, tokenizer: Any, folder: str, engine_options: dict[str, Any]) -> None:
    """Writes an in-memory transformers model (anything with ``save_pretrained`` and ``config``)
    to ``folder`` as safetensors with its tokenizer: ``tokenizer`` when given (a transformers
    tokenizer, saved beside the weights, or a path the engine reads), else the tokenizer files of
    the folder the model was loaded from (``name_or_path``). torch and transformers are used only
    through the objects given; nothing is imported here."""
    try:
        model.save_pretrained(folder, safe_serialization=True)
    except TypeError:  # transformers 5 always writes safetensors and has no such argument
        model.save_pretrained(folder)
    names = os.listdir(folder)
    if "config.json" not in names or not any(n.endswith(".safetensors") for n in names):
        raise ProbingValueError(
            f"model: {type(model).__name__}.save_pretrained wrote no config.json and safetensors weights "
            "(pass a transformers PreTrainedModel, or its saved folder)"
        )
    if tokenizer is not None:
        if hasattr(tokenizer, "save_pretrained"):
            tokenizer.save_pretrained(folder)
        elif isinstance(tokenizer, (str, os.PathLike)):
            engine_options["tokenizer"] = tokenizer
        else:
            raise ProbingTypeError(
                f"tokenizer: expected a transformers tokenizer or a path, got {type(tokenizer).__name__}"
            )
        return
    if any(n in names for n in ("tokenizer.json", "tokenizer.model")):
        return  # save_pretrained wrote one
    source = getattr(model, "name_or_path", None) or getattr(model.config, "_name_or_path", None)
    if isinstance(source, str) and os.path.isdir(source):
        for name in _TOKENIZER_FILES:
            if os.path.isfile(os.path.join(source, name)) and name not in names:
                shutil.copyfile(os.path.join(source, name), os.path.join(folder, name))
    if not any(os.path.isfile(os.path.join(folder, n)) for n in ("tokenizer.json", "tokenizer.model")):
        raise ProbingValueError(
            "an in-memory model needs its tokenizer: pass tokenizer= (a transformers tokenizer or a "
            f"tokenizer file); the model's name_or_path {source!r} is not a local folder with one"
        )


def reserved_kv_cache_bytes() -> int:
    """The KV cache bytes the open models of this process reserved, together."""
    return int(_core().reserved_kv_cache_bytes())


class ProbedModel:
    """A local model with probes attached; use it as a context manager or call `close()`.

    ``model``: a Hugging Face model folder, a ``.gguf`` file, or an in-memory ``transformers``
    model (written to a temporary safetensors folder, removed at `close()`; its tokenizer is
    ``tokenizer=`` when given, else the one in the folder it was loaded from). ``spec``: a YAML
    path or string, a dict, a list of `ExtractionPoint`, a `ProbeSpec`, or None. ``probes``:
    ``{probe_type: Probe subclass | ProbeFactory}`` or a `ProbeRegistry` (default: the global
    registry); the engine's built-in probe types (linear, mlp, norm_gate, ...) need no
    registration and mix with Python ones in one spec. ``on_result(GenerationOutput)`` is called
    once per finished prompt. ``log_sink``: a `FileLogSink`, a `WebhookLogSink` (both written by
    the engine), any object with 0.1's ``write_signal`` / ``write_result`` (a `LogSink`
    subclass), or a list of them. ``max_concurrency``: sequences the engine runs at once. Other
    keyword arguments are engine options (`ENGINE_OPTIONS`: threads, matmul, batch_invariant,
    kv_cache_memory, max_model_len, ...).
    """

    def __init__(
        self,
        model: Any = None,
        *,
        spec: Any = None,
        probes: Mapping[str, Any] | ProbeRegistry | None = None,
        on_result: Callable[[GenerationOutput], None] | None = None,
        log_sink: Any = None,
        metrics_sink: Any = None,
        max_concurrency: int | None = None,
        router_kwargs: Mapping[str, Any] | None = None,
        backend: str = "undercurrent",
        device: str | None = None,
        **engine_options: Any,
    ) -> None:
        self._closed = True
        self._core_model: Any = None
        self._tmpdir: str | None = None
        self._on_result = on_result
        self._py_sinks: list[Any] = []  # LogSinks written in Python
        self._record_buffer: Any = None  # _core.RecordBuffer: the engine's records for them
        self.log_sink_errors = 0  # calls into a Python LogSink that raised
        from .router import MetricsSink

        if metrics_sink is not None and not isinstance(metrics_sink, MetricsSink):
            raise ProbingTypeError(f"metrics_sink must be a MetricsSink (e.g. InMemoryMetricsRegistry), got {metrics_sink!r}")
        self._metrics_sink = metrics_sink
        if backend not in ("undercurrent", "hf"):
            raise ProbingValueError(f"backend={backend!r}: this package serves models with its own engine only")
        if device not in (None, "cpu"):
            raise ProbingValueError(f"device={device!r}: this build runs on the CPU only")
        self._spec: ProbeSpec | None = load_spec(spec) if spec is not None else None
        registry = self._registry(probes)
        path = self._model_path(model, engine_options)
        try:
            options = self._engine_options(path, engine_options, max_concurrency)
            probing = self._probing_options(router_kwargs, log_sink)
            python_probes, self._bridges = self._python_probes(registry)
        except BaseException:
            self._cleanup()
            raise
        spec_text = ""
        spec_path = ""
        if self._spec is not None:
            if self._spec.source is not None:
                spec_path = str(self._spec.source)
            else:
                spec_text = self._spec.text or ""
        core = _core()
        try:
            self._core_model = core.Model.open(
                options, os.fspath(model) if isinstance(model, (str, os.PathLike)) else type(model).__name__,
                spec_text, spec_path, python_probes, probing,
            )
        except core.Error as exc:
            self._cleanup()
            raise _error(exc) from None
        if self._core_model.is_worker:
            # A rank other than 0 of `mpirun -np N python SCRIPT`: it served rank 0's model until
            # that closed; the rest of the script is rank 0's.
            self._core_model = None
            self._cleanup()
            _finalize_mpi()
            raise SystemExit(0)
        self._closed = False
        _OPEN.add(self)

    @classmethod
    def from_pretrained(cls, model: Any = None, **kwargs: Any) -> ProbedModel:
        """Loads `model` and attaches probes; see the class docstring."""
        return cls(model, **kwargs)

    # -- set-up ------------------------------------------------------------------------------

    @staticmethod
    def _registry(probes: Any) -> ProbeRegistry:
        if probes is None:
            return default_registry
        if isinstance(probes, ProbeRegistry):
            return probes
        if isinstance(probes, Mapping):
            registry = ProbeRegistry(load_entry_points=False)
            for name, p in probes.items():
                registry.register(name, p)
            return registry
        raise ProbingTypeError(f"probes must be a mapping of probe_type -> Probe class or a ProbeRegistry, got {probes!r}")

    def _python_probes(self, registry: ProbeRegistry) -> tuple[list[tuple[str, str, Any]], dict[str, Any]]:
        from ._bridge import ProbeBridge

        if self._spec is None:
            return [], {}
        builtins = set(_core().builtin_probe_types())
        points = {p.name: p for p in self._spec.extraction_points}
        out: list[tuple[str, str, Any]] = []
        bridges: dict[str, Any] = {}
        for p in self._spec.extraction_points:
            if p.probe_type in bridges:
                continue
            try:
                factory: ProbeFactory = registry.get(p.probe_type)
            except ProbeNotFoundError:
                if p.probe_type in builtins:
                    continue  # a C++ built-in
                known = sorted(set(registry.list()) | builtins)
                raise ProbeNotFoundError(p.probe_type, known) from None
            bridge = ProbeBridge(p.probe_type, factory, points, self._metrics_sink)
            bridges[p.probe_type] = bridge
            out.append((p.probe_type, factory.probe_cls.probe_kind, bridge))
        return out, bridges

    def _model_path(self, model: Any, engine_options: dict[str, Any]) -> str:
        if isinstance(model, (str, os.PathLike)):
            path = os.fspath(model)
            if not os.path.exists(path):
                raise ProbingValueError(
                    f"model {path!r}: no such folder or .gguf file (models are local: a Hugging Face "
                    "folder with config.json and safetensors, or a GGUF file)"
                )
            return path
        if hasattr(model, "save_pretrained") and hasattr(model, "config"):
            self._tmpdir = tempfile.mkdtemp(prefix="undercurrent-model-")
            try:
                _save_in_memory_model(model, engine_options.pop("tokenizer", None), self._tmpdir, engine_options)
            except BaseException:
                self._cleanup()
                raise
            return self._tmpdir
        raise ProbingTypeError(
            f"model must be a local folder, a .gguf file or a transformers model, got {type(model).__name__}"
        )

    @staticmethod
    def _engine_options(path: str, options: dict[str, Any], max_concurrency: int | None) -> dict[str, Any]:
        out: dict[str, Any] = {"model": path}
        for key, value in options.items():
            if key not in ENGINE_OPTIONS:
                raise ProbingTypeError(
                    f"unexpected keyword argument {key!r}.{did_you_mean(key, ENGINE_OPTIONS)} Engine options: "
                    f"{', '.join(sorted(ENGINE_OPTIONS))}"
                )
            if value is None:
                continue
            if not isinstance(value, ENGINE_OPTIONS[key]) or (isinstance(value, bool) and ENGINE_OPTIONS[key] is int):
                raise ProbingTypeError(f"{key}: expected {ENGINE_OPTIONS[key]}, got {value!r}")
            if key in ("tensor_parallel_size", "pipeline_parallel_size") and value < 1:
                raise ProbingValueError(f"{key}={value}: must be >= 1")
            out[key] = _bytes(value) if key == "kv_cache_memory" else os.fspath(value) if key == "tokenizer" else value
        if max_concurrency is not None:
            if not isinstance(max_concurrency, int) or max_concurrency < 1:
                raise ProbingValueError(f"max_concurrency must be an int >= 1, got {max_concurrency!r}")
            out["max_num_seqs"] = max_concurrency
        return out

    def _probing_options(self, router_kwargs: Mapping[str, Any] | None, log_sink: Any) -> dict[str, Any]:
        from .sinks import FileLogSink, WebhookLogSink, is_python_sink

        out: dict[str, Any] = {}
        for key, value in (router_kwargs or {}).items():
            if key not in _ROUTER_OPTIONS:
                raise ProbingTypeError(
                    f"router_kwargs: unexpected {key!r}.{did_you_mean(key, _ROUTER_OPTIONS)} Accepted: "
                    f"{', '.join(sorted(_ROUTER_OPTIONS))}"
                )
            out[_ROUTER_OPTIONS[key]] = value.value if hasattr(value, "value") else value
        if log_sink is not None:
            sinks = list(log_sink) if isinstance(log_sink, (list, tuple)) else [log_sink]
            engine_sinks = []
            for sink in sinks:
                if is_python_sink(sink):
                    self._py_sinks.append(sink)
                elif isinstance(sink, (FileLogSink, WebhookLogSink)):
                    engine_sinks.append(sink)
                else:
                    raise ProbingTypeError(
                        f"log_sink={sink!r}: expected a FileLogSink, a WebhookLogSink, a LogSink (anything with "
                        "write_signal and write_result), or a list of them"
                    )
            try:
                out["sinks"] = [sink._engine() for sink in engine_sinks]
            except TypeError as exc:
                raise ProbingTypeError(str(exc)) from None
            except ValueError as exc:
                raise ProbingValueError(str(exc)) from None
            if self._py_sinks:
                self._record_buffer = _core().RecordBuffer()
                out["sinks"].append({"kind": "buffer", "buffer": self._record_buffer})
        return out

    def _deliver_records(self) -> None:
        """Hands the records the engine wrote since the last call to the Python sinks."""
        if self._record_buffer is None:
            return
        from ._bridge import signal_from_engine

        for text in self._record_buffer.drain():
            record = json.loads(text)
            request_id, point, payload = record["request_id"], record["extraction_point_name"], record["payload"]
            if record["kind"] == "signal":
                method, value = "write_signal", signal_from_engine(payload)
            else:
                method, value = "write_result", ProbeResult(
                    request_id=request_id,
                    extraction_point_name=point,
                    verdict=payload.get("verdict"),
                    signal_history=[signal_from_engine(s) for s in payload.get("signal_history", [])],
                    metadata=dict(payload.get("metadata") or {}),
                )
            for sink in self._py_sinks:
                try:
                    getattr(sink, method)(request_id, point, value)
                except Exception:  # noqa: BLE001 (a sink never breaks generation; 0.1 logs it too)
                    self.log_sink_errors += 1
                    logger.exception(
                        "log sink %s.%s raised for extraction_point=%r request_id=%r",
                        type(sink).__name__, method, point, request_id,
                    )

    # -- use ---------------------------------------------------------------------------------

    @property
    def spec(self) -> ProbeSpec | None:
        return self._spec

    @property
    def num_layers(self) -> int:
        return self._model().num_layers

    @property
    def hidden_size(self) -> int:
        return self._model().hidden_size

    @property
    def kv_cache_bytes(self) -> int:
        """The bytes this model's KV cache reserved (per rank). With ``kv_cache_memory`` left
        out the engine sizes it from the memory available less what the other open models of
        this process reserved (`reserved_kv_cache_bytes`)."""
        return self._model().kv_cache_bytes

    @property
    def kv_cache_budget_bytes(self) -> int:
        """The budget the KV cache was cut from (``kv_cache_memory``, or the automatic one)."""
        return self._model().kv_budget_bytes

    def _model(self) -> Any:
        if self._closed:
            raise ProbingRuntimeError("ProbedModel is closed; create a new one")
        return self._core_model

    def generate(
        self,
        prompt: str | Sequence[str],
        *,
        max_new_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: str | Sequence[str] | None = None,
        return_exceptions: bool = False,
        top_k: int | None = None,
        ignore_eos: bool = False,
    ) -> Any:
        """One prompt -> a `GenerationOutput`; a list -> a list in the same order, generated in one
        continuous batch. ``temperature`` None or 0: greedy. A prompt the engine refuses raises
        `ProbingValueError` (with ``return_exceptions=True`` a list gets the exception in its slot).
        Ctrl-C aborts the batch, raises KeyboardInterrupt and leaves the model usable."""
        model = self._model()
        single = isinstance(prompt, str)
        prompts = [prompt] if single else list(prompt)
        if not all(isinstance(p, str) for p in prompts):
            raise ProbingTypeError("prompt must be a str or a list of str")
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        params = {
            "max_tokens": 16 if max_new_tokens is None else int(max_new_tokens),
            "temperature": 0.0 if temperature is None else float(temperature),
            "top_p": 1.0 if top_p is None else float(top_p),
            "top_k": 0 if top_k is None else int(top_k),
            "seed": seed,
            "stop": stops,
            "ignore_eos": bool(ignore_eos),
        }
        raw = self._run([(p, params, []) for p in prompts])
        outputs: list[Any] = []
        for r in raw:
            if "error" in r:
                err = ProbingValueError(f"prompt {r['prompt'][:40]!r}: {r['error']}")
                if single or not return_exceptions:
                    raise err
                outputs.append(err)
                continue
            out = self._output(r)
            if self._on_result is not None:
                try:
                    self._on_result(out)
                except Exception:  # noqa: BLE001 (a callback never breaks generation)
                    logger.exception("on_result callback raised")
            outputs.append(out)
        return outputs[0] if single else outputs

    def _run(self, requests: list[tuple[Any, dict[str, Any], list[Any]]]) -> list[dict[str, Any]]:
        """Runs [(prompt, params, steering)] in one batch (the engine's dicts, in order)."""
        model = self._model()
        core = _core()
        try:
            return model.generate(requests)
        except core.Error as exc:
            raise ProbingValueError(exc.args[1] if len(exc.args) > 1 else str(exc)) from None
        finally:
            self._deliver_records()

    def _results(self, r: dict[str, Any]) -> dict[str, ProbeResult]:
        """The ProbeResults of one engine output, by point (the Python probes' own objects)."""
        from ._bridge import signal_from_engine

        results: dict[str, ProbeResult] = {}
        for res in json.loads(r["probe_results"]):
            point = res["extraction_point_name"]
            queue = (res.get("metadata") or {}).get("queue")
            if self._metrics_sink is not None and isinstance(queue, dict):
                for _ in range(sum((queue.get("dropped") or {}).values())):
                    self._metrics_sink.record_drop(r["request_id"], point)
                self._metrics_sink.record_queue_depth(r["request_id"], point, 0)
            kept = None
            if self._spec is not None:
                bridge = self._bridges.get(self._spec.point(point).probe_type)
                if bridge is not None:
                    kept = bridge.take_result(r["request_id"], point)
            if kept is not None:
                if res.get("metadata"):
                    kept.metadata = {**res["metadata"], **(kept.metadata or {})}
                results[point] = kept
            else:
                results[point] = ProbeResult(
                    request_id=res["request_id"],
                    extraction_point_name=point,
                    verdict=res.get("verdict"),
                    signal_history=[signal_from_engine(s) for s in res.get("signal_history", [])],
                    metadata=dict(res.get("metadata") or {}),
                )
        return results

    def _output(self, r: dict[str, Any]) -> GenerationOutput:
        results = self._results(r)
        abort = r["abort"]
        aborted = r["finish_reason"] == "abort"
        signal = None
        if abort is not None and abort.get("by") == "probe":
            signal = ProbeSignal(
                action=ProbeAction.ABORT,
                confidence=abort.get("confidence"),
                metadata={"token_pos": abort.get("token_pos"), "extraction_point_name": abort.get("point")},
            )
        return GenerationOutput(
            text=r["text"],
            prompt=r["prompt"],
            request_id=r["request_id"],
            probe_results=results,
            aborted=aborted,
            abort_reason=abort.get("reason") if abort else None,
            abort_signal=signal,
            abort_point=(abort.get("point") or None) if abort else None,
            token_ids=list(r["token_ids"]),
            prompt_token_ids=list(r["prompt_ids"]),
            finish_reason=r["finish_reason"],
            stop_reason=r["stop_reason"],
            usage={k: r["usage"][k] for k in ("prompt_tokens", "completion_tokens")},
            metrics={**r["metrics"], "cached_tokens": r["usage"]["cached_tokens"]},
        )

    def close(self) -> None:
        """Drains the async probes, shuts the engine down. Idempotent."""
        if not self._closed and self._core_model is not None:
            self._core_model.close()
            self._deliver_records()
        self._core_model = None  # the engine's memory goes now, not when this object does
        self._closed = True
        self._cleanup()

    def _cleanup(self) -> None:
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    def __enter__(self) -> ProbedModel:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        points = len(self._spec.extraction_points) if self._spec else 0
        return f"ProbedModel(points={points}, closed={self._closed})"


