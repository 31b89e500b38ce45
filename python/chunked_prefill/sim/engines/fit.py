"""Calibrating the step-latency model: fit :class:`EngineModel` to measured steps.

A steps file is a CSV with the columns ``prefill_tokens``, ``decode_tokens``,
``attention_pairs``, ``decode_context_tokens`` and ``duration_s`` (others are ignored), one
row per engine step; :func:`write_steps_csv` writes the simulator's own steps that way, so a
simulated run can be fitted back.

The model ``t = max(t_min, c0 + c_tok*N) + c_attn*A + c_kv*K`` (``N`` the batch's tokens) is
linear once it is known which steps sit on the floor, and the floor steps are exactly those
with ``N`` under a threshold. :func:`fit_steps` therefore tries every threshold (every distinct
``N``, at most :data:`MAX_THRESHOLDS` of them), fits the five coefficients of each split by
non-negative least squares on the error relative to the modelled time (reweighted, so that
noise in the measured times does not bias the fit low), keeps the split with the least
squared relative error, and then re-splits the steps by the fitted coefficients until the
split is stable.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal

import numpy as np
import numpy.typing as npt

from .._check import path as check_path
from .._json import exact
from ..runs.results import StepRecord
from ..workload.trace import TraceError, _parse_int, _show, read_text
from .linear import EngineModel

__all__ = [
    "COLUMNS",
    "MAX_THRESHOLDS",
    "POOR_P50",
    "POOR_P90",
    "FitResult",
    "Steps",
    "fit_steps",
    "fit_warnings",
    "profile_text",
    "read_steps_csv",
    "write_steps_csv",
]

COLUMNS = (
    "prefill_tokens",
    "decode_tokens",
    "attention_pairs",
    "decode_context_tokens",
    "duration_s",
)
"""The columns a steps file must have."""

OPTIONAL_COLUMN = "prefill_chunk_sq"
"""The squares of the step's prefill chunk lengths, summed: read when present (the simulator
writes it), so ``c_chunk_sq_s`` is fitted; without it that coefficient stays 0."""

CHUNKS_COLUMN = "prefill_chunks"
"""The number of the step's prefill chunks: read when present (the simulator and the
recorders write it) for the roofline's per-chunk terms; without it a step with prefill
tokens counts as one chunk."""

MAX_THRESHOLDS = 256
"""The most floor thresholds tried; beyond it they are spread over the quantiles of ``N``."""

REWEIGHTS = 3
"""Passes of each split's fit that divide the rows by the last pass's modelled times."""

_COUNT_MAX = 2**63 - 1
_COUNT = "a whole number in [0, 2**63 - 1]"
_PARAMS = ("t_min_s", "c0_s", "c_tok_s", "c_attn_s", "c_kv_s", "c_chunk_sq_s")

Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Steps:
    """Measured steps as columns (floats): the four counts and the duration in seconds."""

    prefill_tokens: Array
    decode_tokens: Array
    attention_pairs: Array
    decode_context_tokens: Array
    duration_s: Array
    prefill_chunk_sq: Array | None = None
    """``None`` when the file has no ``prefill_chunk_sq`` column."""
    prefill_chunks: Array | None = None
    """``None`` when the file has no ``prefill_chunks`` column."""

    @property
    def chunk_sq(self) -> Array:
        """The ``prefill_chunk_sq`` column, zeros when the file has none."""
        if self.prefill_chunk_sq is None:
            return np.zeros_like(self.duration_s)
        return self.prefill_chunk_sq

    @property
    def chunks(self) -> Array:
        """The ``prefill_chunks`` column; without it, 1 for each step with prefill tokens."""
        if self.prefill_chunks is None:
            return np.where(self.prefill_tokens > 0, 1.0, 0.0)
        return self.prefill_chunks

    def __len__(self) -> int:
        return len(self.duration_s)


def write_steps_csv(steps: Iterable[StepRecord], path: str | os.PathLike[str]) -> int:
    """Write the simulator's steps (``SimResult.step_log``) as a steps file; returns the
    number of rows. Durations are written with ``repr``, so they read back exactly. The
    file is written whole or not at all (a temporary file renamed into place)."""
    from ..._output import replacing

    n = 0
    with replacing(path) as fh:
        out = csv.writer(fh, lineterminator="\n")
        out.writerow(("step", "start_s", *COLUMNS, OPTIONAL_COLUMN, CHUNKS_COLUMN))
        for s in steps:
            out.writerow(
                (
                    s.index,
                    repr(s.start_s),
                    s.prefill_tokens,
                    s.decode_tokens,
                    s.attention_pairs,
                    s.decode_context_tokens,
                    repr(s.duration_s),
                    s.prefill_chunk_sq,
                    s.prefill_chunks,
                )
            )
            n += 1
    return n


MIN_DURATION_S = Decimal("1e-9")
"""The shortest step ``fit`` reads, a nanosecond (no forward pass is shorter): the least
squares of shorter ones leave the float range (``1e-300`` s steps) before any check."""


def _duration(path: str, line: int, raw: str) -> float:
    rule = "expected a duration in seconds, a number from 1e-9 to 1e9"
    parsed = exact(raw)
    if parsed is None or not MIN_DURATION_S <= parsed[0] <= 10**9:
        raise TraceError(path, line, "duration_s", f"{rule}, got {_show(raw)}")
    return float(parsed[0])


def read_steps_csv(path: str | os.PathLike[str]) -> Steps:
    """Read a steps file. A missing column or a bad cell raises :class:`TraceError`
    (``FILE:LINE: field 'NAME': problem``); nothing is dropped or repaired."""
    name = check_path("path", path)
    text = read_text(name)
    rows: list[tuple[float, ...]] = []
    header: list[str] | None = None
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        for cells in reader:
            line = reader.line_num
            if not cells or all(not c.strip() for c in cells):
                continue
            if header is None:
                header = [c.strip() for c in cells]
                for col in COLUMNS:
                    if col not in header:
                        raise TraceError(name, line, col, "is missing from the header")
                    if header.count(col) > 1:
                        raise TraceError(name, line, col, "appears twice in the header")
                continue
            if len(cells) != len(header):
                raise TraceError(
                    name, line, None, f"row has {len(cells)} cells but the header has {len(header)}"
                )
            row = dict(zip(header, cells))
            counts = tuple(
                float(_parse_int(name, line, col, row[col], low=0, high=_COUNT_MAX, what=_COUNT))
                for col in COLUMNS[:4]
            )
            extra = tuple(
                _optional(name, line, row, col) for col in (OPTIONAL_COLUMN, CHUNKS_COLUMN)
            )
            rows.append((*counts, _duration(name, line, row["duration_s"]), *extra))
    except csv.Error as err:
        raise TraceError(name, reader.line_num, None, f"malformed CSV: {err}") from None
    if header is None:
        raise TraceError(name, 0, None, "is empty: expected a header row and steps")
    table = np.array(rows, dtype=np.float64).reshape(len(rows), 7)
    squares = table[:, 5].copy() if OPTIONAL_COLUMN in header else None
    chunks = table[:, 6].copy() if CHUNKS_COLUMN in header else None
    p, d, a, k, t = (table[:, i].copy() for i in range(5))
    return Steps(p, d, a, k, t, prefill_chunk_sq=squares, prefill_chunks=chunks)


def _optional(path: str, line: int, row: dict[str, str], col: str) -> float:
    """An optional count column's cell, 0 when the file has no such column."""
    if col not in row:
        return 0.0
    return float(_parse_int(path, line, col, row[col], low=0, high=_COUNT_MAX, what=_COUNT))


