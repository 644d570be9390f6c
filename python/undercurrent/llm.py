"""The vLLM-style layer: `LLM`, `SamplingParams`, `RequestOutput` and `LLM.capture`.

    from undercurrent import LLM, SamplingParams

    llm = LLM("SmolLM2-135M-Instruct.Q4_1.gguf", threads=4)
    outs = llm.generate(["The capital of France is", "2 + 2 ="], SamplingParams(max_tokens=16))
    acts = llm.capture(["The capital of France is"], spec)     # numpy arrays, `capture`'s rows

`LLM` is the same engine as `ProbedModel` (it takes the same ``spec=``, ``probes=``, sinks and
engine options); every prompt of a call runs in one continuous batch. Sampling fields use the
OpenAI / vLLM names. Per-request steering vectors are numpy arrays (or anything
``np.asarray`` takes) in the HTTP server's ``steering_vectors`` shape.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .core.result import ProbeResult
from .errors import ProbingTypeError, ProbingValueError, SpecValidationError
from .model import ProbedModel, _core, _error
from .spec import ProbeSpec, load_spec

# Steering hooks: the spec's site names and their TransformerLens aliases.
_SITES = {
    "residual_stream": "residual_stream",
    "attn_out": "attn_out",
    "mlp_out": "mlp_out",
    "hook_resid_post": "residual_stream",
    "hook_attn_out": "attn_out",
    "hook_mlp_out": "mlp_out",
}
_STEERING_FIELDS = {
    "steering_vectors": "all",
    "prefill_steering_vectors": "prompt",
    "decode_steering_vectors": "generated",
}


@dataclass
class SamplingParams:
    """How each request picks its tokens and when it stops (vLLM's / OpenAI's names).

    ``temperature`` 0 is greedy; ``top_k`` 0 or -1 keeps every token; ``n`` completions per
    prompt (completion i > 0 uses ``seed + i`` when a seed is given); ``stop`` strings end a
    completion and are not part of its text; ``stop_token_ids`` end it and are kept in its ids.
    ``steering_vectors`` (and the ``prefill_`` / ``decode_`` forms, for prompt or generated
    tokens only): ``{hook: {layer: vector}}`` where hook is ``residual_stream`` / ``attn_out`` /
    ``mlp_out`` (or ``hook_resid_post`` / ``hook_attn_out`` / ``hook_mlp_out``) and a vector is
    a float array ``[hidden]`` or ``{"vector": array, "scale": s, "norm_match": bool}``; a
    residual_stream vector at layer L is added to the output of block L (llama.cpp's control
    vectors), the same as the server's field of that name.
    """

    n: int = 1
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: str | Sequence[str] | None = None
    stop_token_ids: Sequence[int] | None = None
    ignore_eos: bool = False
    steering_vectors: Mapping[str, Any] | None = None
    prefill_steering_vectors: Mapping[str, Any] | None = None
    decode_steering_vectors: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        for name in ("n", "max_tokens", "top_k"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ProbingTypeError(f"SamplingParams.{name}: expected an int, got {value!r}")
        if self.n < 1:
            raise ProbingValueError(f"SamplingParams.n: must be >= 1, got {self.n}")
        if self.max_tokens < 1:
            raise ProbingValueError(f"SamplingParams.max_tokens: must be >= 1, got {self.max_tokens}")
        if self.top_k < -1:
            raise ProbingValueError(f"SamplingParams.top_k: must be -1, 0 (all) or positive, got {self.top_k}")
        for name in ("temperature", "top_p", "min_p"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise ProbingTypeError(f"SamplingParams.{name}: expected a finite number, got {value!r}")
        if self.seed is not None and (not isinstance(self.seed, int) or self.seed < 0):
            raise ProbingValueError(f"SamplingParams.seed: expected a non-negative int, got {self.seed!r}")

    def _engine(self, copy: int) -> dict[str, Any]:
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return {
            "max_tokens": self.max_tokens,
            "temperature": float(self.temperature),
            "top_p": float(self.top_p),
            "top_k": max(0, self.top_k),
            "min_p": float(self.min_p),
            "seed": None if self.seed is None else self.seed + copy,
            "stop": stop,
            "stop_token_ids": [int(t) for t in (self.stop_token_ids or [])],
            "ignore_eos": bool(self.ignore_eos),
        }

    def _steering(self) -> list[tuple[int, str, str, float, bool, np.ndarray]]:
        out: list[tuple[int, str, str, float, bool, np.ndarray]] = []
        for key, tokens in _STEERING_FIELDS.items():
            value = getattr(self, key)
            if value is None:
                continue
            if not isinstance(value, Mapping):
                raise ProbingTypeError(f"SamplingParams.{key}: expected {{hook: {{layer: vector}}}}, got {value!r}")
            for hook, layers in value.items():
                out.extend(_steering_entries(f"{key}.{hook}", hook, layers, tokens))
        return out


def _steering_entries(param: str, hook: Any, layers: Any, tokens: str) -> list[Any]:
    if isinstance(hook, str) and hook.startswith("blocks."):  # "blocks.L.hook_x": vector
        parts = hook.split(".")
        if len(parts) != 3 or not parts[1].isdigit() or parts[2] not in _SITES:
            raise ProbingValueError(f"{param}: expected blocks.LAYER.hook_resid_post|hook_attn_out|hook_mlp_out")
        return [_steering_vector(param, int(parts[1]), _SITES[parts[2]], tokens, layers)]
    if hook not in _SITES:
        raise ProbingValueError(f"{param}: unknown steering hook {hook!r} (expected one of {', '.join(_SITES)})")
    if not isinstance(layers, Mapping):
        raise ProbingTypeError(f"{param}: expected {{layer: vector}}, got {type(layers).__name__}")
    out = []
    for layer, vector in layers.items():
        try:
            index = int(layer)
        except (TypeError, ValueError):
            raise ProbingValueError(f"{param}.{layer}: the layer is not an integer") from None
        if index < 0 or str(layer).strip() not in (str(index),):
            raise ProbingValueError(f"{param}.{layer}: the layer is not a non-negative integer")
        out.append(_steering_vector(f"{param}.{layer}", index, _SITES[hook], tokens, vector))
    return out


def _steering_vector(param: str, layer: int, site: str, tokens: str, vector: Any) -> tuple:
    scale, norm_match = 1.0, False
    if isinstance(vector, Mapping):
        unknown = set(vector) - {"vector", "scale", "norm_match"}
        if unknown or "vector" not in vector:
            raise ProbingValueError(f"{param}: expected {{'vector': array, 'scale': s, 'norm_match': bool}}")
        scale = float(vector.get("scale", 1.0))
        norm_match = bool(vector.get("norm_match", False))
        vector = vector["vector"]
    if hasattr(vector, "detach"):  # a torch tensor
        vector = vector.detach().cpu().numpy()
    try:
        values = np.ascontiguousarray(np.asarray(vector, dtype=np.float32).reshape(-1))
    except (TypeError, ValueError) as exc:
        raise ProbingTypeError(f"{param}: not a vector of numbers ({exc})") from None
    if np.ndim(vector) != 1:
        raise ProbingValueError(f"{param}: expected a 1-D vector [hidden], got shape {np.shape(vector)}")
    return (layer, site, tokens, scale, norm_match, values)


@dataclass
class CompletionOutput:
    """One completion of a prompt (vLLM's CompletionOutput)."""

    index: int
    text: str
    token_ids: list[int]
    finish_reason: str  # "stop" | "length" | "abort"
    stop_reason: str = ""
    cumulative_logprob: float | None = None


@dataclass
class RequestOutput:
    """One prompt's result (vLLM's RequestOutput), with this engine's probe results, abort and
    usage: ``usage`` sums prompt_tokens (once) and completion_tokens over the completions."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = True
    probe_results: list[dict[str, ProbeResult]] = field(default_factory=list)  # per completion
    aborts: list[dict[str, Any] | None] = field(default_factory=list)  # per completion
    usage: dict[str, int] = field(default_factory=dict)
    metrics: list[dict[str, float]] = field(default_factory=list)


@dataclass
class Activations:
    """What `LLM.capture` returns: one row per captured activation, in ``undercurrent
    capture``'s order (by prompt, then token_pos, layer, spec point order). ``values`` is
    float32 ``[rows, hidden]`` (or ``[rows, features]`` with an SAE; a torch tensor with
    ``return_tensors="pt"``); the other columns are int64 numpy arrays ``[rows]`` (``point`` is
    an index into ``points``; ``generated_index`` -1 for a prompt token) and ``token_text`` a
    list. ``outputs`` are the prompts' generations."""

    points: list[str]
    values: Any
    prompt_index: np.ndarray
    point: np.ndarray
    layer: np.ndarray
    token_pos: np.ndarray
    is_generated: np.ndarray
    generated_index: np.ndarray
    token_id: np.ndarray
    token_text: list[str]
    outputs: list[RequestOutput]

    def __len__(self) -> int:
        return int(self.prompt_index.shape[0])

    def mask(self, point: str | None = None, layer: int | None = None, prompt_index: int | None = None,
             is_generated: bool | None = None) -> np.ndarray:
        """A boolean mask of the rows that match every given filter."""
        m = np.ones(len(self), dtype=bool)
        if point is not None:
            if point not in self.points:
                raise ProbingValueError(f"point {point!r}: not captured (points: {', '.join(self.points)})")
            m &= self.point == self.points.index(point)
        if layer is not None:
            m &= self.layer == layer
        if prompt_index is not None:
            m &= self.prompt_index == prompt_index
        if is_generated is not None:
            m &= self.is_generated == is_generated
        return m

    def get(self, point: str | None = None, layer: int | None = None, prompt_index: int | None = None,
            is_generated: bool | None = None) -> Any:
        """The values of the matching rows, in row order."""
        return self.values[np.flatnonzero(self.mask(point, layer, prompt_index, is_generated))]


@dataclass
class Calibration:
    """What `LLM.calibrate` returns: ``points`` as ``undercurrent calibrate --json`` prints them
    ({point, threshold, requests, flagged, unscored}; with ``measure`` {point, requests,
    flagged, rate, rate_95}), the number of ``requests``, the ``model`` fingerprint, and
    ``spec_file``: the calibrated spec's text (empty with ``measure``)."""

    points: list[dict[str, Any]]
    requests: int
    model: dict[str, Any]
    spec_file: str

    @property
    def thresholds(self) -> dict[str, float]:
        """Each point's fitted threshold."""
        return {p["point"]: p["threshold"] for p in self.points if "threshold" in p}


def _prompt(p: Any) -> Any:
    if isinstance(p, str):
        return p
    if isinstance(p, Mapping):
        if "prompt_token_ids" in p:
            return [int(t) for t in p["prompt_token_ids"]]
        if "prompt" in p:
            return _prompt(p["prompt"])
    if isinstance(p, Sequence) and all(isinstance(t, (int, np.integer)) for t in p):
        return [int(t) for t in p]
    raise ProbingTypeError(
        f"a prompt must be a str, a list of token ids, or {{'prompt': str}} / {{'prompt_token_ids': [...]}}, "
        f"got {type(p).__name__}"
    )


class LLM:
    """A local model served by the engine, vLLM-style. ``model``: a Hugging Face folder or a
    ``.gguf`` file. Keyword arguments are `ProbedModel`'s: ``spec``, ``probes``, ``log_sink``,
    ``metrics_sink``, ``router_kwargs`` and the engine options (``threads``, ``matmul``,
    ``batch_invariant``, ``kv_cache_memory``, ``max_model_len``, ``max_num_seqs``, ...).
    Use it as a context manager or call `close()`."""

    def __init__(self, model: Any, **kwargs: Any) -> None:
        self._model = ProbedModel(model, **kwargs)

    @property
    def probed_model(self) -> ProbedModel:
        """The `ProbedModel` underneath (0.1's API on the same engine)."""
        return self._model

    def _requests(self, prompts: Any, sampling_params: Any) -> tuple[list[Any], list[SamplingParams], list[Any]]:
        single = isinstance(prompts, (str, Mapping)) or (
            isinstance(prompts, Sequence) and len(prompts) > 0 and all(isinstance(t, (int, np.integer)) for t in prompts)
        )
        items = [prompts] if single else list(prompts)
        engine_prompts = [_prompt(p) for p in items]
        if sampling_params is None:
            params = [SamplingParams()] * len(items)
        elif isinstance(sampling_params, SamplingParams):
            params = [sampling_params] * len(items)
        elif isinstance(sampling_params, Sequence) and all(isinstance(s, SamplingParams) for s in sampling_params):
            if len(sampling_params) != len(items):
                raise ProbingValueError(
                    f"sampling_params: {len(sampling_params)} given for {len(items)} prompts (give one, or one per prompt)"
                )
            params = list(sampling_params)
        else:
            raise ProbingTypeError(f"sampling_params must be a SamplingParams or a list of them, got {sampling_params!r}")
        requests = []
        for prompt, sp in zip(engine_prompts, params):
            steering = sp._steering()
            for copy in range(sp.n):
                requests.append((prompt, sp._engine(copy), steering))
        return items, params, requests

    def _outputs(self, raw: list[dict[str, Any]], params: list[SamplingParams], with_results: bool) -> list[RequestOutput]:
        out: list[RequestOutput] = []
        k = 0
        for sp in params:
            group = raw[k : k + sp.n]
            k += sp.n
            for r in group:
                if "error" in r:
                    raise ProbingValueError(f"prompt {str(r['prompt'])[:40]!r}: {r['error']}")
            first = group[0]
            completions = [
                CompletionOutput(i, r["text"], list(r["token_ids"]), r["finish_reason"], r["stop_reason"])
                for i, r in enumerate(group)
            ]
            out.append(
                RequestOutput(
                    request_id=first["request_id"],
                    prompt=first["prompt"],
                    prompt_token_ids=list(first["prompt_ids"]),
                    outputs=completions,
                    probe_results=[self._model._results(r) for r in group] if with_results else [],
                    aborts=[r["abort"] for r in group],
                    usage={
                        "prompt_tokens": first["usage"]["prompt_tokens"],
                        "completion_tokens": sum(r["usage"]["completion_tokens"] for r in group),
                    },
                    metrics=[dict(r["metrics"]) for r in group],
                )
            )
        return out

    def generate(self, prompts: Any, sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
                 use_tqdm: bool = False) -> list[RequestOutput]:
        """Generates for every prompt (a str, token ids, or a list of them) in one continuous
        batch; one `RequestOutput` per prompt, in order. The model's probes (``spec=``) run on
        every request. ``use_tqdm`` is accepted for vLLM compatibility and ignored."""
        del use_tqdm
        _, params, requests = self._requests(prompts, sampling_params)
        return self._outputs(self._model._run(requests), params, with_results=True)

    def capture(self, prompts: Any, spec: Any, sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
                *, sae: str | None = None, sae_features: Sequence[int] | str | None = None,
                return_tensors: str = "np") -> Activations:
        """Runs the prompts in one batch and returns the activations ``spec`` names (a spec as
        `load_spec` takes it, or a list of points; a point's probe fields may be left out) as
        `Activations`: the rows ``undercurrent capture`` writes for the same prompts, spec and
        sampling, bit for bit (the engine is batch-invariant by default). With ``sae`` (a folder
        with cfg.json and sae_weights.safetensors) each row is that SAE's ``sae_features``
        (indices, or "all") instead, as ``capture --sae``. The model's own probes do not run."""
        if return_tensors not in ("np", "pt"):
            raise ProbingValueError(f"return_tensors={return_tensors!r}: expected 'np' or 'pt'")
        if (sae is None) != (sae_features is None):
            raise ProbingValueError("sae and sae_features go together (sae_features: a list of indices or 'all')")
        features: list[int] = []
        if sae_features is not None and sae_features != "all":
            if isinstance(sae_features, str) or not all(isinstance(f, (int, np.integer)) and f >= 0 for f in sae_features):
                raise ProbingValueError(f"sae_features: expected non-negative indices or 'all', got {sae_features!r}")
            features = [int(f) for f in sae_features]
            if not features:
                raise ProbingValueError("sae_features: empty (give indices or 'all')")
        parsed = load_spec(_with_capture_probes(spec))
        _, params, requests = self._requests(prompts, sampling_params)
        core = _core()
        try:
            d = self._model._model().capture(
                requests,
                "" if parsed.source is not None else (parsed.text or ""),
                str(parsed.source) if parsed.source is not None else "",
                sae or "",
                features,
            )
        except core.Error as exc:
            raise _error(exc) from None
        outputs = self._outputs(d["outputs"], params, with_results=False)
        # Rows are by engine request; with n > 1 a prompt's completions share its prompt index.
        owner = np.repeat(np.arange(len(params), dtype=np.int64), [sp.n for sp in params])
        values = d["values"]
        if return_tensors == "pt":
            if importlib.util.find_spec("torch") is None:
                raise ProbingValueError("return_tensors='pt' needs torch, which is not installed")
            import torch

            values = torch.from_numpy(values)
        return Activations(
            points=list(d["points"]),
            values=values,
            prompt_index=owner[d["prompt_index"]] if len(owner) else d["prompt_index"],
            point=d["point_index"],
            layer=d["layer"],
            token_pos=d["token_pos"],
            is_generated=d["is_generated"].astype(bool),
            generated_index=d["generated_index"],
            token_id=d["token_id"],
            token_text=list(d["token_text"]),
            outputs=outputs,
        )

    def calibrate(self, prompts: Any, spec: Any, *, target_fpr: float | None = None, out: Any = None,
                  measure: bool = False, max_tokens: int | None = None,
                  temperature: float | None = None) -> Calibration:
        """``undercurrent calibrate`` on this model: fits each point's ``threshold`` so that at
        most a share ``target_fpr`` of the benign ``prompts`` reach it (the CLI's rule, per
        request), or with ``measure=True`` reports the share each point flags or stops as the
        spec stands. ``prompts``: a JSONL prompts file (the CLI's ``--prompts`` format) or a
        list of str; ``spec``: as `load_spec` takes it (its probe types: the built-ins and this
        model's Python probes); ``max_tokens`` / ``temperature``: what a prompt line leaves out
        (the CLI's defaults: 16, greedy). Returns a `Calibration` whose ``spec_file`` is, for
        the same prompts file, spec and model, the file ``calibrate --out`` writes (written to
        ``out`` when given). The model's own probes do not run."""
        if not measure and (not isinstance(target_fpr, (int, float)) or not 0.0 < target_fpr < 1.0):
            raise ProbingValueError(f"target_fpr: expected a share in (0, 1), got {target_fpr!r} (or measure=True)")
        if measure and (target_fpr is not None or out is not None):
            raise ProbingValueError("measure=True fits nothing: leave out target_fpr and out")
        parsed = load_spec(spec)
        defaults: dict[str, Any] = {}
        if max_tokens is not None:
            defaults["max_tokens"] = int(max_tokens)
        if temperature is not None:
            defaults["temperature"] = float(temperature)
        tmp = None
        name = ""
        if isinstance(prompts, (str, os.PathLike)):
            path = os.fspath(prompts)
        elif isinstance(prompts, Sequence) and prompts and all(isinstance(p, str) for p in prompts):
            fd, tmp = tempfile.mkstemp(prefix="undercurrent-prompts-", suffix=".jsonl")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                for i, p in enumerate(prompts):
                    f.write(json.dumps({"id": i, "prompt": p}) + "\n")
            path, name = tmp, f"{len(prompts)} prompts given in Python"
        else:
            raise ProbingTypeError("prompts: expected a JSONL prompts file or a non-empty list of str")
        core = _core()
        try:
            d = self._model._model().calibrate(
                path, defaults, "" if parsed.source is not None else (parsed.text or ""),
                str(parsed.source) if parsed.source is not None else "", float(target_fpr or 0.0),
                bool(measure), name,
            )
        except core.Error as exc:
            raise _error(exc) from None
        finally:
            if tmp is not None:
                os.unlink(tmp)
        result = Calibration(points=json.loads(d["points"]), requests=int(d["requests"]),
                             model=json.loads(d["model"]), spec_file=d["spec_file"])
        if out is not None:
            with open(out, "w", encoding="utf-8") as f:
                f.write(result.spec_file)
        return result

    @property
    def kv_cache_bytes(self) -> int:
        """The bytes this model's KV cache reserved (`ProbedModel.kv_cache_bytes`)."""
        return self._model.kv_cache_bytes

    def close(self) -> None:
        """Drains the async probes and shuts the engine down. Idempotent."""
        self._model.close()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _with_capture_probes(spec: Any) -> Any:
    """Points given as dicts or a list may leave out the probe fields: capture replaces them."""
    if isinstance(spec, ProbeSpec) or isinstance(spec, str) or hasattr(spec, "__fspath__"):
        return spec
    if isinstance(spec, Mapping):
        points = spec.get("extraction_points")
        if points is None:
            raise SpecValidationError("spec: no extraction_points")
        return {**spec, "extraction_points": _with_capture_probes(list(points))}
    if isinstance(spec, list):
        out = []
        for p in spec:
            if isinstance(p, Mapping):
                p = {"probe_type": "capture", "probe_kind": "trajectory", **p}
            out.append(p)
        return out
    return spec


__all__ = ["LLM", "Activations", "Calibration", "CompletionOutput", "RequestOutput", "SamplingParams"]
