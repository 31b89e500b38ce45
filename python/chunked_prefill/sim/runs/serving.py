"""The memory-true simulation: a workload through the serving scheduler, its loop in Rust.

:func:`simulate_serving` runs each :class:`ServingSimConfig` with the core's loop
(``_core.simulate_serving``) or, with ``backend="pure"``, the reference loop of
:mod:`.serving_loop` over the pure twin; both return the same records, summarised here
into :class:`~.results.SimResult` values, so the two give identical reports.

The loop: requests are added to the scheduler when they arrive; each step is planned by
``schedule()``, lasts the engine model's step time (decodes' context = their tokens so
far, prefill items' attention pairs), and is reported with ``update()`` (a request stops
at its ``output_tokens``). With nothing tracked the clock jumps to the next arrival.
"""

from __future__ import annotations

import itertools
import sys
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .._check import boolean, check_callback, check_engine, count, items, kind, real, show
from .._lazy import import_meanwhile
from ..engines.linear import (
    DEFAULT_ENGINE,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    KVMemory,
)
from ..engines.roofline import RooflineModel, StepTimeModel
from ..engines.spec import memory_of
from ..workload.tokens import TokenPlan
from ..workload.types import Workload
from .defaults import DEFAULT_DRAIN, DEFAULT_STALL_THRESHOLD_S, DEFAULT_WARMUP
from .errors import StepLimitError
from .router import check_fleet
from .serving_loop import SimLoopError, check_fits, run_loop

if TYPE_CHECKING:
    from .planner import ProgressCallback
    from .results import SimResult

__all__ = [
    "RECORD_MODULES",
    "ServingSimConfig",
    "SimLoopError",
    "check_fits",
    "default_num_blocks",
    "expand_serving_configs",
    "memory_of",
    "min_serving_steps",
    "resolve_configs",
    "simulate_serving",
]

U64_MAX = 2**64 - 1

RECORD_MODULES = ("numpy", f"{__package__}.summary")
"""The modules a run's records need after the Rust loop and nothing before it needs (numpy,
the summary and the results' dataclasses): imported while the loop runs."""


@dataclass(frozen=True)
class ServingSimConfig:
    """One serving-scheduler configuration to simulate (``ServingConfig``'s options).

    ``chunk_size=None`` is no chunking, as vLLM without chunked prefill: every prompt (and
    every recomputation after a preemption) is computed whole in one step; the scheduler
    gets ``chunk_size`` = the longest ``prompt + output - 1`` of the workload, ``L``, and
    the step's budget is stretched to fit it (``token_budget`` is then ``None``).
    ``token_budget=None`` with a chunk size is no budget: ``L + max_running + 1``, room
    for every decode and a whole chunk. ``num_blocks=None`` takes the engine's KV pool
    (:func:`default_num_blocks`).
    """

    chunk_size: int | None = 512
    token_budget: int | None = 2048
    max_prefills_per_step: int = 4
    max_running: int = 256
    block_size: int = 16
    num_blocks: int | None = None
    watermark: float = 0.0
    prefix_caching: bool = True

    def __post_init__(self) -> None:
        # The rules of ServingConfig's own checks, here so that a bad value names the
        # option when it is built (the pool size is known only at the run).
        for name, none in (
            ("chunk_size", True),
            ("token_budget", True),
            ("max_prefills_per_step", False),
            ("max_running", False),
            ("block_size", False),
            ("num_blocks", True),
        ):
            object.__setattr__(self, name, count(name, getattr(self, name), 1, U64_MAX, none=none))
        object.__setattr__(
            self, "watermark", real("watermark", self.watermark, 0.0, 1.0, high_open=True)
        )
        object.__setattr__(self, "prefix_caching", boolean("prefix_caching", self.prefix_caching))

    def label(self) -> str:
        """A short human-readable description."""
        parts = ["chunk=" + ("none" if self.chunk_size is None else str(self.chunk_size))]
        if self.token_budget is not None:
            parts.append(f"budget={self.token_budget}")
        parts.append(f"prefills={self.max_prefills_per_step} running<={self.max_running}")
        if self.num_blocks is not None:
            parts.append(f"blocks={self.num_blocks}")
        if not self.prefix_caching:
            parts.append("no-prefix-cache")
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """The options as plain data."""
        return {
            "scheduler": "serving",
            "chunk_size": self.chunk_size,
            "token_budget": self.token_budget,
            "max_prefills_per_step": self.max_prefills_per_step,
            "max_running": self.max_running,
            "block_size": self.block_size,
            "num_blocks": self.num_blocks,
            "watermark": self.watermark,
            "prefix_caching": self.prefix_caching,
        }

    def scheduler_options(self, workload: Workload, num_blocks: int) -> dict[str, Any]:
        """Keyword arguments of the ``ServingConfig`` this runs with."""
        chunk, budget = self.chunk_size, self.token_budget
        if chunk is None or budget is None:
            longest = max(p + o - 1 for p, o in zip(workload.prompt_tokens, workload.output_tokens))
            chunk = longest if chunk is None else chunk
            budget = longest + self.max_running + 1
        return {
            "num_blocks": self.num_blocks if self.num_blocks is not None else num_blocks,
            "block_size": self.block_size,
            "token_budget": budget,
            "chunk_size": chunk,
            "max_prefills_per_step": self.max_prefills_per_step,
            "max_running": self.max_running,
            "watermark": self.watermark,
            "prefix_caching": self.prefix_caching,
        }