POOR_P50 = 0.10
"""A fit whose per-step relative error has a median above this is reported as poor."""
POOR_P90 = 0.25
"""... or whose 90th percentile is above this."""

LIKELY_CAUSES = (
    "noisy timings (a shared or throttled machine), a cost the model does not have, or"
    " steps of different engines or settings mixed in one file"
)


def fit_warnings(
    p50: float, p90: float, unidentified: Iterable[tuple[str, str]], extra: Iterable[str] = ()
) -> list[str]:
    """The warnings of a fit: poor (per-step error p50 over :data:`POOR_P50` or p90 over
    :data:`POOR_P90`), each term not identified as ``(name, why)``, then ``extra``."""
    out = []
    if p50 > POOR_P50 or p90 > POOR_P90:
        out.append(
            f"the fit is poor: per-step relative error p50 {100 * p50:.1f} %, p90"
            f" {100 * p90:.1f} % (a good fit: p50 at most {100 * POOR_P50:g} %, p90 at most"
            f" {100 * POOR_P90:g} %); likely causes: {LIKELY_CAUSES}"
        )
    out += [f"not identified: {name} ({why})" for name, why in unidentified]
    out += list(extra)
    return out


_WHY = {
    "t_min_s": "no step on the floor",
    "c0_s": "every step on the floor",
    "c_tok_s": "every step on the floor",
    "c_attn_s": "no prefill steps",
    "c_kv_s": "no decode steps",
    "c_chunk_sq_s": "no prefill steps",
}
"""Why each linear coefficient can go unidentified (see :func:`_result`)."""


