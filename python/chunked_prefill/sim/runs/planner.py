"""The simulation loop: a workload through the real ``Scheduler`` against the engine model.

Model of one run (one :class:`SimConfig`):

* Time advances one engine step at a time. A request that has arrived waits for
  admission (first come, first served) while ``max_running`` requests are running, a
  request being *running* from admission until its last output token. Admission happens
  at step boundaries, and an admitted request is enqueued into the scheduler with its
  prompt length, cached tokens and priority.
* Each step the simulator calls ``next_step(active_decode_count)`` with the number of
  decoding requests, runs the planned chunks and ``decode_tokens`` decode tokens, and
  advances the clock by the engine model's step time. When ``decode_tokens`` is below the
  number of decoding requests, the ones served are chosen round-robin (those waiting
  longest for a token first).
* A request's first output token is emitted at the end of the step holding its last
  prefill chunk; then it decodes one token per step in which it is served, until it has
  ``output_tokens`` tokens.
* With nothing running, the clock jumps to the next arrival.

Metrics: TTFT = first token - arrival; TBT = the gaps between a request's successive
tokens (``output_tokens - 1`` gaps per request, every gap of every request counted once);
e2e = last token - arrival; throughput = output tokens / (last token - first arrival); a
stall is a TBT gap longer than the stall threshold. Percentiles are the inverted CDF:
``pXX`` is the smallest sample with at least XX % of the samples at or below it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from .._check import boolean, check_callback, check_engine, count, items, kind, real, show
from ..engines.linear import DEFAULT_ENGINE
from ..engines.roofline import StepTimeModel
from ..workload.types import Request, Workload
from . import planner_loop
from .backend import Backend, backend_name, resolve_backend
from .errors import ConfigError, StepLimitError
from .results import DEFAULT_STALL_THRESHOLD_S, SimResult

if TYPE_CHECKING:
    from ... import _core


U64_MAX = 2**64 - 1
"""The scheduler's counts (chunk size, token budget, caps) are unsigned 64-bit."""


DEFAULT_CHUNK_SIZES: tuple[int | None, ...] = (256, 512, 2048, None)
"""The chunk sizes compared when no configuration is given (``None``: whole prompts)."""


@dataclass(frozen=True)
class SimConfig:
    """One configuration to simulate: scheduler options plus the admission cap.

    ``chunk_size=None`` is the unchunked baseline: each prompt is prefilled whole in one
    step (the scheduler gets a chunk size equal to the longest prompt); it takes no
    ``token_budget``. ``max_running`` caps the requests running at once (vLLM's
    ``max_num_seqs``). The other fields are the scheduler's :class:`Config` fields.
    """

    chunk_size: int | None = 512
    token_budget: int | None = None
    max_prefills_per_step: int = 1
    max_decode_tokens: int = 128
    max_running: int = 256

    def __post_init__(self) -> None:
        def positive(name: str, value: object, *, optional: bool = False) -> None:
            if optional and value is None:
                return
            if type(value) is not int or not 1 <= value <= U64_MAX:
                raise ValueError(f"{name} must be an int in [1, {U64_MAX}], got {value!r}")

        positive("chunk_size", self.chunk_size, optional=True)
        positive("token_budget", self.token_budget, optional=True)
        positive("max_prefills_per_step", self.max_prefills_per_step)
        positive("max_decode_tokens", self.max_decode_tokens)
        positive("max_running", self.max_running)
        if self.chunk_size is None and self.token_budget is not None:
            raise ValueError(
                "chunk_size=None means whole prompts in one step; it takes no token_budget"
            )

    def label(self) -> str:
        """A short human-readable description."""
        parts = ["chunk=" + ("none" if self.chunk_size is None else str(self.chunk_size))]
        if self.token_budget is not None:
            parts.append(f"budget={self.token_budget}")
        if self.max_prefills_per_step != 1:
            parts.append(f"prefills={self.max_prefills_per_step}")
        parts.append(f"decode<={self.max_decode_tokens}")
        parts.append(f"running<={self.max_running}")
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """The options as plain data (``chunk_size`` is ``None`` for whole prompts)."""
        return {
            "chunk_size": self.chunk_size,
            "token_budget": self.token_budget,
            "max_prefills_per_step": self.max_prefills_per_step,
            "max_decode_tokens": self.max_decode_tokens,
            "max_running": self.max_running,
        }

    def scheduler_options(self, longest_prompt: int) -> dict[str, Any]:
        """Keyword arguments of the scheduler ``Config`` this configuration runs with."""
        return {
            "chunk_size": max(1, longest_prompt) if self.chunk_size is None else self.chunk_size,
            "max_decode_tokens": self.max_decode_tokens,
            "interleave_decode": True,
            "token_budget": self.token_budget,
            "max_prefills_per_step": self.max_prefills_per_step,
        }


