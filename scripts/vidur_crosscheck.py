"""Per-step times of the linear engine model against Vidur's A100 profile of Llama-2-7B.

Vidur (Agrawal et al., MLSys 2024) turns its per-layer profiles into a step time in
``vidur/execution_time_predictor/sklearn_execution_time_predictor.py`` and
``vidur/entities/execution_time.py`` (github.com/microsoft/vidur): per layer it adds the
token-proportional operations at the step's token count rounded up to a multiple of 8
(QKV and output projections, rotary embedding, the two norms, up/gate, activation, down, the
residual add), decode attention at (decode batch size, mean context rounded up to 64) times
1.1 when more than one request decodes, and prefill attention at (sum of the chunks' cached
tokens rounded up to 64, root of the sum of squared chunk lengths) times 1.1 when more than
one request prefills; then multiplies by the 32 layers. CPU overheads are off by default
(``skip_cpu_overhead_modeling``), so they are left out here too. Vidur fits a random forest to
the profile points; this script reads the profiled medians directly (each case below sits on
a profiled point; the token counts between the profile's points are interpolated linearly).

The profiled rows are in ``examples/vidur/`` with their provenance. Run::

    python scripts/vidur_crosscheck.py            # the table, before and after
    python scripts/vidur_crosscheck.py --fit      # least-squares coefficients for the grid
"""

from __future__ import annotations

import argparse
import csv
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from chunked_prefill.sim import EngineModel
from chunked_prefill.sim.engine import ENGINE_PRESETS

DATA = Path(__file__).resolve().parent.parent / "examples" / "vidur"
LAYERS = 32
BATCHING_OVERHEAD = 0.1  # Vidur's attention_{prefill,decode}_batching_overhead_fraction
KV_GRANULARITY = 64  # Vidur's kv_cache_prediction_granularity

BEFORE = EngineModel(
    name="llama2-7b-a100 (before)",
    t_min_s=9.5e-3,
    c0_s=2.2e-3,
    c_tok_s=65e-6,
    c_attn_s=2.5e-9,
    c_kv_s=0.3e-6,
    c_chunk_sq_s=0.0,
)
"""The preset as it was before the cross-check."""


def _rows(name: str) -> Iterator[dict[str, str]]:
    with open(DATA / name, newline="") as fh:
        yield from csv.DictReader(line for line in fh if not line.startswith("#"))


@dataclass(frozen=True)
class Case:
    """One step: prefill chunks as (tokens, cached before), decodes as (count, context)."""

    label: str
    chunks: tuple[tuple[int, int], ...] = ()
    decodes: tuple[int, int] = (0, 0)

    @property
    def kind(self) -> str:
        if self.chunks and self.decodes[0]:
            return "mixed"
        return "prefill" if self.chunks else "decode"


class Vidur:
    """Vidur's step time from the profiled medians (seconds)."""

    def __init__(self) -> None:
        mlp = list(_rows("a100_llama2_7b_mlp.csv"))
        self.tokens = np.array([int(r["num_tokens"]) for r in mlp], dtype=float)
        self.linear = np.array(
            [sum(float(v) for k, v in r.items() if k != "num_tokens") for r in mlp]
        )
        self.prefill: dict[tuple[int, int], float] = {}
        self.decode: dict[tuple[int, int], float] = {}
        for r in _rows("a100_llama2_7b_attention.csv"):
            ms = float(r["median_ms"])
            if r["kind"] == "prefill":
                self.prefill[int(r["prefill_chunk_size"]), int(r["kv_cache_size"])] = ms
            else:
                self.decode[int(r["batch_size"]), int(r["kv_cache_size"])] = ms

    def terms(self, case: Case) -> dict[str, float]:
        """The step's time split into Vidur's parts, in seconds."""
        n = sum(c for c, _ in case.chunks) + case.decodes[0]
        rounded = (n + 7) // 8 * 8
        linear = float(np.interp(rounded, self.tokens, self.linear))
        prefill = 0.0
        if case.chunks:
            kv = sum(_round_up(k) for _, k in case.chunks)
            chunk = round(math.sqrt(sum(c * c for c, _ in case.chunks)))
            prefill = self.prefill[chunk, kv] * (1 + BATCHING_OVERHEAD * (len(case.chunks) > 1))
        decode = 0.0
        if case.decodes[0]:
            decode = self.decode[case.decodes] * (1 + BATCHING_OVERHEAD * (case.decodes[0] > 1))
        ms_to_step = LAYERS * 1e-3
        return {
            "linear": linear * ms_to_step,
            "prefill_attn": prefill * ms_to_step,
            "decode_attn": decode * ms_to_step,
        }


def _round_up(kv: int) -> int:
    return (kv + KV_GRANULARITY - 1) // KV_GRANULARITY * KV_GRANULARITY


def shape(case: Case) -> dict[str, int]:
    """The step's inputs to the engine model."""
    b, context = case.decodes
    return {
        "prefill_tokens": sum(c for c, _ in case.chunks),
        "decode_tokens": b,
        "attention_pairs": sum(EngineModel.chunk_pairs(k, c) for c, k in case.chunks),
        "decode_context_tokens": b * context,
        "prefill_chunk_sq": sum(c * c for c, _ in case.chunks),
    }