@dataclass(frozen=True)
class FitResult:
    """A fitted engine model and how well it predicts the steps it was fitted to."""

    engine: EngineModel
    steps: int
    floor_steps: int
    """Steps whose token-proportional part is under ``t_min_s`` in the fitted model."""
    unidentified: tuple[str, ...]
    """Coefficients the steps cannot determine, kept at 0 (e.g. ``c_attn_s`` without
    prefill steps)."""
    error_p50: float
    """Percentiles of ``|predicted - measured| / measured`` over the steps."""
    error_p90: float
    error_p99: float
    error_max: float

    @property
    def warnings(self) -> list[str]:
        """What ``fit`` prints on stderr (:func:`fit_warnings`)."""
        why = [(p, _WHY[p]) for p in self.unidentified]
        return fit_warnings(self.error_p50, self.error_p90, why)


def _nnls(x: Array, y: Array) -> Array:
    """Least squares with every coefficient >= 0: solve, drop the most negative column,
    solve again (columns are scaled to unit norm first, so tiny coefficients are not lost)."""
    norms = np.linalg.norm(x, axis=0)
    active = [j for j in range(x.shape[1]) if norms[j] > 0]
    coef = np.zeros(x.shape[1])
    while active:
        xs = x[:, active] / norms[active]
        sol = np.linalg.lstsq(xs, y, rcond=None)[0] / norms[active]
        worst = int(np.argmin(sol))
        if sol[worst] >= 0:
            coef[active] = sol
            break
        del active[worst]
    return coef


def _design(s: Steps, floor: npt.NDArray[np.bool_]) -> Array:
    n = s.prefill_tokens + s.decode_tokens
    lin = ~floor
    cols = (floor, lin, lin * n, s.attention_pairs, s.decode_context_tokens, s.chunk_sq)
    return np.column_stack([np.asarray(c, dtype=np.float64) for c in cols])


def _predict(coef: Array, s: Steps) -> Array:
    t_min, c0, c_tok, c_attn, c_kv, c_sq = (float(c) for c in coef)
    n = s.prefill_tokens + s.decode_tokens
    lin: Array = np.maximum(t_min, c0 + c_tok * n)
    return lin + c_attn * s.attention_pairs + c_kv * s.decode_context_tokens + c_sq * s.chunk_sq


def _fit_split(s: Steps, floor: npt.NDArray[np.bool_]) -> tuple[Array, float]:
    """The coefficients for one split and their squared error relative to the modelled time.

    Each row is divided by its step's time, so a short step counts as much as a long one.
    Dividing by the *measured* time would favour the steps that happened to run fast: under
    noisy timings (a shared machine) the fit would follow them and predict well below the
    mean. So the rows are divided by the *modelled* time, by reweighting: the first pass
    divides by the measured time, each of the next :data:`REWEIGHTS` by the last prediction.
    """
    t = s.duration_s
    x = _design(s, floor)
    scale = t
    for _ in range(1 + REWEIGHTS):
        coef = _nnls(x / scale[:, None], t / scale)
        pred = _predict(coef, s)
        scale = np.where(pred > 0, pred, t)
    # The split's score is symmetric in the modelled and measured times: relative to either
    # one alone it would favour splits that predict too low (or too high) under noise.
    return coef, float(np.sum((pred - t) ** 2 / (scale * t)))