def _normalise(cfg: SimConfig) -> SimConfig:
    if cfg.chunk_size is None:
        return SimConfig(None, None, 1, cfg.max_decode_tokens, cfg.max_running)
    if cfg.token_budget is None and cfg.max_prefills_per_step != 1:
        return SimConfig(cfg.chunk_size, None, 1, cfg.max_decode_tokens, cfg.max_running)
    return cfg


def expand_configs(
    chunk_sizes: Iterable[int | None] = DEFAULT_CHUNK_SIZES,
    token_budgets: Iterable[int | None] = (None,),
    max_prefills_per_step: Iterable[int] = (1,),
    max_decode_tokens: Iterable[int] = (128,),
    max_running: Iterable[int] = (256,),
) -> list[SimConfig]:
    """Every combination of the given options (their cross product), in order.

    The first option varies slowest. Options that do not apply are dropped before
    duplicates are removed: ``chunk_size=None`` (whole prompts) runs without a token
    budget and with one prefill per step, and a configuration without a token budget has
    one prefill per step (the scheduler's rule).
    """
    out: list[SimConfig] = []
    seen: set[SimConfig] = set()
    axes = [
        items(name, value, what)
        for name, value, what in (
            ("chunk_sizes", chunk_sizes, "ints or None"),
            ("token_budgets", token_budgets, "ints or None"),
            ("max_prefills_per_step", max_prefills_per_step, "ints"),
            ("max_decode_tokens", max_decode_tokens, "ints"),
            ("max_running", max_running, "ints"),
        )
    ]
    for combo in itertools.product(*axes):
        chunk, budget, prefills, decode, running = combo
        if chunk is None:
            budget = None
        cfg = _normalise(SimConfig(chunk, budget, prefills, decode, running))
        if cfg not in seen:
            seen.add(cfg)
            out.append(cfg)
    return out


ProgressCallback = Callable[[int, int, int], None]
"""``(config_index, requests_done, requests_total)``, called now and then during a run."""


def simulate(
    workload: Workload | Sequence[Request],
    configs: SimConfig | Iterable[SimConfig] | None = None,
    *,
    engine: StepTimeModel = DEFAULT_ENGINE,
    backend: Backend = "auto",
    stall_threshold_s: float = DEFAULT_STALL_THRESHOLD_S,
    record_steps: bool = False,
    on_progress: ProgressCallback | None = None,
    max_steps: int | None = None,
    scheduler: str | None = None,
) -> list[SimResult]:
    """Replay ``workload`` through a scheduler once per configuration.

    ``scheduler`` is ``"serving"`` (the serving scheduler, as the command line's default,
    through :func:`~chunked_prefill.sim.simulate_serving` with its defaults) or
    ``"planner"`` (the original planner); ``None`` (the default) takes it from the
    configurations: :class:`SimConfig` values run the planner,
    :class:`~chunked_prefill.sim.serving.ServingSimConfig` values the serving scheduler,
    and no configurations the serving scheduler. ``configs`` defaults to the default chunk
    sizes (256, 512, 2048 and whole prompts) of :func:`expand_configs` (planner) or
    :func:`~chunked_prefill.sim.expand_serving_configs` (serving). ``backend`` picks the
    implementation (see :func:`resolve_backend`); both give identical results.
    ``record_steps`` (planner only) keeps a :class:`StepRecord` per step in
    ``SimResult.step_log`` (slow, for checks). Returns one :class:`SimResult` per
    configuration, in order.

    Every configuration is checked before any runs (a bad one raises ``ValueError``
    naming it). ``max_steps`` bounds the engine steps of each configuration: one whose
    :func:`min_steps` exceeds it raises :class:`StepLimitError` before anything runs, and
    a run that reaches it anyway stops with the same error, so a huge workload cannot
    hang the caller. ``None`` (the default) sets no bound.
    """
    workload = _as_workload(workload)
    if len(workload) == 0:
        raise ValueError("the workload holds no requests")
    if isinstance(configs, Iterable) and not isinstance(configs, (str, bytes, Mapping)):
        configs = list(configs)  # a generator is read once, to see what it holds
    scheduler = _scheduler_of(configs, scheduler)
    if scheduler == "serving":
        return _simulate_serving(
            workload,
            configs,
            engine,
            backend,
            stall_threshold_s,
            record_steps,
            on_progress,
            max_steps,
        )
    cfg_list = _config_list(configs)
    check_engine(engine)
    stall_threshold_s = real("stall_threshold_s", stall_threshold_s, 0.0)
    record_steps = boolean("record_steps", record_steps)
    check_callback("on_progress", on_progress)
    module = resolve_backend(backend)
    check_configs(workload, cfg_list, backend=module, max_steps=max_steps)
    limit = _NO_LIMIT if max_steps is None else max_steps
    results = []
    for index, cfg in enumerate(cfg_list):
        callback = (
            None if on_progress is None else _ProgressAdapter(on_progress, index, len(workload))
        )
        results.append(
            planner_loop.run(
                workload,
                cfg,
                engine,
                _make_scheduler(module, cfg, max(workload.prompt_tokens)),
                stall_threshold_s,
                record_steps,
                callback,
                limit,
            )
        )
    return results