def expand_serving_configs(
    chunk_sizes: Iterable[int | None] = (256, 512, 2048, None),
    token_budgets: Iterable[int | None] = (2048,),
    max_prefills_per_step: Iterable[int] = (4,),
    max_running: Iterable[int] = (256,),
    block_sizes: Iterable[int] = (16,),
    num_blocks: Iterable[int | None] = (None,),
    watermarks: Iterable[float] = (0.0,),
    prefix_caching: Iterable[bool] = (True,),
) -> list[ServingSimConfig]:
    """The cross product of the options, in order (the first varies slowest); a
    ``None`` chunk size drops the token budget (it is stretched), duplicates removed."""
    out: list[ServingSimConfig] = []
    seen: set[ServingSimConfig] = set()
    axes = [
        items(name, value, what)
        for name, value, what in (
            ("chunk_sizes", chunk_sizes, "ints or None"),
            ("token_budgets", token_budgets, "ints or None"),
            ("max_prefills_per_step", max_prefills_per_step, "ints"),
            ("max_running", max_running, "ints"),
            ("block_sizes", block_sizes, "ints"),
            ("num_blocks", num_blocks, "ints or None"),
            ("watermarks", watermarks, "numbers"),
            ("prefix_caching", prefix_caching, "bools"),
        )
    ]
    for chunk, budget, prefills, running, bs, blocks, wm, pc in itertools.product(*axes):
        cfg = ServingSimConfig(
            chunk, None if chunk is None else budget, prefills, running, bs, blocks, wm, pc
        )
        if cfg not in seen:
            seen.add(cfg)
            out.append(cfg)
    return out


def default_num_blocks(
    engine: StepTimeModel | str,
    block_size: int = 16,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
) -> int:
    """The KV pool of an engine preset (see :func:`memory_of`), in blocks."""
    return memory_of(engine).num_blocks(block_size, gpu_memory_utilization)


def resolve_configs(
    workload: Workload,
    configs: Sequence[ServingSimConfig],
    engine: StepTimeModel = DEFAULT_ENGINE,
    num_blocks: int | None = None,
    memory: KVMemory | None = None,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
) -> list[dict[str, Any]]:
    """The ``ServingConfig`` keyword arguments each configuration runs with (see
    :func:`simulate_serving` for the pool size)."""
    out = []
    for cfg in configs:
        pool = num_blocks if num_blocks is not None else cfg.num_blocks
        if pool is None:
            mem = memory if memory is not None else memory_of(engine)
            pool = mem.num_blocks(cfg.block_size, gpu_memory_utilization)
        out.append(cfg.scheduler_options(workload, pool))
    return out