def grid(vidur: Vidur) -> list[Case]:
    """Prefill-only steps on every profiled (chunk, cache) point from 128 tokens, decode-only
    steps on every profiled (batch, context) point, and mixed steps of one chunk plus a batch
    of decodes."""
    cases = [
        Case(f"prefill {c} @ {k}", chunks=((c, k),))
        for (c, k) in sorted(vidur.prefill)
        if c >= 128 and k % KV_GRANULARITY == 0
    ]
    cases += [Case(f"decode {b} x {k}", decodes=(b, k)) for (b, k) in sorted(vidur.decode)]
    for c, k in [(160, 512), (352, 256), (704, 512), (1152, 1024), (2048, 0), (3072, 256)]:
        for b, ctx in [(8, 3136), (64, 3072)]:
            cases.append(Case(f"mixed {c} @ {k} + {b} x {ctx}", ((c, k),), (b, ctx)))
    return cases


def ours(engine: EngineModel, case: Case) -> dict[str, float]:
    """The engine model's step time split into the same parts, in seconds."""
    s = shape(case)
    total = engine.step_time(
        s["prefill_tokens"],
        s["decode_tokens"],
        s["attention_pairs"],
        s["decode_context_tokens"],
        s["prefill_chunk_sq"],
    )
    prefill = engine.c_attn_s * s["attention_pairs"] + engine.c_chunk_sq_s * s["prefill_chunk_sq"]
    decode = engine.c_kv_s * s["decode_context_tokens"]
    return {"linear": total - prefill - decode, "prefill_attn": prefill, "decode_attn": decode}


def _errors(engine: EngineModel, vidur: Vidur, cases: list[Case]) -> list[float]:
    return [sum(ours(engine, c).values()) / sum(vidur.terms(c).values()) - 1.0 for c in cases]


def table(vidur: Vidur, cases: list[Case]) -> None:
    """Print each case's step time by Vidur, before and after, with the relative errors."""
    after = ENGINE_PRESETS["llama2-7b-a100"]
    head = ("case", "vidur ms", "lin", "pre-attn", "dec-attn", "before ms", "err")
    head += ("after ms", "err")
    print("{:<34}{:>9}{:>8}{:>9}{:>9}{:>10}{:>8}{:>9}{:>8}".format(*head))
    for c in cases:
        v = vidur.terms(c)
        b = sum(ours(BEFORE, c).values())
        a = sum(ours(after, c).values())
        t = sum(v.values())
        print(
            f"{c.label:<34}{t * 1e3:>9.2f}{v['linear'] * 1e3:>8.2f}{v['prefill_attn'] * 1e3:>9.2f}"
            f"{v['decode_attn'] * 1e3:>9.2f}{b * 1e3:>10.2f}{(b / t - 1) * 100:>7.1f}%"
            f"{a * 1e3:>9.2f}{(a / t - 1) * 100:>7.1f}%"
        )
    for name, engine in (("before", BEFORE), ("after", after)):
        for kind in ("prefill", "decode", "mixed", "all"):
            sel = [c for c in cases if kind in ("all", c.kind)]
            err = np.abs(_errors(engine, vidur, sel)) * 100
            print(
                f"{name:<7}{kind:<8} {len(sel):>3} steps: |error| median {np.median(err):4.1f} %,"
                f" max {err.max():4.1f} %, within 5 %: {int((err <= 5).sum())}"
            )
    off = [c.label for c, e in zip(cases, _errors(after, vidur, cases)) if abs(e) > 0.05]
    print(f"after, outside 5 %: {'; '.join(off)}")


def fit(vidur: Vidur, cases: list[Case]) -> None:
    """Print the coefficients that fit the grid's steps by relative least squares (the same
    fit as ``chunked-prefill fit``)."""
    from chunked_prefill.sim.fit import Steps, fit_steps

    shapes = [shape(c) for c in cases]

    def col(key: str) -> npt.NDArray[np.float64]:
        return np.array([s[key] for s in shapes], dtype=np.float64)

    steps = Steps(
        col("prefill_tokens"),
        col("decode_tokens"),
        col("attention_pairs"),
        col("decode_context_tokens"),
        np.array([sum(vidur.terms(c).values()) for c in cases]),
        prefill_chunk_sq=col("prefill_chunk_sq"),
    )
    result = fit_steps(steps, name="vidur-a100")
    print(result.engine)
    print(f"error p50 {result.error_p50:.2%} p90 {result.error_p90:.2%} max {result.error_max:.2%}")


def main() -> None:
    """Parse the flags and print the table (or the fit)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fit", action="store_true", help="print fitted coefficients instead")
    args = parser.parse_args()
    vidur = Vidur()
    cases = grid(vidur)
    if args.fit:
        fit(vidur, cases)
    else:
        table(vidur, cases)


if __name__ == "__main__":
    main()
