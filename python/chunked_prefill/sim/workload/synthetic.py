"""The embedded synthetic chat workload and the vLLM-style length distributions
(:func:`default_workload`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from .._check import count, kind, real, show
from .types import I64_MAX, MAX_ARRIVAL_S, MAX_TOKENS, U64_MAX, Workload, _ColumnStats

MAX_SAMPLED = 2**53
"""The largest length :class:`ChatWorkloadSpec` draws (its lengths are drawn as floats)."""


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
    give the same workload on every machine (the plain chat workload is drawn by the core
    when it is built, which reproduces numpy's draws exactly without importing numpy).
    Lengths are drawn before arrival gaps, so a different ``rate`` keeps every request's
    lengths and only stretches the arrival times.

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
    rate_text = "inf" if math.isinf(rate) else f"{rate:g}"
    lengths = (input_len, output_len, length_dist, range_ratio)
    shared = (prefix_tokens, prefix_groups, turns)
    columns, plain, stats, kind_text = _columns(seed, spec, requests, rate, lengths, shared)
    parts = [f"{requests} requests", f"{rate_text} req/s", f"seed {seed}"]
    if kind_text != "chat":
        parts.append(kind_text)
    if prefix_tokens:
        parts.append(f"{prefix_tokens}-token prefix x {prefix_groups} group(s)")
    if turns > 1:
        parts.append(f"{turns} turns")
    workload = _built(columns, plain, f"synthetic chat workload ({', '.join(parts)})", stats)
    return workload.scaled(prompt_scale, output_scale)


def _columns(
    seed: int,
    spec: ChatWorkloadSpec,
    requests: int,
    rate: float,
    lengths: tuple[int | None, int | None, str, float | None],
    shared: tuple[int, int, int],
) -> tuple[dict[str, Any], bool, _ColumnStats | None, str]:
    """:func:`default_workload`'s columns, whether they are known in range, their figures
    when known, and the description of their lengths."""
    input_len, output_len, length_dist, _ = lengths
    prefix_tokens, prefix_groups, turns = shared
    kind_text = "chat"
    if length_dist == "chat" and (input_len is not None or output_len is not None):
        kind_text = (
            f"chat, mean prompt {input_len or 'as drawn'}, output {output_len or 'as drawn'}"
        )
    if length_dist == "chat" and not prefix_tokens and turns == 1:
        return (*_plain_chat_columns(seed, spec, requests, rate), kind_text)
    arrivals, prompt, output = _chat_draws(seed, spec, requests, rate)
    if length_dist != "chat":
        prompt, output, kind_text = _other_lengths(seed, requests, *lengths)
    if prefix_tokens or turns > 1:
        columns = _shared_workload(
            requests, rate, seed, prompt, output, arrivals, prefix_tokens, prefix_groups, turns
        )
        return columns, False, None, kind_text
    return (*_plain_columns(arrivals, prompt, output), kind_text)


def _plain_chat_columns(
    seed: int, spec: ChatWorkloadSpec, requests: int, rate: float
) -> tuple[dict[str, Any], bool, _ColumnStats]:
    """The columns of the chat workload without prefixes or sessions, as
    :func:`_plain_columns` gives them: drawn in the core when it is built (the very numbers
    numpy draws, without importing numpy: its import is a fifth of a ``simulate`` run, and
    the run can import it meanwhile), else with numpy (the core not built, or
    ``CHUNKED_PREFILL_BACKEND=pure``)."""
    from ..runs.backend import backend_name, resolve_backend

    core = resolve_backend("auto")
    if backend_name(core) != "rust":
        return _plain_columns(*_chat_draws(seed, spec, requests, rate))
    fields = (
        spec.chat_prompt_median,
        spec.chat_prompt_sigma,
        spec.long_fraction,
        spec.long_prompt_median,
        spec.long_prompt_sigma,
        float(spec.max_prompt_tokens),
        spec.output_median,
        spec.output_sigma,
        float(spec.max_output_tokens),
    )
    arrivals, prompt, output, figures, in_range = core.chat_workload(
        seed, requests, rate, fields, max_arrival_s=MAX_ARRIVAL_S, max_tokens=MAX_TOKENS
    )
    columns = {"arrival_s": arrivals, "prompt_tokens": prompt, "output_tokens": output}
    longest_prompt, longest_output, longest_at, total_prompt, total_output = figures
    stats = _ColumnStats(
        longest_prompt, longest_output, longest_at, total_prompt, total_output, False
    )
    return columns, in_range, stats


def _chat_draws(
    seed: int, spec: ChatWorkloadSpec, requests: int, rate: float
) -> tuple[Any, Any, Any]:
    """The chat workload's arrival times, prompt and output lengths (numpy arrays), drawn
    from ``numpy.random.default_rng(seed)``: the lengths (:func:`_chat_lengths`), then the
    arrival gaps."""
    import numpy as np

    rng = np.random.default_rng(seed)
    prompt, output = _chat_lengths(rng, spec, requests)
    gaps = rng.standard_exponential(requests)
    arrivals = np.zeros(requests) if math.isinf(rate) else np.cumsum(gaps / rate)
    return arrivals, prompt, output


def _array_stats(prompt: Any, output: Any) -> _ColumnStats:
    """The column figures of the drawn length arrays (no priorities), as
    :meth:`_ColumnStats.of` finds them on the columns, without a pass over Python ints."""
    if len(output) == 0:
        return _ColumnStats(0, 0, 0, 0, 0, False)
    at = int(output.argmax())
    longest, longest_prompt = int(output[at]), int(prompt.max())
    total_prompt, total_output = _exact_sum(prompt, longest_prompt), _exact_sum(output, longest)
    return _ColumnStats(longest_prompt, longest, at, total_prompt, total_output, False)


def _exact_sum(values: Any, largest: int) -> int:
    """The sum of an ``int64`` array of positive values whose largest is ``largest``:
    numpy's, exact unless it could pass 2**63 - 1; then Python's ints sum them."""
    if largest * len(values) <= I64_MAX:
        return int(values.sum())
    return sum(values.tolist())


def _plain_columns(
    arrivals: Any, prompt: Any, output: Any
) -> tuple[dict[str, Any], bool, _ColumnStats]:
    """The columns of a workload without prefixes or sessions from the drawn arrays,
    whether they pass the :class:`Workload` checks (:func:`_plain_in_range`), and their
    figures."""
    import numpy as np

    arrivals = arrivals.astype(np.float64, copy=False)
    prompt = prompt.astype(np.int64, copy=False)
    output = output.astype(np.int64, copy=False)
    columns = {
        # tolist() gives Python floats in one C loop.
        "arrival_s": tuple(arrivals.tolist()),
        "prompt_tokens": shared_ints(prompt),
        "output_tokens": shared_ints(output),
    }
    return columns, _plain_in_range(arrivals, prompt, output), _array_stats(prompt, output)


def _built(
    columns: dict[str, Any], plain: bool, source: str, stats: _ColumnStats | None
) -> Workload:
    """The workload of ``columns``; ``plain`` ones, found in range on their arrays, skip the
    constructor's whole-column checks of the same values (a twentieth of ``simulate``),
    which would find nothing. ``stats``, when given, are the columns' figures, kept."""
    if not plain:
        workload = Workload(**columns, source=source)
    else:
        zeros = (0,) * len(columns["arrival_s"])
        workload = Workload._of_checked(
            **columns, cached_tokens=zeros, priority=zeros, source=source
        )
    if stats is not None:
        workload._keep_stats(stats)
    return workload


