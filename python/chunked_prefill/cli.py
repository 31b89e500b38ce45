"""The ``chunked-prefill`` command line: ``simulate`` replays a workload against an engine
latency model, ``search`` finds each configuration's capacity under SLOs, ``plan`` shows the
step table for some prompt lengths, ``fit`` fits the engine model to measured steps,
``engines`` lists the roofline engine's models and GPUs.

Every bad input is one line ``chunked-prefill COMMAND: error: MESSAGE`` on stderr and exit
status 2; the message names the flag or argument, the value and the rule.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from importlib import import_module
from types import ModuleType
from typing import IO, Any, NoReturn

from ._args import U64_MAX, ArgumentParser, SubcommandParser, UsageError, int_flag, one_line
from ._process import run_process
from ._stop import stopping

__all__ = ["build_parser", "entry", "iter_plan_rows", "main", "plan_rows"]

PlanRow = tuple[int, "int | None", int, int, bool, int]


def _backend(name: str) -> ModuleType:
    if name == "pure":
        from . import pure

        return pure
    from . import _core

    return _core


def iter_plan_rows(
    prompts: Sequence[int], config: Any, decode: int, backend: ModuleType
) -> Iterator[tuple[int, int | None, int, int, bool, int]]:
    """Every step until all ``prompts`` (request ids 0, 1, ...) are prefilled, one row per
    chunk, ``(step, request, start, tokens, last_chunk, decode_tokens)``, as they are
    planned (a long plan is never held in memory)."""
    scheduler = backend.Scheduler(config)
    for request_id, total in enumerate(prompts):
        scheduler.enqueue(request_id, total)
    while not scheduler.is_idle():
        step = scheduler.next_step(decode)
        for c in step.chunks:
            yield (step.step_index, c.request_id, c.start, c.tokens, c.is_last, step.decode_tokens)


def plan_rows(
    prompts: Sequence[int], config: Any, decode: int, backend: ModuleType
) -> list[tuple[int, int | None, int, int, bool, int]]:
    """:func:`iter_plan_rows` as a list."""
    return list(iter_plan_rows(prompts, config, decode, backend))


_COLUMNS = ("step", "request", "start", "tokens", "last chunk", "decode tokens")


def _add_plan_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "plan",
        help="show the step table for some prompt lengths",
        description="Print the steps the scheduler plans for prompts of the given lengths "
        "(request ids 0, 1, ... in the order given), one row per prefill chunk. Rows are "
        "printed as they are planned, so a long plan streams (pipe it to head to cut it "
        "short). Counts are whole numbers up to 2**64 - 1. Every bad input is one line "
        "'chunked-prefill plan: error: ...' on stderr and exit status 2.",
    )
    count = int_flag(1, U64_MAX)
    p.add_argument(
        "prompts", nargs="+", type=count, metavar="TOKENS", help="prompt lengths, in tokens"
    )
    p.add_argument(
        "--chunk-size",
        type=count,
        default=512,
        metavar="N",
        help="most prompt tokens per request per step (default: %(default)s)",
    )
    p.add_argument(
        "--max-decode-tokens",
        type=count,
        default=128,
        metavar="N",
        help="most decode tokens per step (default: %(default)s)",
    )
    p.add_argument(
        "--token-budget",
        type=int_flag(1, U64_MAX, none=True),
        default=None,
        metavar="N|none",
        help="tokens (decode + prefill) per step; 'none' plans one chunk per step (default: none)",
    )
    p.add_argument(
        "--max-prefills-per-step",
        type=count,
        default=1,
        metavar="N",
        help="requests that may get a chunk in one step; above 1 needs --token-budget"
        " (default: %(default)s)",
    )
    p.add_argument(
        "--no-interleave",
        action="store_true",
        help="steps carry no decode tokens (default: decode tokens share each step)",
    )
    p.add_argument(
        "--decode",
        type=int_flag(0, U64_MAX),
        default=0,
        metavar="N",
        help="decoding requests at every step (default: %(default)s)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help='print one JSON document, {"config": {...}, "rows": [{"step": ...,'
        ' "request": ..., "start": ..., "tokens": ..., "last_chunk": ...,'
        ' "decode_tokens": ...}, ...]}, streamed row by row',
    )
    p.add_argument(
        "--backend",
        choices=["rust", "pure"],
        default="rust",
        help="scheduler implementation (default: %(default)s)",
    )
    p.set_defaults(func=_run_plan)


def _run_plan(args: argparse.Namespace) -> int:
    prog = "chunked-prefill plan"
    backend = _backend(args.backend)
    try:
        config = backend.Config(
            chunk_size=args.chunk_size,
            max_decode_tokens=args.max_decode_tokens,
            interleave_decode=not args.no_interleave,
            token_budget=args.token_budget,
            max_prefills_per_step=args.max_prefills_per_step,
        )
    except ValueError as err:
        flags = (
            f"--chunk-size {args.chunk_size} --max-decode-tokens {args.max_decode_tokens}"
            f" --token-budget {'none' if args.token_budget is None else args.token_budget}"
            f" --max-prefills-per-step {args.max_prefills_per_step}"
            + (" --no-interleave" if args.no_interleave else "")
        )
        print(f"{prog}: error: the configuration {flags}: {one_line(str(err))}", file=sys.stderr)
        return 2
    rows = iter_plan_rows(args.prompts, config, args.decode, backend)
    out = sys.stdout
    try:
        if args.json:
            _write_json(out, config, rows)
        else:
            _write_table(out, config, args.prompts, rows)
        out.flush()
    except BrokenPipeError:
        # The reader (head, less) stopped reading: not an error. Point stdout at devnull
        # so that the interpreter's final flush does not raise again.
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    return 0


def _config_dict(config: Any) -> dict[str, Any]:
    return {
        "chunk_size": config.chunk_size,
        "max_decode_tokens": config.max_decode_tokens,
        "interleave_decode": config.interleave_decode,
        "token_budget": config.token_budget,
        "max_prefills_per_step": config.max_prefills_per_step,
    }


def _write_json(out: IO[str], config: Any, rows: Iterator[PlanRow]) -> None:
    out.write('{"config": ' + json.dumps(_config_dict(config)) + ', "rows": [')
    sep = "\n  "
    for step, request, start, tokens, last, decode in rows:
        row = {
            "step": step,
            "request": request,
            "start": start,
            "tokens": tokens,
            "last_chunk": last,
            "decode_tokens": decode,
        }
        out.write(sep + json.dumps(row))
        sep = ",\n  "
    out.write("\n]}\n")


def _write_table(
    out: IO[str], config: Any, prompts: Sequence[int], rows: Iterator[PlanRow]
) -> None:
    # Column widths come from bounds known before the first row (no value can be wider),
    # so rows are printed as they are planned instead of after the whole plan.
    longest = max(prompts)
    steps = sum(prompts)  # every step prefills at least one token
    widths = [
        max(len(_COLUMNS[0]), len(str(steps))),
        max(len(_COLUMNS[1]), len(str(len(prompts) - 1))),
        max(len(_COLUMNS[2]), len(str(longest))),
        max(len(_COLUMNS[3]), len(str(min(config.chunk_size, longest)))),
        len(_COLUMNS[4]),
        max(len(_COLUMNS[5]), len(str(config.max_decode_tokens))),
    ]
    out.write(repr(config) + "\n")
    out.write("  ".join(name.rjust(w) for name, w in zip(_COLUMNS, widths)).rstrip() + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")
    for step, request, start, tokens, last, decode in rows:
        cells = (
            str(step),
            str(request),
            str(start),
            str(tokens),
            "yes" if last else "",
            str(decode),
        )
        out.write("  ".join(c.rjust(w) for c, w in zip(cells, widths)) + "\n")


def _version() -> str:
    from . import BACKEND, __version__

    return f"chunked-prefill {__version__} ({BACKEND} backend)"


# The subcommands in the order ``--help`` lists them; all but ``plan`` have their module in
# ``sim/cli``, imported only when its parser is added.
_SUBCOMMANDS = ("simulate", "search", "plan", "fit", "engines")


def _add_subcommand(name: str, subparsers: Any) -> None:
    if name == "plan":
        _add_plan_parser(subparsers)
    else:
        import_module(f"{__package__}.sim.cli.{name}").add_parser(subparsers)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of ``chunked-prefill``; given ``command``, one of its
    subcommands, the parser of that subcommand alone, which parses its command lines as the
    whole parser does without importing the other subcommands' modules (about 40 ms of a
    ``simulate`` process)."""
    parser = ArgumentParser(
        prog="chunked-prefill",
        description="Chunked-prefill step planner for LLM serving. Every bad input is one"
        " line 'chunked-prefill COMMAND: error: ...' on stderr and exit status 2.",
    )
    parser.add_argument("--version", action="version", version=_version())
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=SubcommandParser
    )
    for name in _SUBCOMMANDS:
        if command in (None, name):
            _add_subcommand(name, subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``) and return the exit
    status, as the ``chunked-prefill`` console script does in a process of its own
    (:func:`entry`)."""
    return stopping("chunked-prefill", lambda: _main(argv))


def entry() -> NoReturn:
    """Entry point of the ``chunked-prefill`` console script and ``python -m
    chunked_prefill``: :func:`main` as a whole process, which ends with its status
    (:func:`~._process.run_process`)."""
    run_process(main)


def _main(argv: Sequence[str] | None) -> int:
    given = sys.argv[1:] if argv is None else list(argv)
    # A command line that starts with a subcommand's name is that subcommand's alone.
    command = given[0] if given and given[0] in _SUBCOMMANDS else None
    args = build_parser(command).parse_args(given)
    prog = f"chunked-prefill {args.command}"
    return stopping(prog, lambda: _command(args, prog))


def _command(args: argparse.Namespace, prog: str) -> int:
    try:
        result: int = args.func(args)
    except UsageError as err:
        print(f"{prog}: error: {one_line(str(err))}", file=sys.stderr)
        return 2
    return result


if __name__ == "__main__":
    entry()
