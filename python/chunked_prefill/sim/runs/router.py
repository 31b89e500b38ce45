"""Fleets: N identical replicas behind a router (as ``rust/core/src/sim/router.rs``).

Each arriving request is assigned, at its arrival time, to one replica, seeing each as of
its last completed step:

- ``round-robin``: the k-th request in arrival order goes to replica ``k mod N``;
- ``least-loaded``: the replica with the fewest outstanding tokens (:func:`outstanding`);
- ``prefix-aware``: the replica whose prefix cache holds the longest prefix of the prompt
  (``ServingScheduler.cached_prefix_tokens``), ties by outstanding tokens; a request
  without token ids shares nothing and goes to the least-loaded replica.

Every rule is deterministic; remaining ties go to the lowest replica index.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence

__all__ = ["MAX_REPLICAS", "ROUTERS", "check_fleet", "outstanding", "pick"]

ROUTERS = ("round-robin", "least-loaded", "prefix-aware")
"""The routers' names, as ``--router`` and the ``router`` parameter spell them."""

MAX_REPLICAS = 4096
"""The most replicas: the loop looks at every replica at every event."""


def check_fleet(replicas: object, router: object) -> tuple[int, str]:
    """``(replicas, router)`` as plain values; ``ValueError`` (``TypeError`` for a
    non-integer count) naming a bad fleet."""
    if not isinstance(replicas, numbers.Integral) or isinstance(replicas, bool):
        raise TypeError(f"replicas must be an integer, got {type(replicas).__name__}")
    if not 1 <= int(replicas) <= MAX_REPLICAS:
        raise ValueError(f"replicas must be between 1 and {MAX_REPLICAS}, got {replicas}")
    if not isinstance(router, str) or router not in ROUTERS:
        raise ValueError(f"router must be one of {', '.join(ROUTERS)}, got {router!r}")
    return int(replicas), str(router)


def outstanding(prompt: int, output: int, computed: int, emitted: int) -> int:
    """A request's outstanding tokens, the least-loaded router's measure: its prompt tokens
    not yet computed (``computed`` goes back to 0 at a preemption) plus its output tokens
    not yet sampled. A replica's load is the sum over the requests routed to it and not
    finished, as of its last completed step."""
    return prompt - min(computed, prompt) + output - emitted


def pick(
    router: str,
    routed: int,
    loads: Sequence[int],
    cached: Callable[[int], int] | None,
) -> int:
    """The replica for the ``routed``-th request (0-based, arrival order), given each
    replica's load and, for ``prefix-aware``, ``cached(r)``: the leading prompt tokens
    replica ``r`` has cached (``None``: the request has no token ids)."""
    n = len(loads)
    if n == 1:
        return 0
    if router == "round-robin":
        return routed % n
    if router == "prefix-aware" and cached is not None:
        return min(range(n), key=lambda r: (-cached(r), loads[r], r))
    return min(range(n), key=lambda r: (loads[r], r))