def _thresholds(n: Array) -> Array:
    # A split "floor iff N < v"; v = max(N) + 1 puts every step on the floor.
    values = np.unique(n)
    if len(values) > MAX_THRESHOLDS:
        values = np.unique(np.quantile(values, np.linspace(0, 1, MAX_THRESHOLDS), method="lower"))
    out: Array = np.append(values, values[-1] + 1)
    return out


def fit_steps(s: Steps, name: str = "fitted") -> FitResult:
    """Fit the engine model's five coefficients to measured steps (see the module docstring).

    Raises ``ValueError`` when the steps cannot determine the model: fewer than 5 steps, or
    fewer than two distinct batch sizes. Coefficients whose term is 0 in every step (no
    prefill, no decode) are kept at 0 and named in :attr:`FitResult.unidentified`.
    """
    # Steps far apart in scale can overflow numpy's sums: the coefficients are checked
    # instead (a warning printed before the command's error line would be a second line).
    with np.errstate(all="ignore"):
        return _fit_steps(s, name)


def _fit_steps(s: Steps, name: str) -> FitResult:
    if len(s) < 5:
        raise ValueError(f"fitting needs at least 5 steps, got {len(s)}")
    n = s.prefill_tokens + s.decode_tokens
    if len(np.unique(n)) < 2:
        raise ValueError(
            "fitting needs steps of at least two batch sizes (prefill_tokens + decode_tokens)"
            " to tell c0_s from c_tok_s; every step has the same"
        )
    best: tuple[Array, float] | None = None
    for v in _thresholds(n):
        if len(np.unique(n[n >= v])) == 1:
            continue  # one batch size above the floor: c0_s and c_tok_s not separable
        cand = _fit_split(s, n < v)
        if best is None or cand[1] < best[1]:
            best = cand
    assert best is not None  # the lowest threshold leaves every batch size above the floor
    coef = best[0]
    for _ in range(20):  # re-split by the fitted coefficients until the split is stable
        floor = coef[1] + coef[2] * n < coef[0]
        cand = _fit_split(s, floor)
        if cand[1] >= best[1]:
            break
        best = cand
        coef = cand[0]
    return _result(coef, s, name)


def _result(coef: Array, s: Steps, name: str) -> FitResult:
    n = s.prefill_tokens + s.decode_tokens
    floor = coef[1] + coef[2] * n < coef[0]
    unidentified = []
    if not floor.any():
        unidentified.append("t_min_s")
    if not s.attention_pairs.any():
        unidentified.append("c_attn_s")
    if not s.decode_context_tokens.any():
        unidentified.append("c_kv_s")
    if s.prefill_chunk_sq is not None and not s.prefill_chunk_sq.any():
        unidentified.append("c_chunk_sq_s")
    if floor.all():
        unidentified += ["c0_s", "c_tok_s"]
        coef[1] = coef[2] = 0.0
    for p in unidentified:
        coef[_PARAMS.index(p)] = 0.0
    if not np.isfinite(coef).all():
        raise ValueError(
            "the fitted coefficients are not finite numbers: the steps' counts and durations"
            " are too far apart in scale to fit"
        )
    engine = EngineModel(name=name, **{p: float(c) for p, c in zip(_PARAMS, coef)})
    rel = np.abs(_predict(coef, s) - s.duration_s) / s.duration_s
    p50, p90, p99 = (float(np.percentile(rel, q)) for q in (50, 90, 99))
    return FitResult(
        engine,
        len(s),
        int(floor.sum()),
        tuple(p for p in _PARAMS if p in unidentified),
        p50,
        p90,
        p99,
        float(rel.max()),
    )


def profile_text(engine: EngineModel, toml: bool) -> str:
    """``engine`` as a profile file that :func:`load_profile` reads (TOML or JSON)."""
    values = {p: getattr(engine, p) for p in _PARAMS}
    if not toml:
        import json

        return json.dumps({"name": engine.name, **values}, indent=2) + "\n"
    lines = ["[engine]", f"name = {_toml_string(engine.name)}"]
    lines += [f"{p} = {v!r}" for p, v in values.items()]
    return "\n".join(lines) + "\n"


def _toml_string(text: str) -> str:
    import json

    return json.dumps(text)  # a JSON string is a valid TOML basic string
