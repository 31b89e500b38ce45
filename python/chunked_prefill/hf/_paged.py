"""PagedEngine: a transformers causal LM whose KV cache lives in the blocks a
:class:`~chunked_prefill.ServingScheduler` hands out.

Every step asks the scheduler for a :class:`~chunked_prefill.Batch`, computes all its items
in one forward pass (:mod:`._paged_forward`) reading and writing the pool only through the
requests' block tables, samples greedily for the items that sample, and reports back with
``update()``. Preemption and prefix caching need nothing of the engine: a preempted request
is recomputed from position 0 into new blocks, and a cache hit starts after blocks another
request already wrote.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from time import perf_counter, sleep, thread_time
from typing import Any

import torch

from .._steps import OutputFile, StepRecord, write_rows
from .._validate import _index, as_bool, as_u64
from ._args import (
    as_arrival,
    as_count,
    check_model,
    check_prompts,
    eos_ids,
    per_prompt,
    text_config,
    vocab_size,
)
from ._backend import convert_serving_config, resolve_serving_backend
from ._kv_pool import KVPool
from ._paged_forward import ModelCall, Work, run_step


@dataclass
class RequestTiming:
    """One prompt of the last :meth:`PagedEngine.generate` run; times in seconds after the
    run started.

    ``arrival_s``: when it arrived (its ``arrival_s`` entry, else 0). ``token_s``: when each
    generated token was known (the end of the step that sampled it); ``first_token_s`` and
    ``finish_s`` (the end of its last step, or when it was aborted) are ``None`` until then.
    ``aborted``: it was cancelled with :meth:`PagedEngine.abort`. ``num_preemptions``: how
    often it lost its blocks and was recomputed. ``cached_tokens``: prompt tokens its
    admissions found in the prefix cache, summed.
    """

    arrival_s: float
    first_token_s: float | None = None
    finish_s: float | None = None
    token_s: list[float] = field(default_factory=list)
    aborted: bool = False
    num_preemptions: int = 0
    cached_tokens: int = 0


class _Run:
    """The state of one ``generate()`` call; request ids are prompt indices."""

    def __init__(self, prompts: list[list[int]], arrivals: list[float], eos: frozenset[int]):
        self.seqs = [list(p) for p in prompts]  # prompt + generated: what the items compute
        self.prompt_lens = [len(p) for p in prompts]
        self.timings = [RequestTiming(arrival_s=a) for a in arrivals]
        self.order = sorted(range(len(prompts)), key=arrivals.__getitem__)
        self.added = 0  # prompts of ``order`` handed to the scheduler
        self.closed = [False] * len(prompts)  # finished or aborted
        self.open = len(prompts)
        self.eos = eos
        self.t0 = perf_counter()

    def now(self) -> float:
        return perf_counter() - self.t0

    def close(self, rid: int, now: float, *, aborted: bool = False) -> None:
        timing = self.timings[rid]
        timing.finish_s = now
        timing.aborted = aborted
        self.closed[rid] = True
        self.open -= 1

    def outputs(self) -> list[list[int]]:
        return [seq[n:] for seq, n in zip(self.seqs, self.prompt_lens)]


class PagedEngine:
    """Greedy generation with a paged KV cache scheduled by a ``ServingScheduler``.

    ``model`` is a transformers causal LM with full attention on every layer (Llama, Mistral
    without a sliding window, Qwen2, ...) on any device; ``config`` a
    :class:`~chunked_prefill.ServingConfig` (of either backend): its ``num_blocks`` and
    ``block_size`` size :attr:`pool`, its other fields the scheduling. ``backend``:
    ``"rust"``, ``"pure"``, a module, or ``None`` for the package default.
    ``separate_decodes=True`` runs a step that mixes decodes with prompt chunks as two
    forward passes (single-token rows, then the others) instead of one padded pass.

    The engine owns :attr:`pool`, one tensor of ``num_blocks`` blocks per layer for keys and
    values (:class:`~chunked_prefill.hf.KVPool`), and reads and writes it only at the slots
    named by the block tables of :attr:`scheduler`. Greedy outputs are those of
    ``model.generate(ids, do_sample=False, ...)`` for each prompt alone, whatever the
    chunking, sharing and preemption.
    """

    def __init__(
        self, model: Any, config: Any, *, backend: Any = None, separate_decodes: bool = False
    ) -> None:
        check_model(model)
        module = resolve_serving_backend(backend)
        config = convert_serving_config(config, module)
        separate_decodes = as_bool("separate_decodes", separate_decodes)
        _check_full_attention(model)
        self.separate_decodes = separate_decodes
        """Run a step's decodes and its prefill chunks as two forward passes, so that decode
        rows are not padded to the longest chunk (one pass per step by default)."""
        self.config = config
        self.model = model
        self.pool = KVPool.for_model(model, self.config.num_blocks, self.config.block_size)
        self._module = module
        self._call = ModelCall(model)
        self.scheduler: Any = module.ServingScheduler(self.config)
        """The scheduler of the last (or current) run; its counters survive the run."""
        self.last_run: list[RequestTiming] = []
        """Per prompt of the last run, in prompt order: arrival, token and finish times."""
        self.last_steps: list[StepRecord] = []
        """Every step of the last run, as written by ``steps_csv``."""
        self._lock = threading.Lock()
        self._run: _Run | None = None
        self._aborts: list[int] = []

    def abort(self, index: int) -> None:
        """Cancel prompt ``index`` of the running :meth:`generate` (from any thread).

        It takes effect at the next step boundary: the request's blocks are freed, a token
        sampled for it in the step under way is dropped, and its output is what it had
        generated before. A prompt that has not arrived yet never runs; one already finished
        is left alone.
        """
        i = _index("index", index)
        with self._lock:
            run = self._run
            if run is None:
                raise RuntimeError("abort() needs a generate() in progress")
            n = len(run.seqs)
            if not 0 <= i < n:
                raise IndexError(f"index must be a prompt index between 0 and {n - 1}, got {i}")
            self._aborts.append(i)

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        max_new_tokens: int | Sequence[int],
        eos_token_id: int | Iterable[int] | None = None,
        cache_salts: Sequence[int] | None = None,
        arrival_s: Sequence[float] | None = None,
        steps_csv: str | os.PathLike[str] | None = None,
    ) -> list[list[int]]:
        """Generate up to ``max_new_tokens`` greedy tokens for each prompt (token-id lists).

        A request stops at ``max_new_tokens`` tokens (one number for every prompt, or one per
        prompt) or after sampling ``eos_token_id`` (an id or several; the id is part of its
        output, as in ``model.generate``).
        ``cache_salts`` gives each prompt its prefix-cache namespace (default 0: prompts
        share prefixes). ``arrival_s`` runs on the wall clock: prompt ``i`` reaches the
        scheduler ``arrival_s[i]`` seconds after the start (default: all at once).
        ``steps_csv`` writes one row per step (:data:`~chunked_prefill.hf.STEP_COLUMNS`)
        when the run ends, through a temporary file beside it that is created before the run
        (an unwritable path raises the ``OSError`` of ``open()``, naming ``steps_csv``, before
        any step) and renamed into place, so a failed run leaves an existing file whole.

        Returns the generated tokens of each prompt, in prompt order. Afterwards
        :attr:`scheduler` holds the run's counters (``num_preemptions``,
        ``num_cached_tokens``), :attr:`last_run` the per-request times and
        :attr:`last_steps` the steps.
        """
        ids, max_new, arrivals, salts, eos = self._check(
            prompts, max_new_tokens, eos_token_id, cache_salts, arrival_s
        )
        with self._lock:
            if self._run is not None:
                raise RuntimeError("this PagedEngine is already running a generate()")
            # Last of the checks: it creates the temporary file, which the run must remove.
            output = None if steps_csv is None else OutputFile("steps_csv", steps_csv)
            run = _Run(ids, arrivals, eos)
            self._run, self._aborts = run, []
        try:
            self.scheduler = self._module.ServingScheduler(self.config)
            self.last_run = run.timings
            self.last_steps = []
            with torch.inference_mode():
                while run.open:
                    self._arrive(run, max_new, salts)
                    self._apply_aborts(run)
                    if len(self.scheduler):
                        self._step(run)
                    elif run.added < len(run.order):
                        sleep(max(0.0, arrivals[run.order[run.added]] - run.now()))
            if output is not None:
                output.commit(lambda f: write_rows(f, self.last_steps))
        finally:
            with self._lock:
                self._run = None
            if output is not None:
                output.discard()
        return run.outputs()

    # -- one run ---------------------------------------------------------------------------

    def _check(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int | Sequence[int],
        eos_token_id: int | Iterable[int] | None,
        cache_salts: Sequence[int] | None,
        arrival_s: Sequence[float] | None,
    ) -> tuple[list[list[int]], list[int], list[float], list[int], frozenset[int]]:
        """Convert the arguments, raising before anything runs; a throwaway scheduler takes
        every request so that its own checks (``request_never_fits``, ...) apply up front."""
        vocab = vocab_size(self.model)
        ids = check_prompts(prompts, vocab)
        n = len(ids)
        max_new = per_prompt("max_new_tokens", max_new_tokens, n, as_count)
        salts = [0] * n
        if cache_salts is not None:
            salts = per_prompt("cache_salts", cache_salts, n, as_u64)
        arrivals = [0.0] * n
        if arrival_s is not None:
            arrivals = per_prompt("arrival_s", arrival_s, n, as_arrival)
        eos = eos_ids(eos_token_id)
        probe = self._module.ServingScheduler(self.config)
        for i, p in enumerate(ids):
            probe.add_request(i, p, max_new[i], cache_salt=salts[i])
        return ids, max_new, arrivals, salts, eos

    def _arrive(self, run: _Run, max_new: list[int], salts: list[int]) -> None:
        """Hand the scheduler every prompt whose arrival time has come."""
        now = run.now()
        while run.added < len(run.order):
            rid = run.order[run.added]
            if run.timings[rid].arrival_s > now:
                return
            run.added += 1
            if not run.closed[rid]:
                seq = run.seqs[rid]
                self.scheduler.add_request(rid, seq, max_new[rid], cache_salt=salts[rid])

    def _apply_aborts(self, run: _Run) -> None:
        with self._lock:
            aborts, self._aborts = self._aborts, []
        for rid in aborts:
            if run.closed[rid]:
                continue
            if rid in self.scheduler:
                self.scheduler.abort(rid)
            run.close(rid, run.now(), aborted=True)

    def _step(self, run: _Run) -> None:
        t_start, cpu_start = perf_counter(), thread_time()
        batch = self.scheduler.schedule()
        scheduler_s = perf_counter() - t_start
        self._scheduled(batch)
        self._apply_aborts(run)
        for rid in batch.preempted:
            run.timings[rid].num_preemptions += 1
        items = [it for it in batch.items if not run.closed[it.request_id]]
        if not batch.items and not batch.preempted:
            raise RuntimeError(f"the scheduler planned an empty step {batch.step_index}")
        work = [self._work(run, it) for it in items]
        tokens = self._forward(work)
        self._apply_aborts(run)
        sampled: dict[int, int] = {}
        for it, token in zip([it for it in items if it.samples], tokens):
            if not run.closed[it.request_id]:
                sampled[it.request_id] = token
        stopped = [rid for rid, token in sampled.items() if token in run.eos]
        t_update = perf_counter()
        finished = self.scheduler.update(batch, token_ids=sampled, finished=stopped)
        scheduler_s += perf_counter() - t_update
        now = run.now()
        for rid, token in sampled.items():
            run.seqs[rid].append(token)
            timing = run.timings[rid]
            timing.token_s.append(now)
            if timing.first_token_s is None:
                timing.first_token_s = now
        for it in items:
            run.timings[it.request_id].cached_tokens += it.cached_tokens
        for rid in finished:
            run.close(rid, now)
        duration_s, cpu_s = perf_counter() - t_start, thread_time() - cpu_start
        record = StepRecord.of_batch(batch, items, duration_s, scheduler_s, cpu_s)
        self.last_steps.append(record)

    def _forward(self, work: list[Work]) -> list[int]:
        """The sampled tokens of ``work``, in order, from one forward pass (or two)."""
        if not work:
            return []
        wide = [len(w.tokens) > 1 for w in work]
        if not self.separate_decodes or all(wide) or not any(wide):
            return run_step(self._call, self.pool, work)
        groups = ([w for w, x in zip(work, wide) if not x], [w for w, x in zip(work, wide) if x])
        sampled = {
            False: iter(run_step(self._call, self.pool, groups[0])),
            True: iter(run_step(self._call, self.pool, groups[1])),
        }
        return [next(sampled[x]) for w, x in zip(work, wide) if w.samples]

    def _work(self, run: _Run, item: Any) -> Work:
        rid, start, n = item.request_id, item.start, item.tokens
        seq = run.seqs[rid]
        if start + n > len(seq) or (item.samples and start + n != len(seq)):
            raise RuntimeError(
                f"step item {item!r} does not fit request {rid}'s {len(seq)} known tokens"
            )
        return Work(start, seq[start : start + n], self._block_table(rid), item.samples)

    # -- hooks for tests -------------------------------------------------------------------

    def _block_table(self, request_id: int) -> list[int]:
        """The blocks the engine reads and writes for ``request_id`` (a test may corrupt it)."""
        table: list[int] = self.scheduler.block_table(request_id)
        return table

    def _scheduled(self, batch: Any) -> None:
        """Called with every batch right after ``schedule()`` (a test may abort here)."""


def _check_full_attention(model: Any) -> None:
    """The pool keeps every position of every layer: refuse sliding-window layers."""
    config = text_config(model)
    kinds = getattr(config, "layer_types", None)
    if kinds is not None:
        other = sorted({k for k in kinds if k != "full_attention"})
        if other:
            raise ValueError(f"PagedEngine needs full attention on every layer, got {other}")
    elif getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        raise ValueError("PagedEngine needs full attention on every layer, not a sliding window")
