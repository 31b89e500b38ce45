"""Figures for ``docs/hf.md``: what the scheduler costs inside a real transformers loop.

1. In :func:`chunked_prefill.hf.generate`, the share of each step's wall time spent in the
   scheduler (``enqueue`` + ``next_step`` + ``drain_completed``) against the model's forward
   passes. The tiny CPU model makes forwards as cheap as they get, so this is the worst case
   for the scheduler's share.
2. In transformers' continuous batching (``model.generate_batch``), the time of each
   ``schedule_batch`` call of :class:`chunked_prefill.hf.ChunkedPrefillCBScheduler` against
   the built-in ``FIFOScheduler``, on the same prompts and the same budgets.

Run (needs the ``hf`` extra)::

    PYTHONPATH=python python benches/hf_figures.py            # both backends if built
    PYTHONPATH=python python benches/hf_figures.py --backend pure --prompts 64

It prints Markdown tables; no file is written.
"""

from __future__ import annotations

import argparse
import importlib
import platform
import statistics
import sys
import time
from types import ModuleType
from typing import Any

import torch
import transformers
from transformers import GenerationConfig
from transformers.generation.configuration_utils import ContinuousBatchingConfig
from transformers.generation.continuous_batching import scheduler as cb_scheduler

from chunked_prefill import hf
from paged_figures import tiny_llama

BACKENDS = {"rust": "chunked_prefill._core", "pure": "chunked_prefill.pure"}