_NO_LIMIT = 2**128


def _as_workload(workload: object) -> Workload:
    """``workload`` as a :class:`Workload`: itself, or the one a sequence of requests makes."""
    if isinstance(workload, Workload):
        return workload
    if isinstance(workload, (str, bytes, Mapping)) or not isinstance(workload, Iterable):
        raise TypeError(
            f"workload must be a Workload or a sequence of Request, got {show(workload)}"
        )
    return Workload.from_requests(workload)


def _config_list(configs: object) -> list[Any]:
    """The planner's configurations: one, the default chunk sizes' (``None``), or a list."""
    if isinstance(configs, SimConfig):
        cfg_list = [configs]
    elif configs is None:
        cfg_list = expand_configs()
    else:
        cfg_list = items("configs", configs, "SimConfig values", empty=True)
        for i, cfg in enumerate(cfg_list):
            kind(f"configs[{i}]", cfg, (SimConfig,), "a SimConfig")
    if not cfg_list:
        raise ValueError("no configuration to simulate")
    return cfg_list


def _scheduler_of(configs: object, scheduler: object) -> str:
    """``"planner"`` or ``"serving"``: ``scheduler`` when given, else the kind of
    ``configs`` (serving when there are none)."""
    from .serving import ServingSimConfig

    if scheduler is not None:
        if not isinstance(scheduler, str) or scheduler not in ("planner", "serving"):
            raise ValueError(
                f"scheduler must be 'serving', 'planner' or None, got {show(scheduler)}"
            )
        return scheduler
    if configs is None or isinstance(configs, ServingSimConfig):
        return "serving"
    if isinstance(configs, SimConfig):
        return "planner"
    if (
        isinstance(configs, list)
        and configs
        and all(isinstance(c, ServingSimConfig) for c in configs)
    ):
        return "serving"
    return "planner"  # any other iterable: the planner's checks name what is wrong


def _simulate_serving(
    workload: Workload,
    configs: object,
    engine: StepTimeModel,
    backend: Backend,
    stall_threshold_s: float,
    record_steps: object,
    on_progress: ProgressCallback | None,
    max_steps: int | None,
) -> list[SimResult]:
    """:func:`simulate` with ``scheduler="serving"``."""
    from .serving import ServingSimConfig, expand_serving_configs, simulate_serving

    check_engine(engine)
    real("stall_threshold_s", stall_threshold_s, 0.0)
    if boolean("record_steps", record_steps):
        raise ValueError(
            "record_steps needs scheduler='planner' (the serving loop records no steps)"
        )
    if configs is None:
        configs = expand_serving_configs()
    elif not isinstance(configs, ServingSimConfig):
        configs = items("configs", configs, "ServingSimConfig values", empty=True)
        for i, cfg in enumerate(configs):
            kind(f"configs[{i}]", cfg, (ServingSimConfig,), "a ServingSimConfig")
    check_callback("on_progress", on_progress)
    return simulate_serving(
        workload,
        configs,
        engine=engine,
        backend=backend_name(resolve_backend(backend)),
        stall_threshold_s=stall_threshold_s,
        max_steps=U64_MAX if max_steps is None else max_steps,
        on_progress=on_progress,
    )


