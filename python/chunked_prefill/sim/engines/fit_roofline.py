"""Calibrating the roofline: fit its efficiency and overhead terms to measured steps.

Each time term of :class:`~.roofline.RooflineModel` is inversely proportional to one
efficiency factor of the GPU (:class:`~.gpus.GpuSpec`), or is a fixed time:

- ``gemm`` (``token_s``, ``gemm_fixed_s``, ``expert_fixed_s``, ``head_row_s``):
  ``gemm_efficiency``;
- ``weight_read`` (``dense_read_s`` less its GEMVs' fixed ``gemv_fixed_s``, which is kept,
  ``expert_read_s``): ``weight_read_efficiency``;
- ``attention`` (``pair_s``, the flash backend): ``attention_efficiency``;
- ``chunk_attention`` (``chunk_sq_s``, the vidur backend): ``chunk_attention_efficiency``;
- ``kv`` (``kv_token_s``): ``flash_decode_efficiency`` with the flash backend,
  ``hbm_efficiency`` with the others;
- ``overhead_s``, in seconds: ``layer_overhead_s``, ``moe_layer_s`` and ``step_overhead_s``
  (in the preset's proportion);
- ``cpu_seq_s`` (``seq_s``), in seconds: the serving engine's CPU time per sequence.

Once it is known which branch of ``max(compute, memory)`` each step takes (and whether the
GPU work outlasts an eager engine's kernel launches), the step time is linear in these seven
unknowns; the all-reduces, the serving engine's CPU time per step and the launches are kept
as the presets give them. :func:`fit_roofline` finds the branches as :func:`~.fit.fit_steps`
finds its floor: every threshold of the batch's tokens ``N`` (memory-bound below it), a
reweighted non-negative least-squares fit on the relative error for each, the best one kept
and re-split by its fitted scales until stable. An efficiency is the preset's divided by its
scale, at most 1.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from .catalog import engine_for
from .fit import REWEIGHTS, Steps, _nnls, _thresholds, fit_warnings
from .gpus import GpuSpec, resolve_gpu
from .models import ModelSpec
from .models.config import resolve_model
from .roofline import RooflineModel
from .software import (
    DEFAULT_ATTENTION_BACKEND,
    DEFAULT_SERVING_ENGINE,
    resolve_attention_backend,
    resolve_serving_engine,
)

__all__ = ["SCALES", "RooflineFit", "fit_roofline"]

Array = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]

SCALES = (
    ("gemm", "gemm_efficiency"),
    ("weight_read", "weight_read_efficiency"),
    ("attention", "attention_efficiency"),
    ("chunk_attention", "chunk_attention_efficiency"),
    ("kv", "hbm_efficiency"),
    ("overhead_s", None),
    ("cpu_seq_s", None),
)
"""The fitted unknowns in order, and the :class:`GpuSpec` efficiency each one divides
(``None``: a time in seconds); ``kv`` divides ``flash_decode_efficiency`` instead with the
flash attention backend (:func:`_keys`)."""

_G, _W, _A, _C, _K, _O, _Q = range(7)


def _keys(flash: bool) -> tuple[str, ...]:
    """Each unknown as the profile and the report name it: the :data:`SCALES` fields, the
    KV reads' efficiency the backend's (FlashAttention's decode kernel has its own)."""
    keys = tuple(key or name for name, key in SCALES)
    return (*keys[:_K], "flash_decode_efficiency", *keys[_K + 1 :]) if flash else keys


@dataclass(frozen=True)
class RooflineFit:
    """A fitted roofline: the GPU fields and CPU time to write in a profile, the model they
    give, and how well it predicts the steps it was fitted to."""

    model: str
    """The model as given (a preset name or a ``config.json`` path)."""
    gpu: str
    """The GPU as given (a preset name or a GPU profile path)."""
    tp: int
    serving_engine: str
    attention_backend: str
    fields: dict[str, float]
    """The fitted :class:`GpuSpec` fields and ``cpu_seq_s``: the profile's values."""
    preset: dict[str, float]
    """The same fields before the fit."""
    engine: RooflineModel
    """The roofline the fitted fields give."""
    steps: int
    regimes: dict[str, int]
    """Steps per branch of the fitted model: ``compute``, ``memory`` (GPU-bound, by the
    larger linear-layer term) and ``launch`` (an eager engine's launches outlast the GPU)."""
    unidentified: tuple[tuple[str, str], ...]
    """``(term, why)`` of each unknown the steps cannot determine, kept at the preset."""
    clamped: tuple[str, ...]
    """Warnings for efficiencies the steps put above 1 (kept at 1)."""
    error_p50: float
    error_p90: float
    error_p99: float
    error_max: float

    @property
    def warnings(self) -> list[str]:
        """What ``fit`` prints on stderr (:func:`~.fit.fit_warnings`)."""
        return fit_warnings(self.error_p50, self.error_p90, self.unidentified, self.clamped)


@dataclass(frozen=True)
class _Terms:
    """The preset roofline's terms per step (seconds) and the constants kept as they are."""

    comp: Array
    mem: Array
    pairs: Array
    squares: Array
    kv: Array
    rows: Array
    n: Array
    fixed: Array
    """All-reduces: GPU time that is neither fitted nor scaled."""
    gemv: float
    """The GEMVs' fixed latency, on the weight-read side of ``max``, not scaled."""
    launch: float
    cpu_step: float
    start: Array
    """The preset's values of the seven unknowns (scales 1, the two times in seconds)."""


def _terms(r: RooflineModel, s: Steps) -> _Terms:
    n = s.prefill_tokens + s.decode_tokens
    rows = s.decode_tokens + s.chunks
    touched = r.experts * (1.0 - np.power(r.expert_miss, n)) if r.experts else np.zeros_like(n)
    comp = r.token_s * n + r.gemm_fixed_s + r.head_row_s * rows + r.expert_fixed_s * touched
    # The GEMVs' fixed latency is not a read: it stays as it is while the reads scale.
    mem = r.dense_read_s - r.gemv_fixed_s + r.expert_read_s * touched
    return _Terms(
        comp=comp,
        mem=mem,
        pairs=r.pair_s * s.attention_pairs
        + r.window_pair_s * _capped(r, s.attention_pairs, s.prefill_tokens),
        squares=r.chunk_sq_s * s.chunk_sq,
        kv=(
            r.kv_token_s * s.decode_context_tokens
            + r.window_kv_token_s * _capped(r, s.decode_context_tokens, s.decode_tokens)
        )
        * _slowdown(r, s.decode_tokens),
        rows=rows,
        n=n,
        fixed=r.allreduce_call_s + r.allreduce_token_s * n,
        gemv=r.gemv_fixed_s,
        launch=r.launch_s,
        cpu_step=r.cpu_step_s,
        start=np.array([1.0, 1.0, 1.0, 1.0, 1.0, r.overhead_s, r.seq_s]),
    )


def _capped(r: RooflineModel, total: Array, count: Array) -> Array:
    """``min(total, W * count)`` per step, as ``RooflineModel.step_time`` caps the windowed
    layers' attention (``total`` without a window)."""
    if not r.window_tokens:
        return total
    capped: Array = np.minimum(total, r.window_tokens * count)
    return capped


def _slowdown(r: RooflineModel, decodes: Array) -> Array:
    """``1 + kv_half_seqs / D`` per step (1 without decodes), as
    :meth:`RooflineModel.decode_slowdown`."""
    few: Array = 1.0 + r.kv_half_seqs / np.maximum(decodes, 1)
    slowdown: Array = np.where(decodes > 0, few, 1.0)
    return slowdown


def _gpu(x: Array, t: _Terms) -> Array:
    linear: Array = np.maximum(x[_G] * t.comp, x[_W] * t.mem + t.gemv)
    gpu: Array = x[_O] + linear + x[_A] * t.pairs + x[_C] * t.squares + x[_K] * t.kv + t.fixed
    return gpu


def _predict(x: Array, t: _Terms) -> Array:
    """The step times the unknowns ``x`` give (the formula of ``step_time``)."""
    gpu = _gpu(x, t)
    out: Array = np.where(gpu > t.launch, gpu, t.launch) + t.cpu_step + x[_Q] * t.rows
    return out


def _split(x: Array, t: _Terms) -> tuple[Mask, Mask]:
    """``(compute-bound, GPU-bound)`` of each step under ``x``."""
    compute: Mask = x[_G] * t.comp > x[_W] * t.mem + t.gemv
    bound: Mask = _gpu(x, t) > t.launch
    return compute, bound


def _free(base: Mask, compute: Mask, bound: Mask, dense: bool) -> Mask:
    """The unknowns a split can determine: ``base`` less the branches no step takes. A dense
    model's weight reads are the same every step, so without a compute-bound step they and
    the fixed time are one constant: the fixed time keeps the preset's."""
    free = base.copy()
    gpu_bound = compute & bound
    if not gpu_bound.any():
        free[_G] = False
    if not (~compute & bound).any():
        free[_W] = False
    if dense and not gpu_bound.any():
        free[_O] = False
    if not bound.any():
        free[[_G, _W, _A, _C, _K, _O]] = False
    return free


def _fit_split(
    s: Steps, t: _Terms, base: Mask, dense: bool, compute: Mask, bound: Mask
) -> tuple[Array, float]:
    """The unknowns for one split and their squared relative error (as :func:`~.fit._fit_split`:
    rows divided by the modelled time, found by reweighting)."""
    gb = bound.astype(np.float64)
    cols = np.column_stack(
        [t.comp * (compute & bound), t.mem * (~compute & bound), t.pairs * gb,
         t.squares * gb, t.kv * gb, gb, t.rows]
    )  # fmt: skip
    free = _free(base, compute, bound, dense)
    offset = np.where(bound, t.fixed, t.launch) + t.cpu_step + cols[:, ~free] @ t.start[~free]
    offset += t.gemv * (~compute & bound)  # the weight-read branch's fixed part
    y = s.duration_s - offset
    x = t.start.copy()
    scale = s.duration_s
    for _ in range(1 + REWEIGHTS):
        x[free] = _nnls(cols[:, free] / scale[:, None], y / scale)
        pred = _predict(x, t)
        scale = np.where(pred > 0, pred, s.duration_s)
    score = float(np.sum((pred - s.duration_s) ** 2 / (scale * s.duration_s)))
    return x, score


def _base(s: Steps, t: _Terms, vidur: bool) -> tuple[Mask, list[tuple[int, str]]]:
    """The unknowns the steps' counts can determine, and why each other one cannot."""
    free = np.ones(7, dtype=bool)
    why: list[tuple[int, str]] = []
    prefill = bool(s.attention_pairs.any())
    if vidur:
        why.append((_A, "the vidur backend charges (query, key) pairs at its own efficiency"))
        if not prefill:
            why.append((_C, "no prefill steps"))
        elif s.prefill_chunk_sq is None:
            why.append((_C, "the steps file has no prefill_chunk_sq column"))
    else:
        free[_C] = False  # not a term of the flash backend
        if not prefill:
            why.append((_A, "no prefill steps"))
    if not s.decode_context_tokens.any():
        why.append((_K, "no decode steps"))
    if len(np.unique(t.rows)) < 2:
        why.append((_Q, "every step has the same number of sequences"))
    elif (t.rows == t.n).all():
        why.append(
            (_Q, "no prefill steps: a decode step's sequences are its tokens, so the CPU time"
             " per sequence and the GEMMs' time per token cannot be told apart")
        )  # fmt: skip
    for i, _ in why:
        free[i] = False
    return free, why


def fit_roofline(
    s: Steps,
    model: str | os.PathLike[str] | ModelSpec,
    gpu: str | os.PathLike[str] | GpuSpec,
    tp: int = 1,
    serving_engine: str = DEFAULT_SERVING_ENGINE,
    attention_backend: str = DEFAULT_ATTENTION_BACKEND,
) -> RooflineFit:
    """Fit the roofline of ``model`` on ``tp`` GPUs ``gpu`` to measured steps (see the
    module docstring). Raises ``ValueError`` (a :class:`~.errors.ModelConfigError`,
    :class:`~.errors.EngineFitError`, ...) for an unknown model or GPU, one that does not
    fit, fewer than 5 steps, or fitted terms that leave the roofline's range."""
    if len(s) < 5:
        raise ValueError(f"fitting needs at least 5 steps, got {len(s)}")
    spec, card = resolve_model(model), resolve_gpu(gpu)
    serving = resolve_serving_engine(serving_engine)
    preset, _ = engine_for(spec, card, tp, serving_engine=serving.name,
                           attention_backend=attention_backend)  # fmt: skip
    backend = resolve_attention_backend(attention_backend)
    vidur, keys = backend.chunk_square, _keys(backend.name == "flash")
    with np.errstate(all="ignore"):
        t = _terms(preset, s)
        base, why = _base(s, t, vidur)
        x = _search(s, t, base, dense=preset.experts == 0)
    compute, bound = _split(x, t)
    free = _free(base, compute, bound, preset.experts == 0)
    why += _regime_reasons(base, free, compute, bound)
    fields, clamped = _fields(x, card, preset, serving.cpu_seq_s, free, keys)
    changes: dict[str, Any] = {k: v for k, v in fields.items() if k != "cpu_seq_s"}
    fitted_gpu = replace(card, **changes)
    engine, _ = engine_for(
        spec,
        fitted_gpu,
        tp,
        serving_engine=replace(serving, cpu_seq_s=fields["cpu_seq_s"]),
        attention_backend=attention_backend,
    )
    rel = np.abs(_step_times(engine, s) - s.duration_s) / s.duration_s
    p50, p90, p99 = (float(np.percentile(rel, q)) for q in (50, 90, 99))
    base_fields = {key: float(getattr(card, key)) for key in fields if key != "cpu_seq_s"}
    return RooflineFit(
        model=spec.name if isinstance(model, ModelSpec) else os.fspath(model),
        gpu=card.name if isinstance(gpu, GpuSpec) else os.fspath(gpu),
        tp=tp,
        serving_engine=serving.name,
        attention_backend=attention_backend,
        fields=fields,
        preset={**base_fields, "cpu_seq_s": serving.cpu_seq_s},
        engine=engine,
        steps=len(s),
        regimes={
            "compute": int((compute & bound).sum()),
            "memory": int((~compute & bound).sum()),
            "launch": int((~bound).sum()),
        },
        unidentified=tuple((keys[i], w) for i, w in sorted(why)),
        clamped=tuple(clamped),
        error_p50=p50,
        error_p90=p90,
        error_p99=p99,
        error_max=float(rel.max()),
    )


TIE = 1e-12
"""Scores within this (per step) of each other are ties: exact steps fit several splits
equally well (a zero scale makes a branch vanish), and the re-split then prefers the split
the fitted scales themselves give."""


def _search(s: Steps, t: _Terms, base: Mask, dense: bool) -> Array:
    """The best split over every threshold of ``N``, then re-split by the fitted scales
    until the split they give is the one they were fitted on (or no longer improves)."""
    _, bound = _split(t.start, t)
    best: tuple[Array, float, Mask, Mask] | None = None
    for v in _thresholds(t.n):
        compute = t.n >= v
        x, score = _fit_split(s, t, base, dense, compute, bound)
        if best is None or score < best[1]:
            best = (x, score, compute, bound)
    assert best is not None
    for _ in range(20):
        compute, bound = _split(best[0], t)
        if (compute == best[2]).all() and (bound == best[3]).all():
            break
        x, score = _fit_split(s, t, base, dense, compute, bound)
        if score > best[1] + TIE * len(s):
            break
        best = (x, score, compute, bound)
    return best[0]


def _regime_reasons(base: Mask, free: Mask, compute: Mask, bound: Mask) -> list[tuple[int, str]]:
    """Why the unknowns the fitted split leaves undetermined are (beyond :func:`_base`)."""
    out = []
    if not bound.any():
        lost = "every step is launch-bound (the eager kernel launches outlast the GPU work)"
        return [(i, lost) for i in (_G, _W, _A, _C, _K, _O) if base[i]]
    if base[_G] and not free[_G]:
        out.append((_G, "no compute-bound steps"))
    if base[_W] and not free[_W]:
        out.append((_W, "no memory-bound steps"))
    if base[_O] and not free[_O]:
        out.append(
            (_O, "no compute-bound steps: a dense model's weight reads take the same time every"
             " step, so they and the fixed time cannot be told apart")
        )  # fmt: skip
    return out


def _fields(
    x: Array,
    card: GpuSpec,
    preset: RooflineModel,
    cpu_seq_s: float,
    free: Mask,
    keys: tuple[str, ...],
) -> tuple[dict[str, float], list[str]]:
    """The profile's values from the unknowns: each efficiency the preset's divided by its
    scale (at most 1), the fixed time split over ``layer_overhead_s``, ``moe_layer_s`` and
    ``step_overhead_s`` in the preset's proportion, ``cpu_seq_s`` as fitted."""
    fields: dict[str, float] = {}
    clamped = []
    for i, key in enumerate(keys[:5]):
        value = float(getattr(card, key))
        if free[i]:
            wanted = value / float(x[i]) if x[i] > 0 else float("inf")
            if wanted > 1:
                clamped.append(
                    f"{key}: the steps ask for {wanted:.3g}, above 1 (faster than the"
                    " datasheet allows): kept at 1"
                )
            value = min(wanted, 1.0)
        fields[key] = value
    layer, moe, step = card.layer_overhead_s, card.moe_layer_s, card.step_overhead_s
    if free[_O]:
        if preset.overhead_s > 0:
            ratio = float(x[_O]) / preset.overhead_s
            layer, moe, step = layer * ratio, moe * ratio, step * ratio
        else:
            step = float(x[_O])
    fields["layer_overhead_s"] = float(layer)
    fields["moe_layer_s"] = float(moe)
    fields["step_overhead_s"] = float(step)
    fields["cpu_seq_s"] = float(x[_Q]) if free[_Q] else cpu_seq_s
    return fields, clamped


def _step_times(engine: RooflineModel, s: Steps) -> Array:
    counts = zip(s.prefill_tokens, s.decode_tokens, s.attention_pairs,
                 s.decode_context_tokens, s.chunk_sq, s.chunks)  # fmt: skip
    return np.array([engine.step_time(*(int(c) for c in row)) for row in counts])


def profile_dict(fit: RooflineFit) -> dict[str, Any]:
    """The profile ``simulate --profile`` reads
    (:func:`~.roofline_profile.load_roofline_profile`)."""
    return {
        "kind": "roofline",
        "model": fit.model,
        "gpu": fit.gpu,
        "tp": fit.tp,
        "serving_engine": fit.serving_engine,
        "attention_backend": fit.attention_backend,
        **fit.fields,
    }


def roofline_profile_text(fit: RooflineFit, toml: bool) -> str:
    """:func:`profile_dict` as TOML or JSON text."""
    import json

    doc = profile_dict(fit)
    if not toml:
        return json.dumps(doc, indent=2) + "\n"
    lines = []
    for key, value in doc.items():
        shown = json.dumps(value) if isinstance(value, str) else repr(value)
        lines.append(f"{key} = {shown}")  # a JSON string is a valid TOML basic string
    return "\n".join(lines) + "\n"
