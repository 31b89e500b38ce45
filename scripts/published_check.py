"""Predict published inference measurements with the roofline and print the errors.

Each row of ``examples/published/measurements.csv`` is one published figure with its
conditions (engine and version, model, GPU, TP, dtypes, batch, input and output lengths,
what was timed). This script runs the same requests through the simulator (the serving
scheduler with the engine's chunking rule, every request arriving at once) on the
roofline of that model, GPU and software, and prints published against predicted:

    python scripts/published_check.py                 # every row, and the error summary
    python scripts/published_check.py --split issue   # the issue's rows only
    python scripts/published_check.py --markdown      # the table docs/engines.md shows

Metrics: ``ttft`` the mean time to the first token, ``tpot`` the mean time per output token
after the first, ``e2e`` the time until the last request finishes, ``gen_tps`` one request's
output tokens per second of its whole run (prefill included).
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from chunked_prefill.sim.catalog import engine_for
from chunked_prefill.sim.serving import ServingSimConfig, simulate_serving
from chunked_prefill.sim.workload import Request, Workload

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CSV = ROOT / "examples" / "published" / "measurements.csv"

V1_BUDGET = 8192
"""vLLM V1's default max_num_batched_tokens for the API server (chunked prefill on)."""
SGLANG_CHUNK = 8192
"""SGLang's default chunked_prefill_size on large GPUs."""


@dataclass(frozen=True)
class Row:
    """One published measurement (the CSV's columns)."""

    id: str
    split: str
    engine: str
    engine_version: str
    cuda_graphs: str
    model: str
    gpu: str
    tp: int
    weight_dtype: str
    kv_dtype: str
    batch: int
    input_len: int
    output_len: int
    metric: str
    published: float
    unit: str
    source: str


def read_rows(path: Path) -> list[Row]:
    """The measurements of ``path``."""
    with path.open(newline="") as f:
        out = []
        for raw in csv.DictReader(f):
            out.append(
                Row(
                    id=raw["id"],
                    split=raw["split"],
                    engine=raw["engine"],
                    engine_version=raw["engine_version"],
                    cuda_graphs=raw["cuda_graphs"],
                    model=raw["model"],
                    gpu=raw["gpu"],
                    tp=int(raw["tp"]),
                    weight_dtype=raw["weight_dtype"],
                    kv_dtype=raw["kv_dtype"],
                    batch=int(raw["batch"]),
                    input_len=int(raw["input_len"]),
                    output_len=int(raw["output_len"]),
                    metric=raw["metric"],
                    published=float(raw["published"]),
                    unit=raw["unit"],
                    source=raw["source"],
                )
            )
    return out


def _version(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in text.split(".")[:2])
    except ValueError:
        return ()


def serving_engine(row: Row) -> str:
    """The :data:`~chunked_prefill.sim.software.SERVING_ENGINES` name of a row's engine."""
    if row.engine == "vllm":
        v0 = _version(row.engine_version) < (0, 8) and _version(row.engine_version) != ()
        name = "vllm-v0" if v0 else "vllm"
        return name + "-eager" if row.cuda_graphs == "no" else name
    return row.engine


def sim_config(row: Row) -> ServingSimConfig:
    """The scheduler settings of a row's engine: vLLM V0 and TensorRT-LLM (of these
    measurements) prefill every prompt whole in one step; vLLM V1 and SGLang chunk."""
    whole = row.batch * row.input_len
    running = max(256, row.batch)
    if serving_engine(row).startswith("vllm-v0") or row.engine == "tensorrt-llm":
        return ServingSimConfig(
            chunk_size=None,
            token_budget=whole + row.batch,
            max_prefills_per_step=row.batch,
            max_running=running,
            prefix_caching=False,
        )
    budget = SGLANG_CHUNK if row.engine == "sglang" else V1_BUDGET
    return ServingSimConfig(
        chunk_size=budget,
        token_budget=budget,
        max_prefills_per_step=running,
        max_running=running,
        prefix_caching=False,
    )


def predict(row: Row) -> float:
    """The row's metric as the simulator predicts it, in the row's unit."""
    engine, memory = engine_for(
        row.model,
        row.gpu,
        row.tp,
        serving_engine=serving_engine(row),
        kv_cache_dtype="fp8" if row.kv_dtype == "fp8" else "auto",
        quantization="fp8" if row.weight_dtype == "fp8" else None,
    )
    requests = [Request(0.0, row.input_len, row.output_len)] * row.batch
    (result,) = simulate_serving(
        Workload.from_requests(requests), sim_config(row), engine=engine, memory=memory
    )
    first, finish = result.first_token, result.finish
    if row.metric == "ttft":
        value = float(np.mean(first))
    elif row.metric == "tpot":
        value = float(np.mean((finish - first) / (row.output_len - 1)))
    elif row.metric == "e2e":
        value = float(np.max(finish))
    elif row.metric == "gen_tps":
        return row.output_len / float(np.mean(finish))
    else:
        raise ValueError(f"{row.id}: unknown metric {row.metric!r}")
    return value * {"ms": 1e3, "s": 1.0}[row.unit]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    p.add_argument("--split", default="all", help="issue, extra or all")
    p.add_argument("--markdown", action="store_true", help="a Markdown table")
    args = p.parse_args(argv)
    rows = [r for r in read_rows(args.csv) if args.split in ("all", r.split)]
    errors = []
    if args.markdown:
        print("| id | condition | published | predicted | ratio |")
        print("| --- | --- | ---: | ---: | ---: |")
    for row in rows:
        got = predict(row)
        ratio = got / row.published
        errors.append(abs(ratio - 1))
        cond = (
            f"{row.model} TP{row.tp} {row.gpu} {row.weight_dtype}"
            f"{' kv-fp8' if row.kv_dtype == 'fp8' else ''}, {serving_engine(row)},"
            f" batch {row.batch}, {row.input_len} in / {row.output_len} out, {row.metric}"
        )
        if args.markdown:
            print(f"| {row.id} | {cond} | {row.published:g} {row.unit} | {got:.4g} | {ratio:.2f} |")
        else:
            print(f"{row.id:32} {cond:90} {row.published:10.4g} {got:10.4g} {ratio:6.2f}")
    if errors:
        print(
            f"\n{len(errors)} points: median error {statistics.median(errors):.1%},"
            f" max {max(errors):.1%}, over 15 %: {sum(e > 0.15 for e in errors)}",
            file=sys.stderr if args.markdown else sys.stdout,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