def _plain_in_range(arrivals: Any, prompt: Any, output: Any) -> bool:
    """Whether the columns the arrays give (``float64`` and ``int64``, whose ``tolist()`` is
    Python floats and ints) pass the :class:`Workload` checks, told on the arrays: arrivals
    in ``[0, MAX_ARRIVAL_S]`` (NaN fails both comparisons), lengths in ``[1, MAX_TOKENS]``.
    Else the constructor checks them and names the first offender."""
    return bool(
        arrivals.min() >= 0
        and arrivals.max() <= MAX_ARRIVAL_S
        and prompt.min() >= 1
        and output.min() >= 1
        and prompt.max() <= MAX_TOKENS
        and output.max() <= MAX_TOKENS
    )


def shared_ints(values: Any) -> tuple[int, ...]:
    """The integers of the 1-D array ``values`` as a tuple whose equal values are one object.

    Lengths repeat (a million drawn prompts take a few thousand values): a tuple of its own
    int objects costs 36 bytes a request, one of shared objects 8. Lengths no larger than
    their count are picked in C from one list of every int up to the largest; others are
    shared through a dict.
    """
    import operator

    items = values.tolist()
    if len(items) < 2:
        return tuple(items)
    largest = max(items)
    if min(items) >= 0 and largest <= len(items):
        picked: tuple[int, ...] = operator.itemgetter(*items)(list(range(largest + 1)))
        return picked
    seen: dict[int, int] = {}
    return tuple([seen.setdefault(item, item) for item in items])


def _chat_lengths(rng: Any, spec: ChatWorkloadSpec, requests: int) -> tuple[Any, Any]:
    """Prompt and output lengths of the chat workload, drawn from ``rng`` before the
    arrival gaps (so that a different rate keeps every request's lengths)."""
    import numpy as np

    # In place where it can be: a million requests' temporaries stay in the heap after
    # they are freed, and the run comes on top of them.
    is_long = rng.random(requests) < spec.long_fraction
    prompt = rng.lognormal(math.log(spec.chat_prompt_median), spec.chat_prompt_sigma, requests)
    long = rng.lognormal(math.log(spec.long_prompt_median), spec.long_prompt_sigma, requests)
    np.copyto(prompt, long, where=is_long)
    del long, is_long
    np.clip(np.rint(prompt, out=prompt), 1, spec.max_prompt_tokens, out=prompt)
    output = rng.lognormal(math.log(spec.output_median), spec.output_sigma, requests)
    return prompt, np.clip(np.rint(output, out=output), 1, spec.max_output_tokens, out=output)


def _other_lengths(
    seed: int,
    requests: int,
    input_len: int | None,
    output_len: int | None,
    length_dist: str,
    range_ratio: float | None,
) -> tuple[Any, Any, str]:
    """Prompt and output lengths of a ``fixed``, ``uniform`` or ``exponential`` workload
    (their own generator, so the arrivals stay the chat workload's), and its description."""
    import numpy as np

    lengths = np.random.default_rng([seed, 24])
    x_in = DEFAULT_INPUT_LEN if input_len is None else input_len
    x_out = DEFAULT_OUTPUT_LEN if output_len is None else output_len
    ratio = DEFAULT_RANGE_RATIO if range_ratio is None else range_ratio
    prompt = _draw_lengths(lengths, requests, x_in, length_dist, ratio, 1)
    output = _draw_lengths(lengths, requests, x_out, length_dist, ratio, 1)
    shape = f" (range ratio {ratio:g})" if length_dist == "uniform" else ""
    return prompt, output, f"{length_dist} lengths{shape}: prompt {x_in}, output {x_out}"


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
