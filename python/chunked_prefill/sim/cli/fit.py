"""``chunked-prefill fit``: calibrate the linear model, or with ``--model``/``--gpu`` the
roofline, from measured steps (:mod:`..engines.fit`, :mod:`..engines.fit_roofline`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ..._args import UsageError, float_flag, input_file, int_flag, name_flag
from ..._output import check_output, replacing
from ..engines.gpus import GPUS
from ..engines.models.presets import MODELS
from .flags.roofline import SOFTWARE_FLAGS, add_software_flags

__all__ = ["add_parser", "run"]

PROG = "chunked-prefill fit"


def add_parser(subparsers: Any) -> None:
    """Add the ``fit`` subcommand."""
    p = subparsers.add_parser(
        "fit",
        help="fit the engine model's coefficients to measured steps",
        description="Fit the step-latency model's coefficients (t_min_s, c0_s, c_tok_s,"
        " c_attn_s, c_kv_s, c_chunk_sq_s) by least squares to a CSV of measured steps with the"
        " columns prefill_tokens, decode_tokens, attention_pairs, decode_context_tokens and"
        " duration_s (and prefill_chunk_sq, without which c_chunk_sq_s stays 0), and report"
        " the fit's relative error per step; with --model and --gpu, fit the roofline's"
        " efficiencies and overheads for that model and GPU instead (docs/engines.md). A poor"
        " fit or a term the steps cannot determine is a warning on stderr. Every bad input is"
        f" one line '{PROG}: error: ...' on stderr and exit status 2.",
    )
    p.add_argument("steps", type=input_file, metavar="STEPS.csv", help="the measured steps")
    p.add_argument(
        "--out",
        metavar="PROFILE",
        help="write the fitted coefficients as a profile for 'simulate --profile'"
        " (TOML when it ends in .toml, else JSON)",
    )
    p.add_argument(
        "--name",
        default=None,
        metavar="NAME",
        help="the fitted linear engine's name (default: fitted (STEPS.csv))",
    )
    p.add_argument(
        "--max-error",
        type=float_flag(0.0, 1e9, what="a percentage"),
        metavar="PCT",
        help="exit with status 1, writing no --out, when the fitted model's median per-step"
        " error is above PCT percent (default: only warn when it is above 10 %%)",
    )
    p.add_argument("--json", action="store_true", help="print the fit as one JSON object")
    g = p.add_argument_group("roofline (fit the roofline of a model on a GPU instead)")
    g.add_argument(
        "--model",
        type=name_flag("a preset, a Hugging Face id or a config.json"),
        metavar="NAME|config.json",
        help=f"the model the steps ran: a Hugging Face config.json or one of {', '.join(MODELS)}",
    )
    g.add_argument(
        "--gpu",
        type=name_flag("a preset or a profile file"),
        metavar="NAME|FILE",
        help=f"the GPU they ran on: a profile (.toml/.json) or one of {', '.join(GPUS)}",
    )
    g.add_argument(
        "--tp",
        type=int_flag(1, 1024),
        metavar="N",
        help="tensor-parallel degree (default: 1; needs --model)",
    )
    add_software_flags(g)
    p.set_defaults(func=run)


def _check_flags(args: argparse.Namespace) -> None:
    if args.model is None:
        for flag, name in (("--gpu", "gpu"), ("--tp", "tp"), *SOFTWARE_FLAGS):
            if getattr(args, name) is not None:
                raise UsageError(f"argument {flag}: needs --model")
        return
    if args.gpu is None:
        raise UsageError(f"argument --model: needs --gpu (one of {', '.join(GPUS)}, or a file)")
    if args.name is not None:
        raise UsageError(
            "argument --name: not with --model (a roofline is named by its model and GPU)"
        )


def run(args: argparse.Namespace) -> int:
    """Run ``fit`` on parsed ``args``; returns the exit status."""
    from ..engines import fit as fit_module
    from ..workload.trace import TraceError

    _check_flags(args)
    if args.out is not None:
        check_output(args.out, "--out")
    try:
        steps = fit_module.read_steps_csv(args.steps)
    except TraceError as err:
        raise UsageError(str(err)) from None
    if args.model is not None:
        return _run_roofline(args, steps)
    name = args.name or f"fitted ({os.path.basename(args.steps)})"
    try:
        fit = fit_module.fit_steps(steps, name)
    except ValueError as err:
        raise UsageError(f"{args.steps}: {err}") from None
    failed = _failed(args, fit.error_p50)
    if args.out is not None and not failed:
        toml = args.out.lower().endswith(".toml")
        _write(args.out, lambda: fit_module.profile_text(fit.engine, toml))
    errors = _errors(fit)
    warnings = fit.warnings
    if args.json:
        doc = {
            "engine": fit.engine.to_dict(),
            "steps": fit.steps,
            "floor_steps": fit.floor_steps,
            "unidentified": list(fit.unidentified),
            "relative_error": errors,
            "warnings": warnings,
        }
        return _finish(args, doc, warnings, failed)
    table = _table(fit.engine.name, ("coefficient", "value"))
    for key, value in fit.engine.to_dict().items():
        if key != "name":
            kept = " (not identified, kept at 0)" if key in fit.unidentified else ""
            table.add_row(key, f"{value:.4g}{kept}")
    for q, e in errors.items():
        table.add_row(f"error {q}", f"{100 * e:.2f} %")
    head = (
        f"{fit.steps} steps, {fit.floor_steps} on the floor (t_min_s); error is"
        " |predicted - measured| / measured per step"
    )
    return _print(args, head, table, warnings, failed)


def _run_roofline(args: argparse.Namespace, steps: Any) -> int:
    from ..engines.fit_roofline import fit_roofline, roofline_profile_text
    from .flags.roofline import software_options

    try:
        fit = fit_roofline(steps, args.model, args.gpu, args.tp or 1, **software_options(args))
    except ValueError as err:
        raise UsageError(f"arguments --model/--gpu/--tp: {err}") from None
    failed = _failed(args, fit.error_p50)
    if args.out is not None and not failed:
        toml = args.out.lower().endswith(".toml")
        _write(args.out, lambda: roofline_profile_text(fit, toml))
    errors = _errors(fit)
    warnings = fit.warnings
    if args.json:
        doc = {
            "kind": "roofline",
            "model": fit.model,
            "gpu": fit.gpu,
            "tp": fit.tp,
            "serving_engine": fit.serving_engine,
            "attention_backend": fit.attention_backend,
            "fitted": fit.fields,
            "preset": fit.preset,
            "engine": fit.engine.to_dict(),
            "steps": fit.steps,
            "regimes": fit.regimes,
            "unidentified": [{"term": t, "why": w} for t, w in fit.unidentified],
            "relative_error": errors,
            "warnings": warnings,
        }
        return _finish(args, doc, warnings, failed)
    table = _table(fit.engine.name, ("field", "preset", "fitted"))
    unidentified = {t for t, _ in fit.unidentified}
    for key, value in fit.fields.items():
        kept = " (not identified)" if key in unidentified else ""
        if key in ("layer_overhead_s", "step_overhead_s") and "overhead_s" in unidentified:
            kept = " (not identified)"
        table.add_row(key, f"{fit.preset[key]:.4g}", f"{value:.4g}{kept}")
    for q, e in errors.items():
        table.add_row(f"error {q}", "", f"{100 * e:.2f} %")
    r = fit.regimes
    head = (
        f"{fit.steps} steps: {r['compute']} compute-bound, {r['memory']} memory-bound,"
        f" {r['launch']} launch-bound; error is |predicted - measured| / measured per step"
    )
    return _print(args, head, table, warnings, failed)


def _failed(args: argparse.Namespace, p50: float) -> bool:
    return args.max_error is not None and 100 * p50 > args.max_error


def _errors(fit: Any) -> dict[str, float]:
    return {"p50": fit.error_p50, "p90": fit.error_p90, "p99": fit.error_p99, "max": fit.error_max}


def _write(path: str, text: Any) -> None:
    try:
        with replacing(path) as fh:
            fh.write(text())
    except OSError as err:
        raise UsageError(f"argument --out: cannot write {path}: {err.strerror}") from None


def _warn(args: argparse.Namespace, warnings: list[str], failed: bool) -> int:
    """Print the warnings, and the --max-error failure, on stderr; the exit status."""
    for w in warnings:
        print(f"{PROG}: warning: {w}", file=sys.stderr)
    if failed:
        print(
            f"{PROG}: error: the median per-step error is above --max-error"
            f" {args.max_error:g} %" + (f"; {args.out} not written" if args.out else ""),
            file=sys.stderr,
        )
        return 1
    return 0


def _finish(
    args: argparse.Namespace, doc: dict[str, Any], warnings: list[str], failed: bool
) -> int:
    print(json.dumps(doc))
    sys.stdout.flush()
    return _warn(args, warnings, failed)


def _table(title: str, columns: tuple[str, ...]) -> Any:
    from rich.table import Table

    table = Table(title=title)
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i == 0 else "right")
    return table


def _print(
    args: argparse.Namespace, head: str, table: Any, warnings: list[str], failed: bool
) -> int:
    from ..._stop import pipe_console as Console

    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=100)
    console.print(head)
    console.print(table)
    if args.out is not None and not failed:
        console.print(
            f"wrote {args.out}; use it with: chunked-prefill simulate --profile {args.out}"
        )
    sys.stdout.flush()
    return _warn(args, warnings, failed)
