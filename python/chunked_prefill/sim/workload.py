"""Workloads for the simulator: the embedded synthetic chat workload and trace files.

A :class:`Workload` is a column store of requests (arrival time, prompt length, output
length, and optionally prefix-cached prompt tokens and a scheduling priority). Request
``i`` of a workload is simulated as scheduler request id ``i``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import operator
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from ._check import count, items, kind, real, show
from ._check import path as check_path
from ._files import FileProblem, read_bytes
from ._json import FLOAT_EXACT, DuplicateKey, Number, exact, whole
from ._json import loads as json_loads

__all__ = [
    "FIELD_ALIASES",
    "ChatWorkloadSpec",
    "Request",
    "TraceError",
    "Workload",
    "default_workload",
    "load_trace",
]

I64_MIN = -(2**63)
I64_MAX = 2**63 - 1
U64_MAX = 2**64 - 1
MAX_TOKENS = I64_MAX
"""The largest token count of a request (prompt, output or cached tokens): the simulator
keeps per-request counts in 64-bit signed arrays."""
MAX_SAMPLED = 2**53
"""The largest length :class:`ChatWorkloadSpec` draws (its lengths are drawn as floats)."""
MAX_ARRIVAL_S = float(2**53)
"""The latest arrival time, in seconds (about 285 million years): up to it a float holds
whole seconds exactly, and the simulated clock cannot overflow."""


def _ints_within(column: Sequence[Any], low: int, high: int) -> bool:
    """Whether every value of ``column`` is an ``int`` (not a ``bool``) in ``[low, high]``,
    tested at C speed."""
    types = set(map(type, column))
    return not types or (types == {int} and low <= min(column) and max(column) <= high)


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
        # the common case (tuples) at C speed; any other iterable as it always was
        fast = all(type(h) is tuple and _ints_within(h, 0, U64_MAX) for h in self.hash_ids)
        if not fast and any(
            type(x) is not int or not 0 <= x <= U64_MAX for h in self.hash_ids for x in h
        ):
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
        if not self._rows_valid():
            self._raise_first_invalid_row()

    def _rows_valid(self) -> bool:
        """Whether every request passes :meth:`_raise_first_invalid_row`'s checks, tested a
        column at a time at C speed (a 100 000-request trace in milliseconds)."""
        a = self.arrival_s
        return (
            set(map(type, a)) <= {float, int}
            and all(map(MAX_ARRIVAL_S.__ge__, a))  # False for NaN, as the loop's test
            and all(map((0.0).__le__, a))
            and _ints_within(self.prompt_tokens, 1, MAX_TOKENS)
            and _ints_within(self.output_tokens, 1, MAX_TOKENS)
            and _ints_within(self.cached_tokens, 0, MAX_TOKENS)
            and all(map(operator.le, self.cached_tokens, self.prompt_tokens))
            and _ints_within(self.priority, I64_MIN, I64_MAX)
        )

    def _raise_first_invalid_row(self) -> None:
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

    def __len__(self) -> int:
        return len(self.arrival_s)

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


# --------------------------------------------------------------------------- synthetic


@dataclass(frozen=True)
class ChatWorkloadSpec:
    """Length distributions of the embedded synthetic chat workload.

    Prompt lengths are a two-part lognormal mixture: with probability
    ``1 - long_fraction`` a chat turn, lognormal with median ``chat_prompt_median`` and
    log-standard-deviation ``chat_prompt_sigma``; with probability ``long_fraction`` a long
    document prompt (RAG context, pasted file), lognormal with median
    ``long_prompt_median`` and sigma ``long_prompt_sigma``. Output lengths are lognormal with
    median ``output_median`` and sigma ``output_sigma``. Lognormals have a heavy right tail;
    every length is rounded and truncated to ``[1, max_*_tokens]`` (the synthetic
    distribution's support; traces are never truncated).

    The defaults give a mean prompt of about 640 tokens with 8% of prompts between about
    1 500 and 6 000 tokens, and a mean output of about 190 tokens: the shape of chat traces
    such as ShareGPT and LMSYS-Chat with a RAG-like long-prompt share added.
    """

    chat_prompt_median: float = 256.0
    chat_prompt_sigma: float = 1.1
    long_fraction: float = 0.08
    long_prompt_median: float = 3000.0
    long_prompt_sigma: float = 0.35
    max_prompt_tokens: int = 8192
    output_median: float = 128.0
    output_sigma: float = 0.9
    max_output_tokens: int = 2048

    def __post_init__(self) -> None:
        for name in ("chat_prompt_median", "long_prompt_median", "output_median"):
            object.__setattr__(
                self, name, real(name, getattr(self, name), 0.0, MAX_ARRIVAL_S, low_open=True)
            )
        for name in ("chat_prompt_sigma", "long_prompt_sigma", "output_sigma"):
            object.__setattr__(self, name, real(name, getattr(self, name), 0.0, 100.0))
        object.__setattr__(self, "long_fraction", real("long_fraction", self.long_fraction, 0, 1))
        for name in ("max_prompt_tokens", "max_output_tokens"):
            object.__setattr__(self, name, count(name, getattr(self, name), 1, MAX_SAMPLED))

    def mean_prompt_tokens(self) -> float:
        """The mean prompt length before rounding: the lognormal mixture clipped at
        ``max_prompt_tokens``."""
        return (1 - self.long_fraction) * _clipped_lognormal_mean(
            self.chat_prompt_median, self.chat_prompt_sigma, self.max_prompt_tokens
        ) + self.long_fraction * _clipped_lognormal_mean(
            self.long_prompt_median, self.long_prompt_sigma, self.max_prompt_tokens
        )

    def mean_output_tokens(self) -> float:
        """The mean output length before rounding (clipped at ``max_output_tokens``)."""
        return _clipped_lognormal_mean(
            self.output_median, self.output_sigma, self.max_output_tokens
        )

    def with_means(self, input_len: int | None, output_len: int | None) -> ChatWorkloadSpec:
        """The same shapes stretched so that the mean prompt is ``input_len`` and the mean
        output ``output_len`` tokens (``None`` keeps one): medians and maxima multiplied by
        one factor each, which multiplies the clipped mean by the same factor."""
        out = self
        if input_len is not None:
            k = input_len / self.mean_prompt_tokens()
            out = replace(
                out,
                chat_prompt_median=self.chat_prompt_median * k,
                long_prompt_median=self.long_prompt_median * k,
                max_prompt_tokens=max(1, min(MAX_SAMPLED, round(self.max_prompt_tokens * k))),
            )
        if output_len is not None:
            k = output_len / self.mean_output_tokens()
            out = replace(
                out,
                output_median=self.output_median * k,
                max_output_tokens=max(1, min(MAX_SAMPLED, round(self.max_output_tokens * k))),
            )
        return out


def _clipped_lognormal_mean(median: float, sigma: float, high: float) -> float:
    """``E[min(X, high)]`` for a lognormal ``X`` of this median and log-sigma."""
    if sigma == 0:
        return min(median, high)
    mu = math.log(median)
    z = (math.log(high) - mu) / sigma

    def phi(x: float) -> float:
        return 0.5 * (1 + math.erf(x / math.sqrt(2)))

    return math.exp(mu + sigma * sigma / 2) * phi(z - sigma) + high * (1 - phi(z))


LENGTH_DISTS = ("chat", "fixed", "uniform", "exponential")
"""The synthetic workload's length distributions (``--length-dist``)."""
DEFAULT_INPUT_LEN = 1024
"""The mean prompt of ``fixed``, ``uniform`` and ``exponential`` unless told (vLLM's
``--random-input-len``)."""
DEFAULT_OUTPUT_LEN = 128
"""Their mean output unless told (vLLM's ``--random-output-len``)."""
DEFAULT_RANGE_RATIO = 0.5
"""The ``uniform`` distribution's half-width relative to its mean unless told."""


def check_lengths(
    input_len: object,
    output_len: object,
    length_dist: object,
    range_ratio: object,
    prompt_scale: float,
    output_scale: float,
) -> tuple[int | None, int | None, str, float | None]:
    """:func:`default_workload`'s length arguments, checked (a ``ValueError`` naming the
    argument)."""
    mean_in: int | None = count("input_len", input_len, 1, MAX_SAMPLED, none=True)
    mean_out: int | None = count("output_len", output_len, 1, MAX_SAMPLED, none=True)
    if not isinstance(length_dist, str) or length_dist not in LENGTH_DISTS:
        raise ValueError(
            f"length_dist must be one of {', '.join(map(repr, LENGTH_DISTS))}, got"
            f" {show(length_dist)}"
        )
    ratio: float | None = real("range_ratio", range_ratio, 0.0, 1.0, high_open=True, none=True)
    if ratio is not None and length_dist != "uniform":
        raise ValueError(f"range_ratio applies to length_dist 'uniform', not {length_dist!r}")
    if mean_in is not None and prompt_scale != 1.0:
        raise ValueError("input_len and prompt_scale: give one (input_len sets the mean prompt)")
    if mean_out is not None and output_scale != 1.0:
        raise ValueError("output_len and output_scale: give one (output_len sets the mean output)")
    return mean_in, mean_out, length_dist, ratio


def _draw_lengths(rng: Any, n: int, mean: int, dist: str, ratio: float, low_limit: int) -> Any:
    """``n`` lengths of mean ``mean`` from ``dist`` (not ``chat``), each at least 1."""
    import numpy as np

    if dist == "fixed":
        return np.full(n, mean, dtype=np.int64)
    if dist == "uniform":  # vLLM's random dataset: [floor(X (1 - r)), ceil(X (1 + r))]
        low = max(low_limit, math.floor(mean * (1 - ratio)))
        high = math.ceil(mean * (1 + ratio))
        return rng.integers(low, high + 1, n, dtype=np.int64)
    drawn = rng.exponential(float(mean), n)
    return np.clip(np.rint(drawn), 1, MAX_SAMPLED).astype(np.int64)


DEFAULT_REQUESTS = 1000
"""How many requests :func:`default_workload` makes unless told."""
DEFAULT_RATE = 6.0
MAX_REQUESTS = 10_000_000
"""The most requests :func:`default_workload` draws (``--requests``' limit too)."""
"""The default Poisson arrival rate of the synthetic workload, requests per second."""


def default_workload(
    requests: int = DEFAULT_REQUESTS,
    *,
    rate: float = DEFAULT_RATE,
    seed: int = 0,
    prompt_scale: float = 1.0,
    output_scale: float = 1.0,
    spec: ChatWorkloadSpec | None = None,
    prefix_tokens: int = 0,
    prefix_groups: int = 1,
    turns: int = 1,
    input_len: int | None = None,
    output_len: int | None = None,
    length_dist: str = "chat",
    range_ratio: float | None = None,
) -> Workload:
    """The embedded synthetic chat workload (see :class:`ChatWorkloadSpec`).

    Lengths: ``length_dist="chat"`` (the default) is :class:`ChatWorkloadSpec`, its shapes
    stretched to a mean prompt of ``input_len`` and a mean output of ``output_len`` tokens
    when given (:meth:`ChatWorkloadSpec.with_means`). ``"fixed"`` gives every request
    ``input_len`` and ``output_len`` tokens; ``"uniform"`` draws whole numbers in
    ``[floor(X (1 - r)), ceil(X (1 + r))]`` for mean ``X`` and ``r = range_ratio`` in
    [0, 1) (default 0.5), as vLLM's random dataset (``--random-range-ratio``), at least 1;
    ``"exponential"`` rounds exponential draws of mean ``X``, at least 1. Their means
    default to vLLM's 1024 and 128. They come from a third generator, so the arrivals are
    those of the chat workload of the same seed. ``input_len`` replaces ``prompt_scale``,
    ``output_len`` ``output_scale`` (giving both is an error).

    Arrivals are a Poisson process of ``rate`` requests per second (exponential gaps, the
    first request arriving after the first gap); ``rate=math.inf`` puts every request at
    t=0. Everything is drawn from ``numpy.random.default_rng(seed)``: the same arguments
    give the same workload on every machine. Lengths are drawn before arrival gaps, so a
    different ``rate`` keeps every request's lengths and only stretches the arrival times.

    Shared prefixes (for the serving scheduler's prefix cache): with ``prefix_tokens`` N,
    every conversation belongs to one of ``prefix_groups`` groups, drawn uniformly, and
    its prompts start with the group's N tokens (a system prompt) before the drawn
    length. With ``turns`` T, requests come in sessions of T turns: turn k's prompt is
    turn k-1's prompt and output followed by a new drawn user message, sessions start as
    a Poisson process at ``rate / T`` (with T = 1, at the plain workload's arrivals) and
    each turn arrives an exponential think time of
    mean :data:`TURN_GAP_S` after the previous one (arrival order, open loop). These draws
    come from a second generator, so the drawn lengths are the same as without them; the
    workload's ``group``/``session`` columns tell the simulator which tokens are shared.
    """
    import numpy as np

    requests = count("requests", requests, 1, MAX_REQUESTS)
    rate = real("rate", rate, 0.0, low_open=True, inf=True)
    seed = count("seed", seed, 0, U64_MAX)
    prompt_scale = real("prompt_scale", prompt_scale, 0.0, low_open=True)
    output_scale = real("output_scale", output_scale, 0.0, low_open=True)
    if spec is not None:
        kind("spec", spec, (ChatWorkloadSpec,), "None or a ChatWorkloadSpec")
    prefix_tokens = count("prefix_tokens", prefix_tokens, 0, MAX_TOKENS)
    prefix_groups = count("prefix_groups", prefix_groups, 1, MAX_TOKENS)
    turns = count("turns", turns, 1, MAX_TOKENS)
    input_len, output_len, length_dist, range_ratio = check_lengths(
        input_len, output_len, length_dist, range_ratio, prompt_scale, output_scale
    )
    spec = spec or ChatWorkloadSpec()
    if length_dist == "chat":
        spec = spec.with_means(input_len, output_len)
    rng = np.random.default_rng(seed)
    is_long = rng.random(requests) < spec.long_fraction
    chat = rng.lognormal(math.log(spec.chat_prompt_median), spec.chat_prompt_sigma, requests)
    long = rng.lognormal(math.log(spec.long_prompt_median), spec.long_prompt_sigma, requests)
    prompt = np.clip(np.rint(np.where(is_long, long, chat)), 1, spec.max_prompt_tokens)
    output = rng.lognormal(math.log(spec.output_median), spec.output_sigma, requests)
    output = np.clip(np.rint(output), 1, spec.max_output_tokens)
    gaps = rng.standard_exponential(requests)
    arrivals = np.zeros(requests) if math.isinf(rate) else np.cumsum(gaps / rate)
    rate_text = "inf" if math.isinf(rate) else f"{rate:g}"
    kind_text = "chat"
    if length_dist != "chat":
        lengths = np.random.default_rng([seed, 24])
        x_in = DEFAULT_INPUT_LEN if input_len is None else input_len
        x_out = DEFAULT_OUTPUT_LEN if output_len is None else output_len
        ratio = DEFAULT_RANGE_RATIO if range_ratio is None else range_ratio
        prompt = _draw_lengths(lengths, requests, x_in, length_dist, ratio, 1)
        output = _draw_lengths(lengths, requests, x_out, length_dist, ratio, 1)
        shape = f" (range ratio {ratio:g})" if length_dist == "uniform" else ""
        kind_text = f"{length_dist} lengths{shape}: prompt {x_in}, output {x_out}"
    elif input_len is not None or output_len is not None:
        kind_text = (
            f"chat, mean prompt {input_len or 'as drawn'}, output {output_len or 'as drawn'}"
        )
    if prefix_tokens or turns > 1:
        shared = _shared_workload(
            requests, rate, seed, prompt, output, arrivals, prefix_tokens, prefix_groups, turns
        )
        parts = [f"{requests} requests", f"{rate_text} req/s", f"seed {seed}"]
        if kind_text != "chat":
            parts.append(kind_text)
        if prefix_tokens:
            parts.append(f"{prefix_tokens}-token prefix x {prefix_groups} group(s)")
        if turns > 1:
            parts.append(f"{turns} turns")
        workload = Workload(**shared, source=f"synthetic chat workload ({', '.join(parts)})")
        return workload.scaled(prompt_scale, output_scale)
    workload = Workload(
        arrival_s=tuple(float(a) for a in arrivals.tolist()),
        prompt_tokens=tuple(int(p) for p in prompt.tolist()),
        output_tokens=tuple(int(o) for o in output.tolist()),
        source=f"synthetic chat workload ({requests} requests, {rate_text} req/s, seed {seed}"
        + ("" if kind_text == "chat" else f", {kind_text}")
        + ")",
    )
    return workload.scaled(prompt_scale, output_scale)


TURN_GAP_S = 10.0
"""Mean think time between two turns of a synthetic session, seconds."""


def _shared_workload(
    requests: int,
    rate: float,
    seed: int,
    user: Any,
    output: Any,
    arrivals: Any,
    prefix_tokens: int,
    groups: int,
    turns: int,
) -> dict[str, Any]:
    """The columns of a synthetic workload with shared prefixes and sessions (see
    :func:`default_workload`), in arrival order."""
    import numpy as np

    rng = np.random.default_rng([seed, 12])
    sessions = -(-requests // turns)
    group = rng.integers(0, groups, sessions) if prefix_tokens else None
    starts = rng.standard_exponential(sessions)
    think = rng.standard_exponential(requests) * TURN_GAP_S
    if math.isinf(rate):
        starts = np.zeros(sessions)
        think = np.zeros(requests)
    else:
        starts = np.cumsum(starts / (rate / turns))
    if turns == 1:  # a shared prefix alone changes only the prompts
        starts = arrivals
    rows: list[tuple[float, int, int, int, int, int]] = []
    k = 0
    for s in range(sessions):
        t = float(starts[s])
        context = prefix_tokens
        g = int(group[s]) if group is not None else -1
        for _ in range(turns):
            if k == requests:
                break
            p = context + int(user[k])
            o = int(output[k])
            rows.append((t, k, p, o, s, g))
            context = p + o
            t += float(think[k])
            k += 1
    rows.sort()
    return {
        "arrival_s": tuple(r[0] for r in rows),
        "prompt_tokens": tuple(r[2] for r in rows),
        "output_tokens": tuple(r[3] for r in rows),
        "group": tuple(r[5] for r in rows) if prefix_tokens else (),
        "session": tuple(r[4] for r in rows) if turns > 1 else (),
        "prefix_tokens": prefix_tokens,
    }


# --------------------------------------------------------------------------- traces


class TraceError(ValueError):
    """A trace file that cannot be read as a workload.

    ``path``, ``line`` (1-based, 0 when the problem is the file as a whole) and ``field``
    (the column, or ``None``) say where; the message says the same in words.
    """

    def __init__(self, path: str, line: int, field: str | None, problem: str) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.problem = problem
        where = f"{path}:{line}" if line else path
        what = f" field {field!r}:" if field else ""
        super().__init__(f"{where}:{what} {problem}")


FIELD_ALIASES: Mapping[str, tuple[str, ...]] = {
    "arrival_s": (
        "arrival_s",
        "arrival",
        "arrival_time",
        "arrival_time_s",
        "arrived_at",
        "timestamp",
        "time",
        "time_s",
        "ts",
    ),
    "prompt_tokens": (
        "prompt_tokens",
        "prompt_len",
        "prompt_length",
        "input_tokens",
        "input_len",
        "input_length",
        "num_prefill_tokens",
        "num_input_tokens",
        "num_prompt_tokens",
        "context_tokens",
        "request_tokens",
    ),
    "output_tokens": (
        "output_tokens",
        "output_len",
        "output_length",
        "num_decode_tokens",
        "num_output_tokens",
        "generated_tokens",
        "completion_tokens",
        "response_tokens",
        "decode_tokens",
    ),
    "cached_tokens": ("cached_tokens", "num_cached_tokens", "prefix_cached_tokens"),
    "priority": ("priority",),
    "hash_ids": ("hash_ids", "block_hashes", "prefix_hashes"),
    "session_id": ("session_id", "session", "conversation_id", "conv_id", "chat_id"),
    "prefix_id": ("prefix_id", "prefix_group", "system_prompt_id"),
    "prefix_tokens": ("prefix_tokens", "prefix_len", "prefix_length", "system_prompt_tokens"),
}
"""Column names accepted for each field. Matching ignores case, ``_``, ``-`` and spaces, so
``ContextTokens`` (Azure LLM inference traces), ``Request tokens`` (BurstGPT) and
``num_prefill_tokens`` (Vidur) all name ``prompt_tokens``."""

_REQUIRED = ("arrival_s", "prompt_tokens", "output_tokens")
_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


def read_text(name: str) -> str:
    """The UTF-8 text of the trace or steps file ``name`` (a leading BOM dropped), or a
    :class:`TraceError` saying why not (see :mod:`._files`)."""
    return _decode(name, _read_file(name))


def _read_file(name: str) -> bytes:
    try:
        return read_bytes(name)
    except FileProblem as err:
        raise TraceError(name, err.line, None, err.problem) from None


def _decode(name: str, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise TraceError(
            name, line, None, f"not UTF-8 text: {err.reason} at byte {err.start}"
        ) from None


def _norm(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


_ALIAS_INDEX: dict[str, str] = {
    _norm(alias): canon for canon, aliases in FIELD_ALIASES.items() for alias in aliases
}


def _map_columns(path: str, line: int, names: Sequence[str]) -> dict[str, str]:
    """Canonical field -> the column name that holds it; errors on missing or doubled."""
    found: dict[str, str] = {}
    for name in names:
        canon = _ALIAS_INDEX.get(_norm(name))
        if canon is None:
            continue
        if canon in found:
            raise TraceError(
                path,
                line,
                name,
                f"names the same field as column {found[canon]!r} ({canon}); keep one of them",
            )
        found[canon] = name
    for canon in _REQUIRED:
        if canon not in found:
            raise TraceError(
                path,
                line,
                canon,
                "is missing; accepted column names: " + ", ".join(FIELD_ALIASES[canon]),
            )
    return found


class _Columns:
    def __init__(self) -> None:
        self.arrival: list[float] = []
        self.prompt: list[int] = []
        self.output: list[int] = []
        self.cached: list[int] = []
        self.priority: list[int] = []
        self.hash_ids: list[tuple[int, ...]] = []
        self.session: list[str | None] = []
        self.prefix: list[str | None] = []
        self.prefix_tokens: tuple[int, int] | None = None  # (line, value) of the first row
        self.time_kind: str | None = None  # "number" or "datetime", fixed by the first row


def _show(raw: object) -> str:
    """``raw`` for a message: as written for a number or text (shortened when long)."""
    if isinstance(raw, (list, dict)):
        return _json_kind(raw)
    text = raw if isinstance(raw, str) else json.dumps(raw) if isinstance(raw, bool) else None
    if text is None:
        return repr(raw)
    shown = text if isinstance(raw, Number) else repr(text)
    if len(shown) > 60:
        shown = f"{shown[:30]}...{shown[-10:]} ({len(text)} characters)"
    return shown


def _json_kind(value: object) -> str:
    if isinstance(value, dict):
        return "a JSON object"
    if isinstance(value, list):
        return "a JSON array"
    if isinstance(value, Number):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "null" if value is None else json.dumps(value)


def _number(raw: object) -> tuple[Decimal, bool] | None:
    """The exact value of a JSON number or a text cell, and whether it was an integer."""
    if isinstance(raw, str):  # Number (a JSON number) is a str too
        return exact(raw)
    return None


def _parse_int(
    path: str, line: int, col: str, raw: object, *, low: int, high: int, what: str
) -> int:
    parsed = _number(raw)
    if parsed is None:
        raise TraceError(path, line, col, f"expected {what}, got {_show(raw)}")
    value, written_as_integer = parsed
    if not low <= value <= high:
        raise TraceError(path, line, col, f"expected {what}, got {_show(raw)}")
    count = whole(value, written_as_integer)
    if count is None:
        if written_as_integer or abs(value) <= FLOAT_EXACT:
            raise TraceError(path, line, col, f"expected {what}, got {_show(raw)}")
        raise TraceError(
            path,
            line,
            col,
            f"expected {what}, got {_show(raw)}: a number with a fraction or an exponent"
            f" above 2**53 ({FLOAT_EXACT}) may be a rounded float; write it as a whole"
            " number",
        )
    return count


def _parse_time(path: str, line: int, col: str, raw: object, unit: float, cols: _Columns) -> float:
    kind = "number"
    parsed = _number(raw)
    seconds: float | None = None
    if parsed is not None:
        value, _ = parsed
        if not 0 <= value <= FLOAT_EXACT:
            raise TraceError(
                path,
                line,
                col,
                f"expected a time in [0, {FLOAT_EXACT}] (2**53, up to which a float holds"
                f" every whole number), got {_show(raw)}",
            )
        seconds = float(value) * unit
    elif isinstance(raw, str) and not isinstance(raw, Number):
        seconds = _parse_datetime(raw.strip())
        kind = "datetime"
    if seconds is None:
        raise TraceError(
            path, line, col, f"expected seconds (a number) or an ISO date-time, got {_show(raw)}"
        )
    if cols.time_kind is None:
        cols.time_kind = kind
    elif cols.time_kind != kind:
        raise TraceError(
            path, line, col, f"is a {kind} but earlier rows hold {cols.time_kind}s: {_show(raw)}"
        )
    return seconds


def _parse_datetime(text: str) -> float | None:
    """Seconds since the epoch of an ISO-8601 date-time (naive ones read as UTC)."""
    candidate = text.replace("Z", "+00:00")
    # Python < 3.11 accepts only 3 or 6 fraction digits; traces often carry 7.
    dot = candidate.find(".")
    if dot != -1:
        end = dot + 1
        while end < len(candidate) and candidate[end].isdigit():
            end += 1
        frac = candidate[dot + 1 : end]
        candidate = candidate[: dot + 1] + (frac + "000000")[:6] + candidate[end:]
    try:
        stamp = datetime.fromisoformat(candidate)
    except ValueError:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return stamp.timestamp()


def _add_row(
    path: str,
    line: int,
    row: Mapping[str, object],
    mapping: Mapping[str, str],
    unit: float,
    cols: _Columns,
) -> None:
    values: dict[str, object] = {}
    for canon, col in mapping.items():
        raw = row.get(col)
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            if canon in _REQUIRED:
                raise TraceError(path, line, col, "is missing or empty")
            continue
        values[canon] = raw
    arrival = _parse_time(path, line, mapping["arrival_s"], values["arrival_s"], unit, cols)
    prompt = _parse_int(
        path,
        line,
        mapping["prompt_tokens"],
        values["prompt_tokens"],
        low=1,
        high=MAX_TOKENS,
        what=f"a whole number of tokens in [1, {MAX_TOKENS}]",
    )
    output = _parse_int(
        path,
        line,
        mapping["output_tokens"],
        values["output_tokens"],
        low=1,
        high=MAX_TOKENS,
        what=f"a whole number of tokens in [1, {MAX_TOKENS}]",
    )
    cached = 0
    if "cached_tokens" in values:
        cached = _parse_int(
            path,
            line,
            mapping["cached_tokens"],
            values["cached_tokens"],
            low=0,
            high=prompt,
            what=f"a whole number of tokens in [0, prompt_tokens={prompt}]",
        )
    priority = 0
    if "priority" in values:
        priority = _parse_int(
            path,
            line,
            mapping["priority"],
            values["priority"],
            low=I64_MIN,
            high=I64_MAX,
            what=f"a whole number in [{I64_MIN}, {I64_MAX}]",
        )
    if "prefix_tokens" in values:
        shared = _parse_int(
            path,
            line,
            mapping["prefix_tokens"],
            values["prefix_tokens"],
            low=0,
            high=MAX_TOKENS,
            what=f"a whole number of tokens in [0, {MAX_TOKENS}]",
        )
        if cols.prefix_tokens is None:
            cols.prefix_tokens = (line, shared)
        elif shared != cols.prefix_tokens[1]:
            first_line, first = cols.prefix_tokens
            raise TraceError(
                path,
                line,
                mapping["prefix_tokens"],
                f"is {shared}, but line {first_line} gave {first}: every row shares the same"
                " prefix length",
            )
    hashes: tuple[int, ...] = ()
    if "hash_ids" in values:
        hashes = _parse_hashes(path, line, mapping["hash_ids"], values["hash_ids"])
    cols.arrival.append(arrival)
    cols.prompt.append(prompt)
    cols.output.append(output)
    cols.cached.append(cached)
    cols.priority.append(priority)
    cols.hash_ids.append(hashes)
    for canon, column in (("session_id", cols.session), ("prefix_id", cols.prefix)):
        key = None
        if canon in values:
            raw = values[canon]
            if not isinstance(raw, (str, int)) or isinstance(raw, bool):
                raise TraceError(
                    path, line, mapping[canon], f"expected a name or number, got {_show(raw)}"
                )
            key = str(raw).strip()
        column.append(key)


def _parse_hashes(path: str, line: int, col: str, raw: object) -> tuple[int, ...]:
    """Block hashes: a JSON array of whole numbers, or (in CSV) such an array or numbers
    separated by spaces, ``;`` or ``|``."""
    items: list[object]
    if isinstance(raw, list):
        items = list(raw)
    elif isinstance(raw, str) and not isinstance(raw, Number):
        text = raw.strip()
        if text.startswith("["):
            try:
                parsed = json_loads(text)
            except ValueError:
                raise TraceError(path, line, col, f"not a JSON array: {_show(raw)}") from None
            if not isinstance(parsed, list):
                raise TraceError(path, line, col, f"not a JSON array: {_show(raw)}")
            items = list(parsed)
        else:
            items = [t for t in text.replace(";", " ").replace("|", " ").split() if t]
    else:
        raise TraceError(path, line, col, f"expected a list of block hashes, got {_show(raw)}")
    return tuple(
        _parse_int(
            path,
            line,
            f"{col}[{k}]",
            item,
            low=0,
            high=U64_MAX,
            what="a block hash, a whole number in [0, 2**64 - 1]",
        )
        for k, item in enumerate(items)
    )


def _read_csv(path: str, text: str, unit: float, cols: _Columns) -> None:
    reader = csv.reader(io.StringIO(text, newline=""))
    header: list[str] | None = None
    mapping: dict[str, str] = {}
    header_line = 0
    # csv refuses a field above 128 KiB, but an ignored column (a prompt's text) may be far
    # longer; no field can be longer than the file, which is already in memory.
    limit = csv.field_size_limit()
    raised = len(text) >= limit  # the limit is process-wide: touch it only when it matters
    if raised:
        csv.field_size_limit(len(text) + 1)
    try:
        for cells in reader:
            line = reader.line_num
            if not cells or all(not c.strip() for c in cells):
                continue
            if header is None:
                header = [c.strip() for c in cells]
                header_line = line
                mapping = _map_columns(path, line, header)
                continue
            if len(cells) != len(header):
                raise TraceError(
                    path,
                    line,
                    None,
                    f"row has {len(cells)} cells but the header (line {header_line})"
                    f" has {len(header)}",
                )
            _add_row(path, line, dict(zip(header, cells)), mapping, unit, cols)
    except csv.Error as err:
        raise TraceError(path, reader.line_num, None, f"malformed CSV: {err}") from None
    finally:
        if raised:
            csv.field_size_limit(limit)
    if header is None:
        raise TraceError(path, 0, None, "is empty: expected a header row and requests")


def _read_jsonl(path: str, text: str, unit: float, cols: _Columns) -> None:
    # JSON Lines ends a record at "\n" (or "\r\n") only: str.splitlines() would also
    # split inside a string holding U+2028, U+2029 or U+0085, which are valid there (and
    # json.dumps(ensure_ascii=False) writes them), and shift every later line number.
    for line, raw_line in enumerate(text.split("\n"), start=1):
        if raw_line.endswith("\r"):
            raw_line = raw_line[:-1]
        if not raw_line.strip(" \t"):
            continue
        try:
            obj = json_loads(raw_line)
        except json.JSONDecodeError as err:
            raise TraceError(
                path, line, None, f"is not valid JSON: {err.msg} (column {err.colno})"
            ) from None
        except DuplicateKey as err:
            raise TraceError(path, line, err.key, "appears twice in the object") from None
        if not isinstance(obj, dict):
            raise TraceError(path, line, None, f"expected a JSON object, got {_json_kind(obj)}")
        mapping = _map_columns(path, line, list(obj))
        _add_row(path, line, obj, mapping, unit, cols)


def load_trace(
    path: str | os.PathLike[str],
    *,
    time_unit: str = "s",
    format: str | None = None,
    hash_block: int = 512,
    prefix_tokens: int = 0,
) -> Workload:
    """Read a request trace from a CSV or JSON Lines file.

    Columns (CSV header or JSON keys): ``arrival_s``, ``prompt_tokens`` and
    ``output_tokens``, required; ``cached_tokens`` and ``priority``, optional; any other
    column is ignored. The names in :data:`FIELD_ALIASES` are accepted too. Arrival times
    are numbers >= 0 in ``time_unit`` (``"s"``, ``"ms"`` or ``"us"``), or ISO-8601 date-times
    in every row (then counted from the earliest; naive ones are read as UTC). The format
    is ``format`` (``"csv"`` or ``"jsonl"``), or else the file suffix (``.csv``,
    ``.jsonl``/``.ndjson``/``.json``), or else sniffed.

    Rows are kept in file order (request ``i`` is the ``i``-th row); the simulator admits
    them in arrival order. A malformed row raises :class:`TraceError` naming the file, line
    and field; no row is dropped, clamped or repaired.

    Numbers are read exactly from their text: token counts are whole numbers in
    ``[1, 2**63 - 1]`` (cached tokens up to the prompt; a priority is any signed 64-bit
    integer), and a count written with a fraction or an exponent (``1.5e3``) is trusted
    only up to 2**53, where a float still holds every whole number; arrival times are at
    most 2**53 in ``time_unit``. JSON Lines records end at ``\\n`` (or ``\\r\\n``) only, and
    an object that names a key twice is an error. A CSV column that is not read may be of
    any length.

    Sharing, for the serving scheduler's prefix cache: ``hash_ids`` (Mooncake's block
    hashes of the prompt, ``hash_block`` tokens each: equal hashes are equal blocks),
    ``session_id`` (rows of one session are turns of one token stream, each prompt
    extending the last) and ``prefix_id`` (rows with one id share their first
    ``prefix_tokens`` prompt tokens), all optional. A ``prefix_tokens`` column gives that
    length in the file (the same on every row that has it); the argument, when not 0,
    overrides it.
    """
    name = check_path("path", path)
    if not isinstance(time_unit, str) or time_unit not in _TIME_UNITS:
        raise ValueError(f"time_unit must be one of {sorted(_TIME_UNITS)}, got {show(time_unit)}")
    if format is not None and (not isinstance(format, str) or format not in ("csv", "jsonl")):
        raise ValueError(f"format must be None, 'csv' or 'jsonl', got {show(format)}")
    for what, value, low in (("hash_block", hash_block, 1), ("prefix_tokens", prefix_tokens, 0)):
        if type(value) is not int or not low <= value <= MAX_TOKENS:
            raise ValueError(f"{what} must be an int in [{low}, {MAX_TOKENS}], got {value!r}")
    data = _read_file(name)
    fmt = format
    text = None
    if fmt is None:
        suffix = os.path.splitext(name)[1].lower()
        if suffix == ".csv":
            fmt = "csv"
        elif suffix in (".jsonl", ".ndjson", ".json"):
            fmt = "jsonl"
        else:
            text = _decode(name, data)
            fmt = "jsonl" if text.lstrip().startswith("{") else "csv"
    unit = _TIME_UNITS[time_unit]
    fast = _read_fast(data, fmt, unit)
    if fast is not None:
        return _fast_workload(name, fast, hash_block, prefix_tokens)
    text = _decode(name, data) if text is None else text
    cols = _Columns()
    if fmt == "csv":
        _read_csv(name, text, unit, cols)
    elif fmt == "jsonl":
        _read_jsonl(name, text, unit, cols)
    else:  # pragma: no cover - format was checked above
        raise AssertionError(format)
    if not cols.arrival:
        raise TraceError(name, 0, None, "holds no requests")
    if cols.time_kind == "datetime":
        first = min(cols.arrival)
        cols.arrival = [a - first for a in cols.arrival]

    def dense(keys: list[str | None], none: int) -> tuple[int, ...]:
        index: dict[str, int] = {}
        out = []
        for k in keys:
            out.append(none if k is None else index.setdefault(k, len(index)))
        return tuple(out)

    has_session = any(k is not None for k in cols.session)
    has_prefix = any(k is not None for k in cols.prefix)
    if prefix_tokens == 0 and cols.prefix_tokens is not None:
        prefix_tokens = cols.prefix_tokens[1]
    if has_session:  # rows without a session are sessions of their own
        cols.session = [f"\0{i}" if k is None else k for i, k in enumerate(cols.session)]
    return Workload(
        arrival_s=tuple(cols.arrival),
        prompt_tokens=tuple(cols.prompt),
        output_tokens=tuple(cols.output),
        cached_tokens=tuple(cols.cached),
        priority=tuple(cols.priority),
        source=f"trace {name} ({len(cols.arrival)} requests)",
        group=dense(cols.prefix, -1) if has_prefix else (),
        session=dense(cols.session, -1) if has_session else (),
        hash_ids=tuple(cols.hash_ids) if any(cols.hash_ids) else (),
        prefix_tokens=prefix_tokens if has_prefix else 0,
        hash_block=hash_block,
    )


def _read_fast(data: bytes, fmt: str, unit: float) -> tuple[Any, ...] | None:
    """The columns of the trace ``data`` as the Rust core reads them, or ``None`` when it
    leaves the file to the Python reader above: any file that reader refuses, and the forms
    the core does not read (see ``rust/core/src/trace``). The Python reader is the
    reference, so its errors are the only ones raised."""
    try:
        from .._core import read_trace
    except ImportError:  # a source tree without the compiled core
        return None
    return read_trace(data, fmt, unit)


def _fast_workload(
    name: str, columns: tuple[Any, ...], hash_block: int, prefix_tokens: int
) -> Workload:
    """The workload of the columns :func:`_read_fast` returned, as :func:`load_trace`'s
    Python reader builds it from the same file."""
    arrival, prompt, output, cached, priority, group, session, hash_ids, shared = columns
    if prefix_tokens == 0 and shared is not None:
        prefix_tokens = shared
    return Workload(
        arrival_s=arrival,
        prompt_tokens=prompt,
        output_tokens=output,
        cached_tokens=cached,
        priority=priority,
        source=f"trace {name} ({len(arrival)} requests)",
        group=group,
        session=session,
        hash_ids=hash_ids,
        prefix_tokens=prefix_tokens if group else 0,
        hash_block=hash_block,
    )
