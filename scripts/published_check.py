"""Predict published inference measurements with the roofline and print the errors.

Each row of ``examples/published/measurements.csv`` is one published figure with its
conditions (engine and version, model, GPU, TP, dtypes, batch, input and output lengths,
what was timed). This script runs the same requests through the simulator (the serving
scheduler with the engine's chunking rule, every request arriving at once) on the
roofline of that model, GPU and software, and prints published against predicted:

    python scripts/published_check.py                 # every row, and the error summary
    python scripts/published_check.py --split issue   # the issue's rows only
    python scripts/published_check.py --markdown      # the table docs/engines.md shows
    python scripts/published_check.py --csv examples/published/weight_only.csv  # GPTQ, AWQ

Metrics: ``ttft`` the mean time to the first token, ``tpot`` the mean time per output token
after the first, ``e2e`` the time until the last request finishes, ``gen_tps`` one request's
output tokens per second of its whole run (prefill included), ``throughput`` an offline run's
rate over the time until its last request finishes (``req/s``: requests, ``tokens/s``:
output tokens).
"""

from __future__ import annotations

import argparse
import csv
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from chunked_prefill.sim.catalog import engine_for
from chunked_prefill.sim.engines.software import VLLM_V1_TOKEN_BUDGETS
from chunked_prefill.sim.serving import ServingSimConfig, simulate_serving
from chunked_prefill.sim.software import vllm_software, vllm_token_budget
from chunked_prefill.sim.workload import Request, Workload

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CSV = ROOT / "examples" / "published" / "measurements.csv"

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


def serving_engine(row: Row) -> str:
    """The :data:`~chunked_prefill.sim.software.SERVING_ENGINES` name of a row's engine:
    vLLM's from its release (:func:`~chunked_prefill.sim.software.vllm_software`); NIM's
    FP8 TP profiles run TensorRT-LLM."""
    if row.engine == "vllm":
        return vllm_software(vllm_release(row), eager=row.cuda_graphs == "no")[0]
    if row.engine == "nim":
        return "tensorrt-llm"
    return row.engine


def attention_backend(row: Row) -> str:
    """The :data:`~chunked_prefill.sim.software.ATTENTION_BACKENDS` name of a row's engine:
    ``paged`` for vLLM before 0.4.3 (decode through its PagedAttention kernel, which reads a
    K/V head once per query head), ``flash`` for the rest."""
    if row.engine != "vllm":
        return "flash"
    return vllm_software(vllm_release(row))[1]


PAGED_DECODE_SOURCES = ("vLLM PR #2542", "vLLM PR #3240", "vLLM PR #3692", "vLLM PR #4002")
"""Sources whose vLLM version is unknown but whose date is not: January to April 2024, vLLM's
main before PR #4907 (2024-05-19, released in 0.4.3) made FlashAttention its decode kernel."""


V1_SOURCES = ("vLLM PR #20155", "pytorch/ao docs")
"""Sources whose vLLM version is unknown but whose date is not: June and July 2025, vLLM
main or nightly between 0.9.1 and 0.9.2, the V1 engine."""


V1_ALPHA_SOURCES = ("vLLM PR #11938",)
"""Sources that ran vLLM's V1 engine before it was the default (``VLLM_USE_V1=1`` on main of
January 2025): V1's scheduler and CPU costs (``0.8.0``, the first release that ran it by
default), at the ``LLM`` class's budget before PR #12369 raised it on Hopper GPUs."""


MID_2024_SOURCES = ("MInference",)
"""Sources whose vLLM version is unknown but whose date is not: MInference's vLLM table of
2024-07-18 (its README: vllm>=0.4.1), whose release of the day was 0.5.2: V0, FlashAttention
decode, each prompt prefilled whole (before 0.5.4 chunked long contexts by default)."""


