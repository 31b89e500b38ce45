"""The planner's simulation loop (``--scheduler planner``): a workload through the original
``Scheduler``, with the decode bookkeeping the planner leaves to its caller.

The planner plans prefill chunks and a count of decode tokens; this loop keeps the decoding
requests (:class:`_DecodePool`), times each step with the engine model, and records TTFT,
the TBT gaps (:class:`_Gaps`) and finish times. :func:`run` is one configuration's run.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..engines.roofline import RooflineModel, StepTimeModel
from ..workload.types import Workload

if TYPE_CHECKING:
    from .planner import SimConfig
    from .results import SimResult, StepRecord


class _Gaps:
    """The TBT gaps as (value, count) pairs, and the stalls among them."""

    __slots__ = ("stalls", "threshold", "values", "weights")

    def __init__(self, threshold: float) -> None:
        self.values: list[float] = []
        self.weights: list[int] = []
        self.stalls = 0
        self.threshold = threshold

    def add(self, gap: float, count: int) -> None:
        self.values.append(gap)
        self.weights.append(count)
        if gap > self.threshold:
            self.stalls += count


class _DecodePool:
    """The decoding requests, updated per step rather than per token.

    ``full`` counts the steps that served every decoding request; request ``r`` has
    ``fin[r] - full`` tokens left to decode, so a full step decrements all of them at once
    (``full += 1``) and a round-robin step that serves only some decrements theirs
    (``fin[r] -= 1``). ``fin[r]`` is -1 while ``r`` is not decoding. ``buckets`` maps a value
    of ``full`` to the requests due then; an entry goes stale when ``fin[r]`` moves (checked
    on pop), and the moved ones are filed again at the next full step. A full step right
    after another adds one gap pair for all its requests.
    """

    def __init__(self, n: int, prompt: list[int], output: list[int]) -> None:
        self.prompt = prompt
        self.output = output
        self.fin = [-1] * n
        # Last token time; stale if a full step came later (last_full_end).
        self.last_t = [0.0] * n
        self.buckets: dict[int, list[int]] = {}
        # Round-robin order of decoding requests (plus dead entries).
        self.rr: deque[int] = deque()
        self.dead = 0
        self.size = 0
        self.ctx = 0  # sum of the decoding requests' context lengths
        self.full = 0
        self.latest_due = 0  # no decoding request is due after this value of `full`
        self.last_full_end = -math.inf  # end of the last step that served every request
        # Every decoding request's last token came at the current step start.
        self.uniform = True

    def _file(self, r: int, f: int) -> None:
        bucket = self.buckets.get(f)
        if bucket is None:
            self.buckets[f] = [r]
        else:
            bucket.append(r)

    def add(self, r: int, now: float) -> None:
        """Request ``r`` emitted its first token at ``now`` and decodes from here."""
        f = self.full + self.output[r] - 1
        self.fin[r] = f
        if f > self.latest_due:
            self.latest_due = f
        self._file(r, f)
        self.rr.append(r)
        self.last_t[r] = now
        self.size += 1
        self.ctx += self.prompt[r] + 1

    def pick(self, d: int) -> tuple[list[int] | None, int]:
        """The requests that ``d`` decode tokens serve (``None``: all of them) and their
        total context length."""
        if d == self.size:
            return None, self.ctx
        served: list[int] = []
        kv = 0
        fin, rr, prompt, output, full = self.fin, self.rr, self.prompt, self.output, self.full
        while d:
            r = rr.popleft()
            f = fin[r]
            if f >= 0:
                served.append(r)
                kv += prompt[r] + output[r] - f + full
                d -= 1
            else:
                self.dead -= 1
        return served, kv

    def _retire(self, r: int) -> None:
        self.fin[r] = -1
        self.size -= 1
        self.ctx -= self.prompt[r] + self.output[r]

    def full_step(self, now: float, dur: float, d: int, gaps: _Gaps) -> list[int]:
        """A step that served every decoding request; returns those that finished."""
        if self.uniform:
            gaps.add(dur, d)
        else:
            self._settle(now, gaps)
        self.last_full_end = now
        self.full += 1
        if self.full > self.latest_due:
            raise RuntimeError("decode bookkeeping lost a request (a simulator bug)")
        finished: list[int] = []
        for r in self.buckets.pop(self.full, ()):
            if self.fin[r] == self.full:
                self._retire(r)
                self.dead += 1
                finished.append(r)
        return finished

    def _settle(self, now: float, gaps: _Gaps) -> None:
        """The first full step after round-robin ones: gaps differ by request, and the
        requests served since the last full step get their bucket."""
        fin, last_t, lfe = self.fin, self.last_t, self.last_full_end
        prev = -1.0
        run = 0
        for r in self.rr:
            f = fin[r]
            if f < 0:
                continue
            lt = last_t[r]
            if lt > lfe:
                self._file(r, f)
            else:
                lt = lfe
            if lt != prev:
                if run:
                    gaps.add(now - prev, run)
                prev = lt
                run = 1
            else:
                run += 1
        if run:
            gaps.add(now - prev, run)
        self.uniform = True

    def partial_step(self, served: list[int], now: float, gaps: _Gaps) -> list[int]:
        """A round-robin step that served only ``served``; returns those that finished.

        Requests served together last time are adjacent and share a gap: one sample with a
        weight per run of equal gaps. Buckets are brought up to date at the next full step.
        """
        fin, last_t, lfe, full = self.fin, self.last_t, self.last_full_end, self.full
        finished: list[int] = []
        prev = -1.0
        run = 0
        for r in served:
            lt = last_t[r]
            if lt < lfe:
                lt = lfe
            if lt != prev:
                if run:
                    gaps.add(now - prev, run)
                prev = lt
                run = 1
            else:
                run += 1
            last_t[r] = now
            f = fin[r] - 1
            if f == full:  # that was its last token
                self._retire(r)
                finished.append(r)
            else:
                fin[r] = f
                self.rr.append(r)
        gaps.add(now - prev, run)
        self.uniform = False
        return finished

    def decoding(self) -> tuple[int, ...]:
        """The decoding requests, in round-robin order (for the step log)."""
        return tuple(r for r in self.rr if self.fin[r] >= 0)

    def compact(self) -> None:
        """Drop the dead entries of the round-robin queue once they outnumber the live."""
        if self.dead > 64 and self.dead > self.size:
            self.rr = deque(r for r in self.rr if self.fin[r] >= 0)
            self.dead = 0


def _sum_chunks(chunks: Any, prefilled: list[int]) -> tuple[int, int, int, list[int]]:
    """One step's prefill tokens, attention pairs, squared chunk lengths summed, and the
    requests whose prompt completes; counts each chunk into ``prefilled``."""
    tokens = 0
    attn = 0
    squares = 0
    lasts: list[int] = []
    for c in chunks:
        t = c.tokens
        tokens += t
        attn += t * c.start + (t * (t + 1) >> 1)
        squares += t * t
        prefilled[c.request_id] += t
        if c.is_last:
            lasts.append(c.request_id)
    return tokens, attn, squares, lasts


class _Run:
    """One configuration's run: the clock, the scheduler, and what each request did."""

    def __init__(self, wl: Workload, cfg: SimConfig, engine: StepTimeModel, sched: Any) -> None:
        self.wl = wl
        self.cfg = cfg
        self.engine = engine
        self.sched = sched
        self.prompt = list(wl.prompt_tokens)
        self.output = list(wl.output_tokens)
        n = len(self.prompt)
        self.n = n
        arrival = wl.arrival_s
        self.order = sorted(range(n), key=lambda i: (arrival[i], i))
        self.keywords = any(wl.cached_tokens) or any(wl.priority)
        nan = math.nan
        self.admitted = [nan] * n
        self.first = [nan] * n
        self.finish = [nan] * n
        self.prefilled = [0] * n
        self.pool = _DecodePool(n, self.prompt, self.output)
        self.now = 0.0
        self.nxt = 0
        self.running = 0
        self.done = 0
        self.steps = 0
        self.decode_total = 0
        self.prefill_total = 0
        self.decode_limit = sum(self.output) - n

    def admit(self) -> None:
        """Enqueue the arrived requests, first come first served, up to ``max_running``."""
        wl, order, n = self.wl, self.order, self.n
        while self.nxt < n and self.running < self.cfg.max_running:
            r = order[self.nxt]
            if wl.arrival_s[r] > self.now:
                break
            if self.keywords:
                self.sched.enqueue(
                    r, self.prompt[r], cached_tokens=wl.cached_tokens[r], priority=wl.priority[r]
                )
            else:
                self.sched.enqueue(r, self.prompt[r])
            self.admitted[r] = self.now
            self.running += 1
            self.nxt += 1

    def _finished(self, requests: list[int]) -> None:
        for r in requests:
            self.finish[r] = self.now
        self.running -= len(requests)
        self.done += len(requests)

    def step(self, gaps: _Gaps, log: list[StepRecord] | None) -> None:
        """Plan, time and account one engine step."""
        pool = self.pool
        step = self.sched.next_step(pool.size)
        d = step.decode_tokens
        ptok, attn, squares, lasts = _sum_chunks(step.chunks, self.prefilled)
        if d > pool.size or (d == 0 and ptok == 0):
            raise RuntimeError(
                f"step {step.step_index}: the scheduler planned {d} decode tokens and"
                f" {ptok} prefill tokens with {pool.size} decoding requests"
            )
        served, kv = pool.pick(d)
        start_t = self.now
        if isinstance(self.engine, RooflineModel):
            dur = self.engine.step_time(ptok, d, attn, kv, squares, len(step.chunks))
        else:
            dur = self.engine.step_time(ptok, d, attn, kv, squares)
        self.now = start_t + dur
        self.steps += 1
        self.prefill_total += ptok
        decoded = self._decode(d, served, dur, gaps, log is not None) if d else ()
        if lasts:
            self._start_decoding(lasts)
        if pool.dead > 64:
            pool.compact()
        if log is not None:
            log.append(self._record(step, start_t, d, decoded, (attn, kv, squares)))

    def _decode(
        self, d: int, served: list[int] | None, dur: float, gaps: _Gaps, logged: bool
    ) -> tuple[int, ...]:
        """Account ``d > 0`` decode tokens; returns the requests served, for the step log."""
        pool = self.pool
        self.decode_total += d
        if self.decode_total > self.decode_limit:
            raise RuntimeError("more decode tokens ran than the workload asks for")
        pool.ctx += d  # every served request's context grows by its new token
        if served is None:
            decoded = pool.decoding() if logged else ()
            finished = pool.full_step(self.now, dur, d, gaps)
        else:
            finished = pool.partial_step(served, self.now, gaps)
            decoded = tuple(served) if logged else ()
        if finished:
            self._finished(finished)
        return decoded

    def _start_decoding(self, lasts: list[int]) -> None:
        """The requests whose prompt completed this step emit their first token."""
        for r in lasts:
            self.first[r] = self.now
            if self.output[r] == 1:
                self._finished([r])
            else:
                self.pool.add(r, self.now)
        self.sched.drain_completed()

    def _record(
        self,
        step: Any,
        start_t: float,
        d: int,
        decoded: tuple[int, ...],
        sums: tuple[int, int, int],
    ) -> StepRecord:
        """The step log's entry; ``sums`` is (attention pairs, decode context, squares)."""
        from .results import StepRecord

        attn, kv, squares = sums
        return StepRecord(
            index=step.step_index,
            start_s=start_t,
            end_s=self.now,
            decode_tokens=d,
            chunks=tuple((c.request_id, c.start, c.tokens, c.is_last) for c in step.chunks),
            decoded=decoded,
            attention_pairs=attn,
            decode_context_tokens=kv,
            prefill_chunk_sq=squares,
        )

    def check(self) -> None:
        """The scheduler's contract, checked on every run."""
        cached = self.wl.cached_tokens
        for r in range(self.n):
            want = self.prompt[r] - cached[r] if cached[r] < self.prompt[r] else 1
            if self.prefilled[r] != want:
                raise RuntimeError(
                    f"request {r} was prefilled {self.prefilled[r]} tokens, expected {want}"
                )
        if self.decode_total != self.decode_limit:
            raise RuntimeError(
                f"{self.decode_total} decode tokens ran, expected {self.decode_limit}"
            )


