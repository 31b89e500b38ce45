"""The ``chunked-prefill`` command line: ``simulate`` replays a workload against an engine
latency model, ``plan`` shows the step table for some prompt lengths."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

__all__ = ["main", "plan_rows"]


def _backend(name: str) -> ModuleType:
    if name == "pure":
        from . import pure

        return pure
    from . import _core

    return _core


def _optional_int(text: str) -> int | None:
    return None if text.lower() == "none" else int(text)


def plan_rows(
    prompts: Sequence[int], config: Any, decode: int, backend: ModuleType
) -> list[tuple[int, int | None, int, int, bool, int]]:
    """Every step until all ``prompts`` (request ids 0, 1, ...) are prefilled, one row per
    chunk: ``(step, request, start, tokens, last_chunk, decode_tokens)``."""
    scheduler = backend.Scheduler(config)
    for request_id, total in enumerate(prompts):
        scheduler.enqueue(request_id, total)
    rows: list[tuple[int, int | None, int, int, bool, int]] = []
    while not scheduler.is_idle():
        step = scheduler.next_step(decode)
        for c in step.chunks:
            rows.append(
                (step.step_index, c.request_id, c.start, c.tokens, c.is_last, step.decode_tokens)
            )
    return rows


def _add_plan_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "plan",
        help="show the step table for some prompt lengths",
        description="Print the steps the scheduler plans for prompts of the given lengths "
        "(request ids 0, 1, ... in the order given), one row per prefill chunk.",
    )
    p.add_argument("prompts", nargs="+", type=int, metavar="TOKENS", help="prompt lengths")
    p.add_argument("--chunk-size", type=int, default=512)
    p.add_argument("--max-decode-tokens", type=int, default=128)
    p.add_argument("--token-budget", type=_optional_int, default=None, metavar="N|none")
    p.add_argument("--max-prefills-per-step", type=int, default=1)
    p.add_argument("--no-interleave", action="store_true", help="steps carry no decode tokens")
    p.add_argument(
        "--decode", type=int, default=0, metavar="N", help="decoding requests at every step"
    )
    p.add_argument("--backend", choices=["rust", "pure"], default="rust")
    p.set_defaults(func=_run_plan)


def _run_plan(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    backend = _backend(args.backend)
    try:
        config = backend.Config(
            chunk_size=args.chunk_size,
            max_decode_tokens=args.max_decode_tokens,
            interleave_decode=not args.no_interleave,
            token_budget=args.token_budget,
            max_prefills_per_step=args.max_prefills_per_step,
        )
        rows = plan_rows(args.prompts, config, args.decode, backend)
    except (ValueError, TypeError, OverflowError) as err:
        print(f"chunked-prefill plan: error: {err}", file=sys.stderr)
        return 2
    table = Table(title=repr(config))
    for name in ("step", "request", "start", "tokens", "last chunk", "decode tokens"):
        table.add_column(name, justify="right")
    for step, request, start, tokens, last, decode in rows:
        table.add_row(
            str(step), str(request), str(start), str(tokens), "yes" if last else "", str(decode)
        )
    Console(width=100).print(table)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``chunked-prefill``."""
    parser = argparse.ArgumentParser(
        prog="chunked-prefill", description="Chunked-prefill step planner for LLM serving."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    from .sim import cli as sim_cli

    sim_cli.add_parser(subparsers)
    _add_plan_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``chunked-prefill`` console script."""
    args = build_parser().parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
