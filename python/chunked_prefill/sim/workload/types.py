"""The workload the simulator replays: a column store of requests (:class:`Workload`)
and the limits on its counts and times.

Request ``i`` of a workload is simulated as scheduler request id ``i``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from .._check import count, items, kind, real

I64_MIN = -(2**63)


I64_MAX = 2**63 - 1


U64_MAX = 2**64 - 1


MAX_TOKENS = I64_MAX
"""The largest token count of a request (prompt, output or cached tokens): the simulator
keeps per-request counts in 64-bit signed arrays."""


MAX_ARRIVAL_S = float(2**53)
"""The latest arrival time, in seconds (about 285 million years): up to it a float holds
whole seconds exactly, and the simulated clock cannot overflow."""


@dataclass(frozen=True)
class Request:
    """One request of a workload.

    ``arrival_s`` is when it reaches the server (seconds), ``prompt_tokens`` its prompt
    length, ``output_tokens`` how many tokens it generates (the first one comes out of the
    prefill step, the others one per decode step), ``cached_tokens`` how many prompt tokens
    are already in the engine's prefix cache and ``priority`` its scheduling priority
    (lower first).
    """

    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int = 0
    priority: int = 0


def _ints_within(column: Sequence[Any], low: int, high: int) -> bool:
    """Whether every value of ``column`` is an ``int`` (``bool`` is not) in ``[low, high]``,
    by whole-column checks in C (a tenth of a per-value test's time on a 100 000-row trace);
    an empty column passes."""
    return not column or (
        set(map(type, column)) == {int} and min(column) >= low and max(column) <= high
    )


@dataclass(frozen=True)
class _ColumnStats:
    """Whole-column figures a run asks of its workload before and after the loop (whether
    the longest request fits, the fewest steps, the token totals), each a pass over
    100 000-value tuples; kept once per workload (``Workload._stats``)."""

    max_prompt: int
    max_output: int
    longest_output_at: int
    """The first request with the longest output (0 when there is none)."""
    total_prompt: int
    total_output: int
    any_priority: bool

    @classmethod
    def of(cls, workload: Workload) -> _ColumnStats:
        """The figures of ``workload``'s columns."""
        prompt, output = workload.prompt_tokens, workload.output_tokens
        if not output:
            return cls(0, 0, 0, 0, 0, False)
        longest = max(output)
        return cls(
            max_prompt=max(prompt),
            max_output=longest,
            longest_output_at=output.index(longest),
            total_prompt=sum(prompt),
            total_output=sum(output),
            any_priority=any(workload.priority),
        )


@dataclass(frozen=True)
class Workload:
    """Requests as parallel columns; request ``i`` is simulated as request id ``i``.

    Build one with :func:`default_workload`, :func:`load_trace` or
    :meth:`Workload.from_requests`. The columns must have equal lengths.
    """

    arrival_s: tuple[float, ...]
    prompt_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]
    cached_tokens: tuple[int, ...] = ()
    priority: tuple[int, ...] = ()
    source: str = "custom"
    """A short description of where the requests come from (shown in reports)."""
    group: tuple[int, ...] = ()
    """Per request, its shared-prefix group (``-1``: none); empty: no groups. The first
    ``prefix_tokens`` prompt tokens of the requests of one group are identical."""
    session: tuple[int, ...] = ()
    """Per request, its session; empty: every request its own. A session is one stream of
    tokens: each turn's prompt is its beginning, so a later turn extends an earlier one."""
    hash_ids: tuple[tuple[int, ...], ...] = ()
    """Per request, trace block hashes of its prompt (Mooncake's ``hash_ids``), each
    standing for ``hash_block`` tokens; empty: none. Equal hashes are equal blocks."""
    prefix_tokens: int = 0
    """Tokens of each group's shared prefix."""
    hash_block: int = 0
    """Tokens per trace block hash."""

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        for name in ("group", "session", "hash_ids"):
            column = getattr(self, name)
            if column and len(column) != n:
                raise ValueError(f"Workload column {name} must have one entry per request")
        if not _ints_within(self.group, -1, I64_MAX):
            raise ValueError("Workload groups must be ints in [-1, 2**63 - 1] (-1: no group)")
        if not _ints_within(self.session, 0, U64_MAX):
            raise ValueError("Workload sessions must be ints in [0, 2**64 - 1]")
        if any(type(x) is not int or not 0 <= x <= U64_MAX for h in self.hash_ids for x in h):
            raise ValueError("Workload hash_ids must be ints in [0, 2**64 - 1]")
        for name in ("prefix_tokens", "hash_block"):
            v = getattr(self, name)
            if type(v) is not int or not 0 <= v <= MAX_TOKENS:
                raise ValueError(f"Workload {name} must be an int in [0, {MAX_TOKENS}]")
        if not self.cached_tokens:
            object.__setattr__(self, "cached_tokens", (0,) * n)
        if not self.priority:
            object.__setattr__(self, "priority", (0,) * n)
        lengths = {
            len(self.prompt_tokens),
            len(self.output_tokens),
            len(self.cached_tokens),
            len(self.priority),
        }
        if lengths != {n}:
            raise ValueError("Workload columns must all have the same length")
        if not self._plainly_valid():
            self._check_each_request()

    def _plainly_valid(self) -> bool:
        """Whether every request passes the checks of :meth:`_check_each_request`, told by
        whole-column checks in C (types, minima, maxima) for the usual plain floats and
        ints; ``False`` sends any other column to the request-by-request checks, which name
        the first offender."""
        arrival, prompt, output = self.arrival_s, self.prompt_tokens, self.output_tokens
        cached, priority = self.cached_tokens, self.priority
        if not arrival:
            return True
        if not set(map(type, arrival)) <= {int, float} or any(map(math.isnan, arrival)):
            return False
        return (
            min(arrival) >= 0
            and max(arrival) <= MAX_ARRIVAL_S
            and _ints_within(prompt, 1, MAX_TOKENS)
            and _ints_within(output, 1, MAX_TOKENS)
            and _ints_within(cached, 0, MAX_TOKENS)
            and all(map(operator.le, cached, prompt))
            and _ints_within(priority, I64_MIN, I64_MAX)
        )

    def _check_each_request(self) -> None:
        """Check the requests one by one, raising for the first that breaks a rule."""
        for i in range(len(self.arrival_s)):
            a = self.arrival_s[i]
            p = self.prompt_tokens[i]
            o = self.output_tokens[i]
            c = self.cached_tokens[i]
            if (
                isinstance(a, bool)
                or not isinstance(a, (int, float))
                or not 0 <= a <= MAX_ARRIVAL_S
            ):
                raise ValueError(
                    f"request {i}: arrival_s must be a number of seconds in"
                    f" [0, {MAX_ARRIVAL_S:.0f}] (2**53), got {a!r}"
                )
            if type(p) is not int or not 1 <= p <= MAX_TOKENS:
                raise ValueError(
                    f"request {i}: prompt_tokens must be an int in [1, {MAX_TOKENS}], got {p!r}"
                )
            if type(o) is not int or not 1 <= o <= MAX_TOKENS:
                raise ValueError(
                    f"request {i}: output_tokens must be an int in [1, {MAX_TOKENS}], got {o!r}"
                )
            if type(c) is not int or not 0 <= c <= p:
                raise ValueError(
                    f"request {i}: cached_tokens must be an int in [0, prompt_tokens={p}],"
                    f" got {c!r}"
                )
            q = self.priority[i]
            if type(q) is not int or not I64_MIN <= q <= I64_MAX:
                raise ValueError(f"request {i}: priority must be a 64-bit int, got {q!r}")

    @classmethod
    def from_requests(cls, requests: Iterable[Request], *, source: str = "custom") -> Workload:
        """A workload holding ``requests`` in the given order."""
        reqs = items("requests", requests, "Request values", empty=True)
        for i, r in enumerate(reqs):
            kind(f"requests[{i}]", r, (Request,), "a Request")
        kind("source", source, (str,), "a string")
        return cls(
            arrival_s=tuple(float(r.arrival_s) for r in reqs),
            prompt_tokens=tuple(r.prompt_tokens for r in reqs),
            output_tokens=tuple(r.output_tokens for r in reqs),
            cached_tokens=tuple(r.cached_tokens for r in reqs),
            priority=tuple(r.priority for r in reqs),
            source=source,
        )

    @classmethod
    def _of_checked(cls, **columns: Any) -> Workload:
        """A workload of ``columns`` whose every value was checked already against the
        rules of the constructor, built without checking them again (the whole-column
        checks take a twentieth of ``simulate`` and of ``simulate --trace``): the Rust trace
        reader applies them row by row while it parses (``rust/core/src/trace/fields.rs``;
        the reader's differential tests compare its workloads with the checked ones of the
        reference reader), and :func:`default_workload` checks the ranges of the arrays its
        columns come from. Every column is given, ``cached_tokens`` and ``priority`` full
        length."""
        workload = object.__new__(cls)
        for field in fields(cls):
            value = columns.pop(field.name, field.default)
            object.__setattr__(workload, field.name, value)
        if columns:
            raise TypeError(f"not a Workload field: {sorted(columns)}")
        return workload

    def __len__(self) -> int:
        return len(self.arrival_s)

    def _stats(self) -> _ColumnStats:
        """The workload's whole-column figures, computed at the first call (or given by
        :func:`default_workload`, which has them from its arrays) and kept."""
        stats = self.__dict__.get("_column_stats")
        if not isinstance(stats, _ColumnStats):
            stats = _ColumnStats.of(self)
            self._keep_stats(stats)
        return stats

    def _keep_stats(self, stats: _ColumnStats) -> None:
        """Keep ``stats`` as this workload's (they must be its columns' figures)."""
        object.__setattr__(self, "_column_stats", stats)

    def __iter__(self) -> Iterator[Request]:
        return self.requests()

    def requests(self) -> Iterator[Request]:
        """The requests one by one, as :class:`Request` values."""
        for i in range(len(self.arrival_s)):
            yield Request(
                self.arrival_s[i],
                self.prompt_tokens[i],
                self.output_tokens[i],
                self.cached_tokens[i],
                self.priority[i],
            )

    def head(self, n: int) -> Workload:
        """The first ``n`` requests (all of them if there are fewer)."""
        n = count("n", n, 0, 2**64 - 1)
        return Workload(
            self.arrival_s[:n],
            self.prompt_tokens[:n],
            self.output_tokens[:n],
            self.cached_tokens[:n],
            self.priority[:n],
            source=self.source,
            **self._sharing(slice(0, n)),
        )

    def _sharing(self, rows: slice) -> dict[str, Any]:
        """The sharing columns (sliced) and constants, as keyword arguments."""
        return {
            "group": self.group[rows],
            "session": self.session[rows],
            "hash_ids": self.hash_ids[rows],
            "prefix_tokens": self.prefix_tokens,
            "hash_block": self.hash_block,
        }

    @property
    def shares_tokens(self) -> bool:
        """Whether any request may share prompt tokens with another (groups with a
        prefix, sessions or trace hashes)."""
        return bool(
            (self.prefix_tokens and any(g >= 0 for g in self.group))
            or self.session
            or any(self.hash_ids)
        )

    def scaled(self, prompt_scale: float = 1.0, output_scale: float = 1.0) -> Workload:
        """Lengths multiplied by the scales, rounded to the nearest integer, at least 1.

        Cached prompt tokens scale with the prompt (rounded down, never above the scaled
        prompt). Scales of exactly 1 leave the workload unchanged.
        """
        prompt_scale = real("prompt_scale", prompt_scale, 0.0, low_open=True)
        output_scale = real("output_scale", output_scale, 0.0, low_open=True)
        if prompt_scale == 1.0 and output_scale == 1.0:
            return self
        prompts = self.prompt_tokens
        cached = self.cached_tokens
        if prompt_scale != 1.0:
            prompts = _scale_counts("prompt_scale", prompt_scale, self.prompt_tokens, "prompt")
            cached = tuple(
                min(math.floor(c * prompt_scale), p) for c, p in zip(self.cached_tokens, prompts)
            )
        outputs = self.output_tokens
        if output_scale != 1.0:
            outputs = _scale_counts("output_scale", output_scale, self.output_tokens, "output")
        return Workload(
            self.arrival_s,
            prompts,
            outputs,
            cached,
            self.priority,
            source=f"{self.source} (prompt x{prompt_scale:g}, output x{output_scale:g})",
            **self._sharing(slice(None)),
        )

    @property
    def mean_rate(self) -> float:
        """Requests per second over the arrival span, ``(n - 1) / (last - first)``
        (``inf`` when every request arrives at once)."""
        span = max(self.arrival_s) - min(self.arrival_s) if self.arrival_s else 0.0
        return (len(self) - 1) / span if span > 0 else math.inf

    def at_rate(self, rate: float) -> Workload:
        """The same requests with their arrivals stretched or squeezed around the first one
        so that :attr:`mean_rate` is ``rate`` (``inf``: all at the first arrival); the
        order and the relative gaps stay. Raises ``ValueError`` when the arrivals span no
        time (nothing to rescale) or a rescaled time would pass 2**53 seconds.
        """
        rate = real("rate", rate, 0.0, low_open=True, inf=True)
        current = self.mean_rate
        if math.isinf(current):
            raise ValueError(
                "the arrivals span no time (one request, or all at once), so their rate"
                " cannot be rescaled"
            )
        first = min(self.arrival_s)
        factor = current / rate
        arrivals = tuple(first + (a - first) * factor for a in self.arrival_s)
        if max(arrivals) > MAX_ARRIVAL_S:
            raise ValueError(
                f"rate {rate:g} stretches the arrivals past 2**53 seconds (the trace's mean"
                f" rate is {current:g} requests/s)"
            )
        return replace(self, arrival_s=arrivals, source=f"{self.source} at {rate:g} req/s")

    def summary(self) -> dict[str, Any]:
        """Counts and means of the workload, as plain data."""
        n = len(self)
        if n == 0:
            return {"requests": 0, "source": self.source}
        span = max(self.arrival_s) - min(self.arrival_s)
        return {
            "requests": n,
            "source": self.source,
            "arrival_span_s": span,
            "mean_rate_rps": (n - 1) / span if span > 0 else math.inf,
            "prompt_tokens_mean": sum(self.prompt_tokens) / n,
            "prompt_tokens_max": max(self.prompt_tokens),
            "output_tokens_mean": sum(self.output_tokens) / n,
            "output_tokens_max": max(self.output_tokens),
            "cached_tokens_total": sum(self.cached_tokens),
        }


def _scale_counts(name: str, scale: float, counts: Sequence[int], what: str) -> tuple[int, ...]:
    """``counts`` times ``scale``, rounded, at least 1; a ``ValueError`` naming ``name`` when
    a count would leave ``[1, MAX_TOKENS]``."""
    limit = float(MAX_TOKENS)
    out = []
    for i, tokens in enumerate(counts):
        scaled = tokens * scale
        if not scaled < limit:  # also catches inf
            raise ValueError(
                f"{name} {scale:g} makes request {i}'s {what} {scaled:.3g} tokens, above the"
                f" limit of {MAX_TOKENS} tokens (2**63 - 1)"
            )
        out.append(max(1, round(scaled)))
    return tuple(out)
