"""The fleet flags, ``--replicas N`` and ``--router NAME``, for any command that simulates
the serving scheduler (``chunked-prefill simulate``, and ``search``)."""

from __future__ import annotations

import argparse

from ...._args import int_flag
from ...runs.router import MAX_REPLICAS, ROUTERS

__all__ = ["DEFAULT_REPLICAS", "DEFAULT_ROUTER", "add_fleet_arguments", "fleet_of"]

DEFAULT_REPLICAS = 1
DEFAULT_ROUTER = "round-robin"


def add_fleet_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``fleet`` group; both flags default to ``None`` (not given), so that a
    command can refuse them where they do not apply (:func:`fleet_of` fills the defaults)."""
    g = parser.add_argument_group(
        "fleet (serving only; latency, throughput and goodput are the fleet's)"
    )
    g.add_argument(
        "--replicas",
        type=int_flag(1, MAX_REPLICAS),
        metavar="N",
        help=f"identical replicas, each its own serving scheduler, KV pool and engine, 1 to"
        f" {MAX_REPLICAS} (default: {DEFAULT_REPLICAS})",
    )
    g.add_argument(
        "--router",
        choices=ROUTERS,
        help="how arriving requests are assigned: round-robin (in arrival order),"
        " least-loaded (fewest outstanding tokens), prefix-aware (longest cached prefix of"
        f" the prompt, ties by load) (default: {DEFAULT_ROUTER})",
    )


def fleet_of(args: argparse.Namespace) -> tuple[int, str]:
    """``(replicas, router)`` of parsed arguments, defaults filled in."""
    replicas = args.replicas if args.replicas is not None else DEFAULT_REPLICAS
    router = args.router if args.router is not None else DEFAULT_ROUTER
    return replicas, router