def vllm_release(row: Row) -> str:
    """A vLLM row's version; where it is unknown, the release its date implies: main before
    0.4.3 for the PRs of January to April 2024 (``0.4.0``), 0.5.2 for MInference's table of
    July 2024, a V1 release for the sources of mid-2025 (``0.9.1``), a V0 release after 0.6
    for the rest, which come from later in 2024 (the CI builds, Oracle's and ROCm's blogs,
    vLLM's torch.compile docs: ``0.6.0``)."""
    if row.engine_version != "unknown":
        return row.engine_version
    if row.source.startswith(PAGED_DECODE_SOURCES):
        return "0.4.0"
    if row.source.startswith(MID_2024_SOURCES):
        return "0.5.2"
    if row.source.startswith(V1_ALPHA_SOURCES):
        return "0.8.0"
    return "0.9.1" if row.source.startswith(V1_SOURCES) else "0.6.0"


FP8_CHECKPOINT_ORGS = ("neuralmagic/", "RedHatAI/")
"""Publishers of FP8 checkpoints of Meta's Llama models under Meta's names (Neural Magic,
now Red Hat AI): ``RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8`` is Meta's model in FP8."""


def model_and_quantization(row: Row) -> tuple[str, str | None]:
    """The catalog model of a row and its ``quantization``: an ``-FP8`` checkpoint is its
    base model with FP8 linear weights (the CSV's ``weight_dtype`` says fp8), Neural Magic's
    and Red Hat's of a Llama model Meta's."""
    model = row.model.removesuffix("-FP8")
    for org in FP8_CHECKPOINT_ORGS:
        if model.startswith(org + "Meta-Llama-"):
            model = "meta-llama/" + model.removeprefix(org)
    return model, "fp8" if row.weight_dtype == "fp8" else None


def sim_config(row: Row) -> ServingSimConfig:
    """The scheduler settings of a row's engine: vLLM's default budget for its release
    (:func:`~chunked_prefill.sim.software.vllm_token_budget`; V0 prefills every prompt whole
    in one step unless the context is over 32 k, V1 chunks), started with the least
    ``max_model_len`` that holds the request (as the Qwen sources that state it) from the
    ``LLM`` class (every vLLM row: ``benchmark_latency`` or Qwen's script); SGLang chunks at
    its default; TensorRT-LLM (of these measurements) prefills whole."""
    running = max(256, row.batch)
    budget: int | None = None
    if row.engine == "sglang":
        budget = SGLANG_CHUNK
    elif row.engine == "vllm":
        context = row.input_len + row.output_len
        if row.source.startswith(V1_ALPHA_SOURCES):
            budget = VLLM_V1_TOKEN_BUDGETS[False, True]  # every GPU's before PR #12369
        else:
            budget = vllm_token_budget(vllm_release(row), context, gpu=row.gpu, offline=True)
    if budget is None:
        return ServingSimConfig(
            chunk_size=None,
            token_budget=row.batch * row.input_len + row.batch,
            max_prefills_per_step=row.batch,
            max_running=running,
            prefix_caching=False,
        )
    return ServingSimConfig(
        chunk_size=budget,
        token_budget=budget,
        max_prefills_per_step=running,
        max_running=running,
        prefix_caching=False,
    )


