"""Workloads the simulator replays: the :class:`Workload` column store (:mod:`.types`), the
embedded synthetic chat workload (:mod:`.synthetic`), trace files (:mod:`.trace`) and the
token ids that give requests prefix identity (:mod:`.tokens`).

The names of the former ``chunked_prefill.sim.workload`` module are importable from here,
loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .synthetic import (
        DEFAULT_INPUT_LEN,
        DEFAULT_OUTPUT_LEN,
        DEFAULT_RANGE_RATIO,
        DEFAULT_RATE,
        DEFAULT_REQUESTS,
        LENGTH_DISTS,
        MAX_REQUESTS,
        MAX_SAMPLED,
        TURN_GAP_S,
        ChatWorkloadSpec,
        check_lengths,
        default_workload,
    )
    from .trace import (
        FIELD_ALIASES,
        TraceError,
        load_trace,
        read_text,
    )
    from .types import (
        I64_MAX,
        I64_MIN,
        MAX_ARRIVAL_S,
        MAX_TOKENS,
        U64_MAX,
        Request,
        Workload,
    )
else:
    from .._lazy import lazy_exports

    __getattr__ = lazy_exports(
        __name__,
        {
            ".types": (
                "I64_MAX",
                "I64_MIN",
                "MAX_ARRIVAL_S",
                "MAX_TOKENS",
                "Request",
                "U64_MAX",
                "Workload",
            ),
            ".synthetic": (
                "ChatWorkloadSpec",
                "DEFAULT_INPUT_LEN",
                "DEFAULT_OUTPUT_LEN",
                "DEFAULT_RANGE_RATIO",
                "DEFAULT_RATE",
                "DEFAULT_REQUESTS",
                "LENGTH_DISTS",
                "MAX_REQUESTS",
                "MAX_SAMPLED",
                "TURN_GAP_S",
                "check_lengths",
                "default_workload",
            ),
            ".trace": (
                "FIELD_ALIASES",
                "TraceError",
                "load_trace",
                "read_text",
            ),
        },
    )

__all__ = [
    "DEFAULT_INPUT_LEN",
    "DEFAULT_OUTPUT_LEN",
    "DEFAULT_RANGE_RATIO",
    "DEFAULT_RATE",
    "DEFAULT_REQUESTS",
    "FIELD_ALIASES",
    "I64_MAX",
    "I64_MIN",
    "LENGTH_DISTS",
    "MAX_ARRIVAL_S",
    "MAX_REQUESTS",
    "MAX_SAMPLED",
    "MAX_TOKENS",
    "TURN_GAP_S",
    "U64_MAX",
    "ChatWorkloadSpec",
    "Request",
    "TraceError",
    "Workload",
    "check_lengths",
    "default_workload",
    "load_trace",
    "read_text",
]