def check_configs(
    workload: Workload,
    configs: Iterable[SimConfig],
    *,
    backend: Backend = "auto",
    max_steps: int | None = None,
) -> None:
    """Raise what :func:`simulate` would raise for ``configs`` before running any of them.

    Each configuration must be one the scheduler accepts (:class:`ConfigError`) and,
    with ``max_steps``, need at most that many steps by :func:`min_steps`
    (:class:`StepLimitError`). Cheap: one pass over the workload per configuration.
    """
    max_steps = count("max_steps", max_steps, 1, _NO_LIMIT, none=True)
    module = resolve_backend(backend)
    cfg_list = list(configs)
    longest = max(workload.prompt_tokens)
    for cfg in cfg_list:
        _make_config(module, cfg, longest)
    if max_steps is not None:
        for cfg in cfg_list:
            steps, reason = min_steps(workload, cfg)
            if steps > max_steps:
                raise StepLimitError(cfg, steps, max_steps, reason, estimated=True)


class _ProgressAdapter:
    """Turns ``on_progress(config_index, done, total)`` into a one-argument callback."""

    def __init__(self, fn: ProgressCallback, index: int, total: int) -> None:
        self.fn = fn
        self.index = index
        self.total = total

    def __call__(self, done: int) -> None:
        self.fn(self.index, done, self.total)


def _make_config(module: ModuleType, cfg: SimConfig, longest_prompt: int) -> _core.Config:
    try:
        config: _core.Config = module.Config(**cfg.scheduler_options(longest_prompt))
    except ValueError as err:
        raise ConfigError(cfg, str(err)) from None
    return config


def _make_scheduler(module: ModuleType, cfg: SimConfig, longest_prompt: int) -> _core.Scheduler:
    scheduler: _core.Scheduler = module.Scheduler(_make_config(module, cfg, longest_prompt))
    return scheduler


def min_steps(workload: Workload, cfg: SimConfig) -> tuple[int, str]:
    """A lower bound of the engine steps ``cfg`` takes to run ``workload``, and why.

    The bound is the largest of: one request's own chain (its prefill chunks, then one
    step per further output token), all prefill chunks at ``max_prefills_per_step`` per
    step, all prefill tokens at ``token_budget`` per step, and all decode tokens at
    ``min(max_decode_tokens, max_running)`` per step. It takes one pass over the workload
    and is found before anything runs.
    """
    prompts = workload.prompt_tokens
    if not prompts:
        return 0, "no requests"
    chunk = max(prompts) if cfg.chunk_size is None else cfg.chunk_size
    if cfg.token_budget is not None:
        chunk = min(chunk, cfg.token_budget)
    chain, chain_of, chain_chunks = 0, 0, 0
    total_chunks = total_prefill = total_decode = 0
    for i, (p, o, c) in enumerate(zip(prompts, workload.output_tokens, workload.cached_tokens)):
        todo = p - c if c < p else 1
        k = -(-todo // chunk)
        total_chunks += k
        total_prefill += todo
        total_decode += o - 1
        if k + o - 1 > chain:
            chain, chain_of, chain_chunks = k + o - 1, i, k
    per_step = cfg.max_prefills_per_step if cfg.token_budget is not None else 1
    decode_width = min(cfg.max_decode_tokens, cfg.max_running)
    o_chain = workload.output_tokens[chain_of]
    bounds = [
        (
            chain,
            f"request {chain_of} alone takes {chain_chunks} prefill chunk(s) of at most"
            f" {chunk} tokens, then {o_chain - 1} decode steps",
        ),
        (
            -(-total_chunks // per_step),
            f"{total_chunks} prefill chunks, at most {per_step} per step",
        ),
        (
            -(-total_decode // decode_width),
            f"{total_decode} decode tokens, at most {decode_width} per step",
        ),
    ]
    if cfg.token_budget is not None:
        bounds.append(
            (
                -(-total_prefill // cfg.token_budget),
                f"{total_prefill} prefill tokens, at most {cfg.token_budget} per step",
            )
        )
    return max(bounds, key=lambda b: b[0])