def predict(row: Row) -> float:
    """The row's metric as the simulator predicts it, in the row's unit."""
    model, quantization = model_and_quantization(row)
    engine, memory = engine_for(
        model,
        row.gpu,
        row.tp,
        serving_engine=serving_engine(row),
        attention_backend=attention_backend(row),
        kv_cache_dtype="fp8" if row.kv_dtype == "fp8" else "auto",
        quantization=quantization,
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
    elif row.metric == "throughput":
        per_request = {"req/s": 1, "tokens/s": row.output_len}[row.unit]
        return row.batch * per_request / float(np.max(finish))
    elif row.metric == "gen_tps":
        # Qwen3's page counts prompt and generated tokens, Qwen2's and Qwen2.5's only the
        # generated ones (examples/published/README.md).
        tokens = row.output_len + (row.input_len if "Qwen3" in row.source else 0)
        return tokens / float(np.mean(finish))
    else:
        raise ValueError(f"{row.id}: unknown metric {row.metric!r}")
    return value * {"ms": 1e3, "s": 1.0}[row.unit]


BEFORE_CSV = ROOT / "examples" / "published" / "predicted_before.csv"
"""The roofline's predictions before issue 23 (commit 36ca3ca), empty where it could not
predict the row (FP8, a GPU or a Qwen-MoE layout it did not have)."""


def read_before(path: Path = BEFORE_CSV) -> dict[str, float | None]:
    """The earlier predictions of ``path`` by row id."""
    with path.open(newline="") as f:
        return {
            r["id"]: float(r["predicted"]) if r["predicted"] else None for r in csv.DictReader(f)
        }


def group(row: Row) -> str:
    """The summary group of a row: its engine and where it was measured."""
    return f"{serving_engine(row).removesuffix('-eager')} on {row.gpu}"


def summary(errors: list[float]) -> str:
    """Median and largest error, and how many are over 15 %."""
    return (
        f"{len(errors)} points: median error {statistics.median(errors):.1%},"
        f" max {max(errors):.1%}, over 15 %: {sum(e > 0.15 for e in errors)}"
    )


def condition(row: Row) -> str:
    """A row's conditions, short."""
    dtype = row.weight_dtype + (", fp8 KV" if row.kv_dtype == "fp8" else "")
    software = serving_engine(row)
    if attention_backend(row) != "flash":
        software += f" {attention_backend(row)}"
    return (
        f"{row.model.split('/')[-1]}, TP{row.tp} {row.gpu}, {dtype}, {software},"
        f" batch {row.batch}, {row.input_len} in / {row.output_len} out"
    )


def _ratio(value: float | None, published: float) -> str:
    return "-" if value is None else f"{value / published:.2f}"


def markdown(rows: list[Row], predicted: list[float], before: dict[str, float | None]) -> None:
    """The table docs/engines.md shows, then the summaries."""
    print("| id | conditions | metric | published | before | ratio | now | ratio |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for row, got in zip(rows, predicted):
        old = before.get(row.id)
        print(
            f"| {row.id} | {condition(row)} | {row.metric} | {row.published:.4g} {row.unit} |"
            f" {'-' if old is None else f'{old:.4g}'} | {_ratio(old, row.published)} |"
            f" {got:.4g} | {_ratio(got, row.published)} |"
        )


def summaries(rows: list[Row], predicted: list[float], before: dict[str, float | None]) -> None:
    """Error summaries: all rows, the issue's, by engine and GPU, and the earlier model's."""
    errors = {row.id: abs(got / row.published - 1) for row, got in zip(rows, predicted)}
    print(f"\nall: {summary(list(errors.values()))}")
    issue = [errors[r.id] for r in rows if r.split == "issue"]
    if issue:
        print(f"the issue's points: {summary(issue)}")
    vllm = [errors[r.id] for r in rows if r.engine == "vllm"]
    if vllm:
        print(f"vLLM's rows: {summary(vllm)}")
    groups: dict[str, list[float]] = {}
    for r in rows:
        groups.setdefault(group(r), []).append(errors[r.id])
    for name, errs in groups.items():
        print(f"  {name}: {summary(errs)}")
    old = {r.id: before.get(r.id) for r in rows}
    for name, chosen in (("issue's", "issue"), ("predictable", "all")):
        known = [r for r in rows if old[r.id] is not None and chosen in ("all", r.split)]
        if known:
            was = [abs(old[r.id] / r.published - 1) for r in known]  # type: ignore[operator]
            print(f"the earlier model on the {name} rows it could predict: {summary(was)}")
            print(f"  now: {summary([errors[r.id] for r in known])}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    p.add_argument("--split", default="all", help="issue, extra or all")
    p.add_argument("--markdown", action="store_true", help="the table docs/engines.md shows")
    args = p.parse_args(argv)
    rows = [r for r in read_rows(args.csv) if args.split in ("all", r.split)]
    predicted = [predict(row) for row in rows]
    before = read_before()
    if args.markdown:
        markdown(rows, predicted, before)
    else:
        for row, got in zip(rows, predicted):
            print(
                f"{row.id:40} {condition(row):80} {row.metric:8}"
                f" {row.published:10.4g} {got:10.4g} {got / row.published:6.2f}"
            )
    summaries(rows, predicted, before)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