def workload(n: int, seed: int = 1) -> list[list[int]]:
    """``n`` prompts of 16 to 256 tokens."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(16, 257, (n,), generator=gen).tolist()
    return [torch.randint(0, 128, (k,), generator=gen).tolist() for k in lengths]


def us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f}"


def loop_share(
    model: Any, prompts: list[list[int]], module: ModuleType, max_new: int, repeat: int
) -> str:
    config = module.Config(
        chunk_size=64, max_decode_tokens=32, token_budget=128, max_prefills_per_step=4
    )
    hf.generate(model, prompts[:4], config=config, max_new_tokens=2, backend=module)  # warm up
    timings: list[hf.StepTiming] = []
    walls = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        hf.generate(
            model, prompts, config=config, max_new_tokens=max_new, backend=module, timings=timings
        )
        walls.append(time.perf_counter() - t0)
    sched = sum(t.scheduler_s for t in timings)
    total = sum(t.total_s for t in timings)
    step_share = statistics.median(t.scheduler_s / t.total_s for t in timings)
    return (
        f"| {module.__name__} | {len(timings) // repeat} "
        f"| {us(statistics.median(t.scheduler_s for t in timings))} "
        f"| {statistics.median(t.forward_s for t in timings) * 1e3:.2f} "
        f"| {100 * step_share:.3f} % | {100 * sched / total:.3f} % "
        f"| {statistics.median(walls):.2f} |"
    )


def cb_times(
    model: Any, prompts: list[list[int]], scheduler_cls: type[Any], max_new: int, name: str
) -> tuple[list[float], float]:
    sink: list[float] = []
    cb_scheduler.SCHEDULER_MAPPING[name] = hf.timed_scheduler(scheduler_cls, sink)
    gen = GenerationConfig(  # type: ignore[no-untyped-call]
        do_sample=False, max_new_tokens=max_new, eos_token_id=None, pad_token_id=0
    )
    cb = ContinuousBatchingConfig(
        scheduler_type=name,
        num_blocks=4 * len(prompts),
        max_batch_tokens=256,
        page_size=64,
        max_requests_per_batch=64,
    )
    t0 = time.perf_counter()
    model.generate_batch(prompts, generation_config=gen, continuous_batching_config=cb)
    return sink, time.perf_counter() - t0


class _TimedPlanner:
    """Forwards to the planner and adds the time of its calls to ``sink[0]``."""

    def __init__(self, planner: Any, sink: list[float]) -> None:
        self._planner = planner
        self._sink = sink

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._planner, name)
        sink = self._sink

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                sink[0] += time.perf_counter() - t0

        return timed


def with_planner_timing(cls: type[Any], sink: list[float]) -> type[Any]:
    """``cls`` with every call into its chunked_prefill planner timed into ``sink[0]``."""
    build = cls._build_planner

    def _build_planner(self: Any, token_budget: int) -> None:
        planner = getattr(self, "_planner", None)
        if isinstance(planner, _TimedPlanner):
            self._planner = planner._planner
        build(self, token_budget)
        self._planner = _TimedPlanner(self._planner, sink)

    return type(cls.__name__, (cls,), {"_build_planner": _build_planner})


def cb_row(
    label: str, sink: list[float], walls: list[float], repeat: int, planner: float | None = None
) -> str:
    per_call = "n/a" if planner is None else f"{us(planner / len(sink))}"
    return (
        f"| {label} | {len(sink) // repeat} | {us(statistics.median(sink))} "
        f"| {us(statistics.mean(sink))} | {per_call} | {100 * sum(sink) / sum(walls):.2f} % "
        f"| {statistics.median(walls):.2f} |"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=[*BACKENDS, "both"], default="both")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--max-new", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement")
    args = parser.parse_args(argv)
    repeat = args.repeat

    names = list(BACKENDS) if args.backend == "both" else [args.backend]
    modules = []
    for name in names:
        try:
            modules.append(importlib.import_module(BACKENDS[name]))
        except ImportError as exc:
            print(f"(skipping {BACKENDS[name]}: {exc})", file=sys.stderr)
    torch.set_num_threads(1)
    model = tiny_llama()
    prompts = workload(args.prompts)
    print(
        f"python {platform.python_version()}, torch {torch.__version__}, transformers "
        f"{transformers.__version__}, {platform.machine()}, 1 torch thread; {len(prompts)} "
        f"prompts of 16-256 tokens (sum {sum(map(len, prompts))}), {args.max_new} new tokens "
        f"each; {repeat} runs per row"
    )

    print("\n1. chunked_prefill.hf.generate, chunk 64, budget 128, 4 prefills/step, 32 decodes")
    print(
        "| backend | steps | scheduler µs/step (median) | forward ms/step (median) "
        "| scheduler share of a step (median) | scheduler share of all steps | wall s |"
    )
    print("|---|---|---|---|---|---|---|")
    for module in modules:
        print(loop_share(model, prompts, module, args.max_new, repeat))

    print("\n2. generate_batch: schedule_batch per call, max_batch_tokens 256, 64 requests/batch")
    print(
        "| scheduler | calls | median µs | mean µs | planner µs/call "
        "| schedule_batch share of wall | wall s |"
    )
    print("|---|---|---|---|---|---|---|")
    rows: list[tuple[str, type[Any], list[float] | None]] = [
        ("transformers FIFOScheduler", cb_scheduler.FIFOScheduler, None)
    ]
    for module in modules:
        cls = hf.register("timed_base", chunk_size=64, max_prefills_per_step=4, backend=module)
        planner = [0.0]
        rows.append(
            (
                f"ChunkedPrefillCBScheduler ({module.__name__})",
                with_planner_timing(cls, planner),
                planner,
            )
        )
    sinks: dict[str, list[float]] = {label: [] for label, _, _ in rows}
    walls: dict[str, list[float]] = {label: [] for label, _, _ in rows}
    for _label, cls, planner_sink in rows:
        cb_times(model, prompts[:4], cls, 2, "warmup")
        if planner_sink is not None:
            planner_sink[0] = 0.0
    for _ in range(repeat):  # interleaved, so load changes hit every row alike
        for label, cls, _ in rows:
            sink, wall = cb_times(model, prompts, cls, args.max_new, "timed")
            sinks[label] += sink
            walls[label].append(wall)
    for label, _, planner_sink in rows:
        planner_s = None if planner_sink is None else planner_sink[0]
        print(cb_row(label, sinks[label], walls[label], repeat, planner_s))


if __name__ == "__main__":
    main()