def min_serving_steps(workload: Workload, options: dict[str, Any]) -> tuple[int, str]:
    """A lower bound of the steps a serving run takes, and why, found in one pass: the
    longest output (a prefill step, then one step per further token; prefix-cache hits may
    leave a prompt a single step) and all decode tokens at ``max_running`` per step."""
    chain, chain_of, total_decode = _longest_output(workload)
    width = options["max_running"]
    bounds = [
        (chain, f"request {chain_of} alone takes a prefill step, then {chain - 1} decode steps"),
        (-(-total_decode // width), f"{total_decode} decode tokens, at most {width} per step"),
    ]
    return max(bounds, key=lambda b: b[0])


def _longest_output(workload: Workload) -> tuple[int, int, int]:
    """The longest output, its first request, and the decode tokens of all (the
    workload's kept figures)."""
    stats = workload._stats()
    return stats.max_output, stats.longest_output_at, stats.total_output - len(workload)


def _bytes(values: Sequence[int], code: str) -> bytes:
    """The little-endian 8-byte words of ``values`` (``code`` ``"q"``: signed, ``"Q"``:
    unsigned), made without numpy, which the run imports meanwhile."""
    words = array(code, values)
    if sys.byteorder == "big":
        words.byteswap()
    return words.tobytes()


def _run_rust(
    workload: Workload,
    options: dict[str, Any],
    engine: StepTimeModel,
    max_steps: int,
    replicas: int,
    router: str,
) -> dict[str, Any]:
    from ... import _core

    plan = TokenPlan(workload)
    roofline: list[float] | None = None
    linear_coefficients = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    if isinstance(engine, RooflineModel):
        roofline = engine.coefficients()
    else:
        linear_coefficients = (
            engine.t_min_s,
            engine.c0_s,
            engine.c_tok_s,
            engine.c_attn_s,
            engine.c_kv_s,
            engine.c_chunk_sq_s,
        )
    import_meanwhile(*RECORD_MODULES)
    raw: dict[str, Any] = _core.simulate_serving(
        # The columns themselves, read into the core's vectors: a copy in bytes would live
        # as long as the run (24 MB a million requests).
        workload.arrival_s,
        workload.prompt_tokens,
        workload.output_tokens,
        _bytes(workload.priority, "q") if workload._stats().any_priority else b"",
        bytes(plan.known),
        plan.prefix_tokens,
        _bytes(plan.group, "Q"),
        _bytes(plan.session, "Q"),
        plan.hash_block,
        _bytes(plan.hash_offsets, "Q"),
        _bytes(plan.hash_ids, "Q"),
        engine=linear_coefficients,
        max_steps=max_steps,
        roofline=roofline,
        replicas=replicas,
        router=router,
        **options,
    )
    import numpy as np

    # arrival_s: the workload's column, given back as the records are.
    floats = (
        "admitted",
        "first_token",
        "finish",
        "max_gap",
        "gap_values",
        "kv_series_t",
        "arrival_s",
    )
    counts = ("cached_tokens", "preemptions", "recomputed_tokens", "replica")
    for key, value in list(raw.items()):
        if key in counts and not value:
            # All 0: zeros that take no memory until written.
            raw[key] = np.zeros(len(workload), dtype="<u8")
        elif isinstance(value, bytes):
            raw[key] = np.frombuffer(value, dtype="<f8" if key in floats else "<u8")
    return raw


def simulate_serving(
    workload: Workload,
    configs: ServingSimConfig | Iterable[ServingSimConfig] | None = None,
    *,
    engine: StepTimeModel = DEFAULT_ENGINE,
    num_blocks: int | None = None,
    memory: KVMemory | None = None,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    backend: str = "rust",
    stall_threshold_s: float = DEFAULT_STALL_THRESHOLD_S,
    slo_ttft_s: float | None = None,
    slo_tpot_s: float | None = None,
    slo_tbt_s: float | None = None,
    max_steps: int = 10_000_000,
    replicas: int = 1,
    router: str = "round-robin",
    warmup: float = DEFAULT_WARMUP,
    drain: float = DEFAULT_DRAIN,
    on_progress: ProgressCallback | None = None,
) -> list[SimResult]:
    """Run ``workload`` through the serving scheduler once per configuration.

    ``replicas`` identical replicas (each its own scheduler and engine clock, each with the
    configuration's pool) serve it behind ``router`` (``"round-robin"``, ``"least-loaded"``
    or ``"prefix-aware"``, see :mod:`.router`); latency, throughput and goodput are the
    fleet's. One replica is the single-engine simulation.

    ``num_blocks`` is the pool of configurations that do not set one (default: ``memory``,
    else the engine preset's (:func:`memory_of`), at ``gpu_memory_utilization`` and the
    configuration's block size). ``backend`` is ``"rust"`` (the core's loop) or
    ``"pure"`` (the reference loop); both give identical results. SLOs are per request, as
    vLLM's benchmark goodput: TTFT, mean time per output token after the first, and
    (stricter) every gap between two tokens; a request meets them when it meets every one
    given. SLO attainment, goodput, the offered and served rates and the steady output
    throughput are measured on the steady part (:mod:`.steady`): ``warmup`` and ``drain``
    are the fractions of requests, first and last arrivals, left out; ``overloaded`` says
    the engine finished fewer requests than arrived. Raises ``ValueError`` for a
    configuration the scheduler refuses, a request the pool can never hold (naming it) or
    a run past ``max_steps`` (:class:`StepLimitError`).
    ``on_progress(config_index, done, total)`` is called with ``done = 0`` as each
    configuration starts and ``done = total`` (the workload's requests) when it ends: the
    loop runs in the core and reports nothing between.
    """
    kind("workload", workload, (Workload,), "a Workload")
    cfg_list = _config_list(configs)
    if len(workload) == 0:
        raise ValueError("the workload holds no requests")
    check_engine(engine)
    spec = RunSpec.of(
        num_blocks,
        memory,
        gpu_memory_utilization,
        backend,
        stall_threshold_s,
        (slo_ttft_s, slo_tpot_s, slo_tbt_s),
        max_steps,
        (replicas, router),
        (warmup, drain),
    )
    check_callback("on_progress", on_progress)
    resolved = _checked_options(workload, cfg_list, engine, spec)
    results = []
    for index, (cfg, options) in enumerate(zip(cfg_list, resolved)):
        if on_progress is not None:
            on_progress(index, 0, len(workload))
        results.append(_run_one(workload, cfg, options, engine, spec))
        if on_progress is not None:
            on_progress(index, len(workload), len(workload))
    return results


def _config_list(configs: ServingSimConfig | Iterable[ServingSimConfig] | None) -> list[Any]:
    """``configs`` as a non-empty list (one configuration, or the default's when ``None``)."""
    if isinstance(configs, ServingSimConfig):
        cfg_list = [configs]
    elif configs is None:
        cfg_list = [ServingSimConfig()]
    else:
        cfg_list = items("configs", configs, "ServingSimConfig values", empty=True)
        for i, cfg in enumerate(cfg_list):
            kind(f"configs[{i}]", cfg, (ServingSimConfig,), "a ServingSimConfig")
    if not cfg_list:
        raise ValueError("no configuration to simulate")
    return cfg_list


@dataclass(frozen=True)
class RunSpec:
    """The options of :func:`simulate_serving` that every configuration's run shares,
    checked once."""

    num_blocks: int | None
    memory: KVMemory | None
    utilization: float
    backend: str
    stall_threshold_s: float
    slo: dict[str, float]
    max_steps: int
    replicas: int
    router: str
    cut: tuple[float, float]

    @classmethod
    def of(
        cls,
        num_blocks: object,
        memory: object,
        utilization: object,
        backend: object,
        stall_threshold_s: object,
        slos: tuple[object, object, object],
        max_steps: object,
        fleet: tuple[object, object],
        cut: tuple[object, object],
    ) -> RunSpec:
        """The options checked, in the order of :func:`simulate_serving`'s signature (the
        first bad one is the error)."""
        blocks = count("num_blocks", num_blocks, 1, U64_MAX, none=True)
        if memory is not None:
            kind("memory", memory, (KVMemory,), "None or a KVMemory")
        util = real("gpu_memory_utilization", utilization, 0.0, 1.0, low_open=True)
        if not isinstance(backend, str) or backend not in ("rust", "pure"):
            raise ValueError(f"backend must be 'rust' or 'pure', got {show(backend)}")
        threshold = real("stall_threshold_s", stall_threshold_s, 0.0)
        limits = [
            (name, real(f"slo_{name}", value, 0.0, low_open=True, none=True))
            for name, value in zip(("ttft_s", "tpot_s", "tbt_s"), slos)
        ]
        steps = count("max_steps", max_steps, 1, U64_MAX)
        replicas, router = check_fleet(*fleet)
        warmup = real("warmup", cut[0], 0.0, 0.5, high_open=True)
        drain = real("drain", cut[1], 0.0, 0.5, high_open=True)
        slo = {k: v for k, v in limits if v is not None}
        mem = memory if isinstance(memory, KVMemory) else None  # kind() refused the rest
        cut_at = (warmup, drain)
        return cls(blocks, mem, util, backend, threshold, slo, steps, replicas, router, cut_at)


def _checked_options(
    workload: Workload, cfg_list: list[Any], engine: StepTimeModel, spec: RunSpec
) -> list[dict[str, Any]]:
    """Each configuration's scheduler options, refused (by the scheduler that runs, a
    request the pool cannot hold, or the step limit) before anything runs."""
    # The package's ServingConfig checks the options: the Rust one when built, already
    # loaded, with the very errors of the pure twin (which stays unloaded unless it runs).
    from ... import ServingConfig

    resolved = resolve_configs(
        workload, cfg_list, engine, spec.num_blocks, spec.memory, spec.utilization
    )
    for cfg, options in zip(cfg_list, resolved):
        ServingConfig(**options)  # the scheduler's own checks, before anything runs
        check_fits(workload, options)
        steps, reason = min_serving_steps(workload, options)
        if steps > spec.max_steps:
            raise StepLimitError(cfg, steps, spec.max_steps, reason, estimated=True)
    return resolved


def _run_one(
    workload: Workload,
    cfg: ServingSimConfig,
    options: dict[str, Any],
    engine: StepTimeModel,
    spec: RunSpec,
) -> SimResult:
    """One configuration's run on the chosen loop, summarised."""
    fleet = (spec.replicas, spec.router)
    try:
        if spec.backend == "rust":
            raw = _run_rust(workload, options, engine, spec.max_steps, *fleet)
        else:
            raw = run_loop(workload, options, engine, spec.max_steps, *fleet)
    except ValueError as err:
        if str(err).startswith("reached the limit"):
            reason = str(err).split(" steps with ", 1)[-1]
            raise StepLimitError(
                cfg, spec.max_steps, spec.max_steps, reason, estimated=False
            ) from None
        raise
    import numpy as np

    arrays = {k: np.asarray(v) for k, v in raw.items() if isinstance(v, (list, np.ndarray))}
    # The core gives the workload's arrival and output columns back as arrays; the pure
    # loop's are made from the tuples.
    if "arrival_s" not in arrays:
        arrays["arrival_s"] = np.asarray(workload.arrival_s, dtype=np.float64)
        arrays["output_tokens"] = np.asarray(workload.output_tokens, dtype=np.uint64)
    # The summary's modules (the results' dataclasses, numpy's users) are needed only now:
    # a command line imports them while the loop runs.
    from .summary import summarise

    result = summarise(workload, cfg, options, engine, raw, arrays, spec)
    assert result.serving is not None
    replica = arrays["replica"].astype(np.uint64, copy=False)
    stats = replace(result.serving, replicas=spec.replicas, router=spec.router, replica=replica)
    return replace(result, serving=stats)