def run(
    wl: Workload,
    cfg: SimConfig,
    engine: StepTimeModel,
    sched: Any,
    stall_threshold: float,
    record: bool,
    progress: Callable[[int], None] | None,
    max_steps: int,
) -> SimResult:
    """Run ``wl`` through the planner ``sched`` under ``cfg``; see :mod:`.planner`."""
    from .errors import StepLimitError

    state = _Run(wl, cfg, engine, sched)
    gaps = _Gaps(stall_threshold)
    log: list[StepRecord] | None = [] if record else None
    while state.done < state.n:
        state.admit()
        if state.running == 0:
            state.now = wl.arrival_s[state.order[state.nxt]]
            continue
        state.step(gaps, log)
        if state.steps > max_steps:
            done = f"{state.done} of {state.n} requests done"
            raise StepLimitError(cfg, state.steps, max_steps, done, estimated=False)
        if progress is not None and not state.steps & 4095:
            progress(state.done)
    if progress is not None:
        progress(state.done)
    state.check()
    return _result(state, gaps, log, stall_threshold)


def _result(
    state: _Run, gaps: _Gaps, log: list[StepRecord] | None, stall_threshold: float
) -> SimResult:
    import numpy as np

    from .results import Percentiles, SimResult

    arr = np.asarray(state.wl.arrival_s, dtype=np.float64)
    first_a = np.asarray(state.first, dtype=np.float64)
    finish_a = np.asarray(state.finish, dtype=np.float64)
    gap_a = np.asarray(gaps.values, dtype=np.float64)
    weights = np.asarray(gaps.weights, dtype=np.int64)
    span = float(finish_a.max() - arr.min())
    total_out = sum(state.output)
    return SimResult(
        config=state.cfg,
        requests=state.n,
        ttft_s=Percentiles.of(first_a - arr),
        tbt_s=Percentiles.of(gap_a, weights),
        e2e_s=Percentiles.of(finish_a - arr),
        throughput_tok_s=total_out / span if span > 0 else math.inf,
        steps=state.steps,
        stalls=gaps.stalls,
        stall_threshold_s=stall_threshold,
        sim_time_s=span,
        prefill_tokens=state.prefill_total,
        output_tokens=total_out,
        engine=state.engine,
        arrival=arr,
        admitted=np.asarray(state.admitted, dtype=np.float64),
        first_token=first_a,
        finish=finish_a,
        prefilled=np.asarray(state.prefilled, dtype=np.int64),
        tbt_gaps=gap_a,
        tbt_weights=weights,
        step_log=tuple(log) if log is not None else None,
    )
