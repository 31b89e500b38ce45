"""Issue 25's measurements on this checkout and on a git revision, side by side in one run.

Usage (from the repository root, with this checkout's package importable, e.g. after
``maturin develop --release`` or with ``PYTHONPATH=python`` beside a built ``_core``)::

    python scripts/compare_revision.py                 # against the default revision, below
    python scripts/compare_revision.py bc907cc         # against a commit, tag or branch
    python scripts/compare_revision.py --step --rounds 3
    python scripts/compare_revision.py --revision-pythonpath ../base/python bc907cc

The revision defaults to the newest tag reachable from HEAD (a release), else
``origin/main``, else ``main``: a branch is measured against what it would merge into.
Issue 25's baseline, the release its goals are set against, is ``bc907cc``; while no tag
marks it, name it. Its package is built once per commit: a detached
``git worktree`` in a temporary directory, ``maturin build --release`` (``CARGO_TARGET_DIR``
shared by every revision under the cache, so a second revision reuses the compiled
dependencies) and ``pip install --no-deps --target`` into ``CACHE/<commit>/site``; a later
run finds it there and builds nothing. The cache is ``--cache-dir``, by default
``$XDG_CACHE_HOME/chunked-prefill-compare`` (``~/.cache/...``); the script prints where.
``--revision-pythonpath DIR`` skips the build and imports the revision's package from
``DIR`` (a checkout's ``python/`` with its compiled ``_core``).

Both sides run in child processes of this interpreter, with the same numpy and the same
command lines; only the ``chunked_prefill`` they import differs (this checkout's: whatever
``import chunked_prefill`` finds here; the revision's: ``PYTHONPATH`` set to its directory).
Each command runs once untimed first, on each side, its bytecode written under
``CACHE/pycache`` for both (``PYTHONPYCACHEPREFIX``, whatever ``PYTHONDONTWRITEBYTECODE``
says). Then the runs alternate, revision then checkout, then checkout then revision
(ABBA), so that the load of a shared machine falls on both alike, and the table gives
medians of the rounds and the gain of the checkout over the revision (above 1: the
checkout is faster or smaller). Issue 25's goals sit in the last columns, each judged on
the checkout.

The measurements (flags choose some; with none, all are run):

``--simulate``
    ``python -m chunked_prefill simulate --requests 100000 --chunk-size 512
    --token-budget 2048 --quiet``: the default workload (Poisson arrivals at 6 req/s, the
    chat lengths) through one serving configuration (the issue's chunk 512 and budget 2048;
    without them ``simulate`` compares three budgets), whole-process wall time and peak
    RSS (``os.wait4``'s ``ru_maxrss`` of the child).
``--sim-rate``
    the simulation alone: ``simulate_serving(default_workload(100000, rate=6.0, seed=0),
    ServingSimConfig())`` timed in a child (as ``benches/bench_sim_serving.py``), simulated
    requests per second. numpy is imported before the clock starts: the default workload's
    draws imported it there until the core drew them, and a module's import is not the
    simulation (``--simulate`` counts it).
``--memory``
    this checkout's ``scripts/sim_memory.py 1000000`` run with each side's package:
    whole-process peak RSS and wall time.
``--trace``
    ``python -m chunked_prefill simulate --trace FILE --chunk-size 512 --token-budget
    2048 --quiet`` of a 100 000-row CSV trace in the format of ``examples/trace.csv``,
    generated once into the cache (seeded, so every run reads the same rows), whole-process
    wall time.
``--step``
    ``schedule()`` + ``update(batch, token_ids=[7] * len(batch.sampling_ids))`` with N
    decoding requests and 1 000 waiting 2 000-token prompts (N = 256 and 1 024), CPU time
    of the thread per step; each round copies the same prepared scheduler and runs
    ``--step-steps`` steps, a child runs ``--step-rounds`` rounds, and the best and the
    median are over the rounds of every child of a side.

Only options that the current release (bc907cc) has are used, so any later revision can
be measured against it. ``--json FILE`` writes every sample.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
# Each measurement's flag and what it runs, in the order they run.
MEASUREMENTS = {
    "simulate": "simulate --requests N, one configuration: wall time and peak RSS",
    "sim-rate": "simulate_serving of N requests in a process: simulated requests/s",
    "memory": "scripts/sim_memory.py of --memory-requests: peak RSS and wall time",
    "trace": "simulate --trace of a generated --trace-rows trace: wall time",
    "step": "schedule() + update() at --decodes decoding, 1 000 waiting: CPU time per step",
}
SIMULATE_OPTIONS = ("--chunk-size", "512", "--token-budget", "2048", "--quiet")

# Run in a child with one side's package: the simulation alone, and the serving step.
SIM_RATE_CODE = """
import json, sys, time
import numpy  # the run's records need it; imported before the clock starts on both sides
from chunked_prefill.sim import ServingSimConfig, default_workload, simulate_serving
requests = int(sys.argv[1])
workload = default_workload(requests, rate=6.0, seed=0)
started = time.perf_counter()
(result,) = simulate_serving(workload, ServingSimConfig(), backend="rust")
print(json.dumps({"seconds": time.perf_counter() - started, "steps": result.steps}))
"""

STEP_CODE = """
import copy, json, sys, time
import chunked_prefill._core as core
decodes, rounds, steps = (int(a) for a in sys.argv[1:4])
config = core.ServingConfig(
    num_blocks=65536, token_budget=max(2048, decodes + 512), chunk_size=512,
    max_running=decodes,
)
prepared = core.ServingScheduler(config)
for i in range(decodes):
    prepared.add_request(i, [i % 7] * 32, 100_000)
while any(prepared.request(i).num_computed < 32 for i in range(decodes)):
    batch = prepared.schedule()
    prepared.update(batch, token_ids=[7] * len(batch.sampling_ids))
for i in range(1000):
    prepared.add_request(10_000 + i, [i] * 2000, 64)
per_step = []
for _ in range(rounds):
    scheduler = copy.copy(prepared)
    started = time.thread_time()
    for _ in range(steps):
        batch = scheduler.schedule()
        scheduler.update(batch, token_ids=[7] * len(batch.sampling_ids))
    per_step.append((time.thread_time() - started) / steps)
print(json.dumps(per_step))
"""

# Issue 25's goals for the step, (decodes, row): (text, test of the two medians). "At or
# under 10 µs on an idle core" is read on the best round, the one least disturbed.
STEP_GOALS: dict[tuple[int, str], tuple[str, Callable[[float, float], bool]]] = {
    (256, "best"): ("<=10 µs", lambda old, new: new <= 10e-6),
    (1024, "median"): (">=3x", lambda old, new: old / new >= 3),
}

WHERE_CODE = "import chunked_prefill, sys; sys.stdout.write(chunked_prefill.__file__)"


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()


def _git_ok(*args: str) -> bool:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return done.returncode == 0


def default_revision() -> str:
    """The newest tag reachable from HEAD, else ``origin/main``, else ``main``."""
    if _git_ok("describe", "--tags", "--abbrev=0"):
        return _git("describe", "--tags", "--abbrev=0")
    if _git_ok("rev-parse", "--verify", "--quiet", "origin/main^{commit}"):
        return "origin/main"
    return "main"


@dataclass(frozen=True)
class Side:
    """One package under test: a label and the environment its children run with."""

    label: str
    env: dict[str, str]


def _child_env(cache: Path) -> dict[str, str]:
    """This environment, with bytecode written and read under the cache for either side.

    Without it, under PYTHONDONTWRITEBYTECODE a source tree compiles every module in every
    run while an installed wheel has its bytecode: 0.1 to 0.2 s of difference per process.
    """
    env = dict(os.environ, PYTHONPYCACHEPREFIX=str(cache / "pycache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _checkout_side(cache: Path) -> Side:
    described = _git("describe", "--always", "--dirty")
    env = _child_env(cache)
    if env.get("PYTHONPATH"):
        # The children run in the cache directory: PYTHONPATH=python must still name ours.
        paths = env["PYTHONPATH"].split(os.pathsep)
        env["PYTHONPATH"] = os.pathsep.join(str(Path(p).resolve()) for p in paths if p)
    side = Side(f"checkout {described}", env)
    where = Path(_where(side))
    print(f"checkout: chunked_prefill from {where.parent}")
    if ROOT not in where.parents:
        print(f"  note: not this checkout's python/ ({ROOT / 'python'})")
    return side


def _revision_side(revision: str, commit: str, directory: Path, cache: Path) -> Side:
    env = _child_env(cache)
    env["PYTHONPATH"] = str(directory)
    label = commit[:7] if commit.startswith(revision) else f"{revision} {commit[:7]}"
    side = Side(label, env)
    where = Path(_where(side))
    if directory.resolve() not in where.resolve().parents:
        raise SystemExit(f"the revision's package was not imported from {directory}: {where}")
    print(f"revision {revision} ({commit[:12]}): chunked_prefill from {where.parent}")
    return side


def _where(side: Side) -> str:
    return subprocess.run(
        [sys.executable, "-c", WHERE_CODE],
        env=side.env,
        cwd=tempfile.gettempdir(),
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def _maturin() -> list[str]:
    beside = Path(sys.executable).parent / "maturin"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("maturin")
    if found is None:
        raise SystemExit("building a revision needs maturin (pip install maturin)")
    return [found]


def build(commit: str, cache: Path) -> Path:
    """The revision's package installed under ``cache/<commit>/site``, built if missing."""
    site = cache / commit / "site"
    done = cache / commit / "built"
    if done.exists():
        print(f"revision built already: {site}")
        return site
    shutil.rmtree(site, ignore_errors=True)
    site.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="compare-revision-") as tmp:
        source, wheels = Path(tmp) / "src", Path(tmp) / "wheels"
        print(f"building {commit[:12]} in {source} (release; target dir {cache / 'target'})")
        _git("worktree", "add", "--detach", str(source), commit)
        try:
            env = dict(os.environ, CARGO_TARGET_DIR=str(cache / "target"))
            out = ["--out", str(wheels)]
            subprocess.run(
                [*_maturin(), "build", "--release", "--interpreter", sys.executable, *out],
                cwd=source,
                env=env,
                check=True,
            )
            (wheel,) = wheels.glob("chunked_prefill-*.whl")
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "install",
                    "-q",
                    "--no-deps",
                    "-t",
                    str(site),
                    str(wheel),
                ],
                check=True,
            )
        finally:
            _git("worktree", "remove", "--force", str(source))
    done.write_text(commit + "\n")
    print(f"revision built: {site}")
    return site


@dataclass(frozen=True)
class Run:
    """What one child process gave: wall seconds, peak RSS in MiB and its stdout."""

    wall_s: float
    peak_mib: float
    stdout: str


def run_child(side: Side, args: list[str], cwd: Path) -> Run:
    """Run ``python ARGS`` with the side's package; wall time and peak RSS of the process."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        child = subprocess.Popen(
            [sys.executable, *args], env=side.env, cwd=cwd, stdout=out, stderr=err
        )
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if child.returncode != 0:
            raise SystemExit(
                f"{side.label}: python {' '.join(args)} exited {child.returncode}:\n"
                + err.read().decode(errors="replace")
            )
        return Run(wall, usage.ru_maxrss / 1024, out.read().decode())  # ru_maxrss: KiB


@dataclass(frozen=True)
class Row:
    """One line of the table: samples of both sides and how to read them."""

    name: str
    unit: str
    goal: str
    lower_is_better: bool
    samples: dict[str, list[float]]
    scale: float = 1.0
    met: Callable[[float, float], bool] | None = None  # (revision, checkout) medians


def write_trace(path: Path, rows: int) -> None:
    """A seeded synthetic trace in the columns of ``examples/trace.csv``."""
    rng = random.Random(25)
    arrival = 0.0
    lines = ["arrival_s,prompt_tokens,output_tokens,cached_tokens,prefix_id,prefix_tokens"]
    for index in range(rows):
        arrival += rng.expovariate(6.0)
        output = max(1, min(4096, round(rng.lognormvariate(4.8, 0.8))))
        if rng.random() < 0.7:  # a chat turn behind the shared system prompt
            prompt = 128 + max(1, min(8000, round(rng.lognormvariate(5.8, 1.0))))
            cached = 0 if index == 0 else 128
            lines.append(f"{arrival:.3f},{prompt},{output},{cached},system,128")
        else:
            prompt = max(1, min(8000, round(rng.lognormvariate(4.5, 0.8))))
            lines.append(f"{arrival:.3f},{prompt},{output},0,,")
    partial = path.with_suffix(".partial")
    partial.write_text("\n".join(lines) + "\n")
    partial.replace(path)


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _format(value: float) -> str:
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def print_table(rows: list[Row], sides: list[Side]) -> None:
    """Medians of each side, the checkout's gain over the revision, and the goal."""
    revision, checkout = sides
    header = ["measurement", revision.label, checkout.label, "gain", "goal", "met"]
    lines = [header]
    for row in rows:
        old = _median(row.samples[revision.label])
        new = _median(row.samples[checkout.label])
        gain = old / new if row.lower_is_better else new / old
        # The goal reads the medians in the samples' own unit (seconds), not the printed one.
        met = "" if row.met is None else ("yes" if row.met(old, new) else "no")
        old, new = old * row.scale, new * row.scale
        lines.append(
            [f"{row.name} ({row.unit})", _format(old), _format(new), f"{gain:.2f}x", row.goal, met]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    print()
    for n, line in enumerate(lines):
        cells = [line[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(line[1:], widths[1:])]
        print("  ".join(cells).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))
    print(
        "\nmedians over the rounds; gain: revision / checkout for times and memory,"
        " checkout / revision for rates (above 1: the checkout is better)"
    )


def alternate(
    sides: list[Side], rounds: int, command: list[str], cwd: Path, *, warm: bool = True
) -> dict[str, list[Run]]:
    """Each side runs ``python COMMAND`` ``rounds`` times, the sides taking turns (ABBA).

    With ``warm``, each side runs it once first, untimed: the first run after a build or a
    change reads files from disk and writes bytecode.
    """
    for side in sides if warm else []:
        run_child(side, command, cwd)
    runs: dict[str, list[Run]] = {side.label: [] for side in sides}
    for n in range(rounds):
        # Revision, checkout; checkout, revision; ...: a machine that slows down (or the
        # second of two back-to-back processes) weighs on both sides alike.
        for side in sides if n % 2 == 0 else sides[::-1]:
            print(f"  round {n + 1}/{rounds}: {side.label}", flush=True)
            runs[side.label].append(run_child(side, command, cwd))
    return runs


def _at_least_gain(factor: float) -> Callable[[float, float], bool]:
    return lambda old, new: old / new >= factor


def _by_side(runs: dict[str, list[Run]], value: Callable[[Run], float]) -> dict[str, list[float]]:
    return {label: [value(r) for r in rs] for label, rs in runs.items()}


def _simulate_rows(args: argparse.Namespace, sides: list[Side], cache: Path) -> list[Row]:
    command = ["-m", "chunked_prefill", "simulate", "--requests", str(args.requests)]
    command += SIMULATE_OPTIONS
    print(f"simulate: python {' '.join(command)}")
    runs = alternate(sides, args.rounds, command, cache)
    wall = _by_side(runs, lambda r: r.wall_s)
    return [
        Row("simulate, whole process", "s", ">=3x", True, wall, met=_at_least_gain(3)),
        Row("simulate, peak RSS", "MiB", "", True, _by_side(runs, lambda r: r.peak_mib)),
    ]


def _sim_rate_rows(args: argparse.Namespace, sides: list[Side], cache: Path) -> list[Row]:
    print(f"sim-rate: simulate_serving of {args.requests} default-workload requests")
    runs = alternate(sides, args.rounds, ["-c", SIM_RATE_CODE, str(args.requests)], cache)
    results = {label: [json.loads(r.stdout) for r in rs] for label, rs in runs.items()}
    steps = {label: sorted({r["steps"] for r in rs}) for label, rs in results.items()}
    if len({tuple(s) for s in steps.values()}) > 1:
        print(f"  note: the two sides took different step counts: {steps}")
    rates = {label: [args.requests / r["seconds"] for r in rs] for label, rs in results.items()}
    met = lambda old, new: new >= 500_000  # noqa: E731
    return [Row("simulation alone", "requests/s", ">=500 000/s", False, rates, met=met)]


def _memory_rows(args: argparse.Namespace, sides: list[Side], cache: Path) -> list[Row]:
    script = str(ROOT / "scripts" / "sim_memory.py")
    print(f"memory: python {script} {args.memory_requests}")
    command = [script, str(args.memory_requests)]
    # Not warmed: a million requests take a while, and the peak is what is measured.
    runs = alternate(sides, args.memory_rounds, command, cache, warm=False)
    what = f"{args.memory_requests:,} requests"
    peak = _by_side(runs, lambda r: r.peak_mib)
    met = lambda old, new: new * 2**20 < 300e6  # noqa: E731
    return [
        Row(f"{what}, peak RSS", "MiB", "<300 MB", True, peak, met=met),
        Row(f"{what}, whole process", "s", "", True, _by_side(runs, lambda r: r.wall_s)),
    ]


def _trace_rows(args: argparse.Namespace, sides: list[Side], cache: Path) -> list[Row]:
    trace = cache / f"trace-{args.trace_rows}.csv"
    if not trace.exists():
        write_trace(trace, args.trace_rows)
    command = ["-m", "chunked_prefill", "simulate", "--trace", str(trace), *SIMULATE_OPTIONS]
    print(f"trace: python {' '.join(command)}")
    wall = _by_side(alternate(sides, args.rounds, command, cache), lambda r: r.wall_s)
    name = f"simulate --trace, {args.trace_rows:,} rows"
    return [Row(name, "s", ">=3x", True, wall, met=_at_least_gain(3))]


def _step_rows(args: argparse.Namespace, sides: list[Side], cache: Path) -> list[Row]:
    rows = []
    for decodes in args.decodes:
        print(
            f"step: {decodes} decodes, 1 000 waiting; {args.step_rounds} rounds of"
            f" {args.step_steps} steps per process"
        )
        command = ["-c", STEP_CODE, str(decodes), str(args.step_rounds), str(args.step_steps)]
        runs = alternate(sides, args.rounds, command, cache)
        # Per-step seconds of every round of every process of a side.
        per_step = {
            label: [s for r in rs for s in json.loads(r.stdout)] for label, rs in runs.items()
        }
        # The row's median of one value is that value: the best round of all.
        best = {label: [min(values)] for label, values in per_step.items()}
        for name, samples in (("best", best), ("median", per_step)):
            goal, met = STEP_GOALS.get((decodes, name), ("", None))
            rows.append(
                Row(f"step, {decodes} decodes, {name}", "µs", goal, True, samples, 1e6, met)
            )
    return rows


MEASURE = {
    "simulate": _simulate_rows,
    "sim-rate": _sim_rate_rows,
    "memory": _memory_rows,
    "trace": _trace_rows,
    "step": _step_rows,
}
"""Each measurement's rows, by its flag (the order of :data:`MEASUREMENTS`)."""


def measure(args: argparse.Namespace, sides: list[Side], cache: Path) -> list[Row]:
    """Every chosen measurement, the sides alternating round by round."""
    chosen = [m for m in MEASUREMENTS if getattr(args, m.replace("-", "_"))] or list(MEASUREMENTS)
    return [row for name in chosen for row in MEASURE[name](args, sides, cache)]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Issue 25's measurements on this checkout and a git revision, side by side.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="With no measurement flag, all are run. See the module docstring for details.",
    )
    parser.add_argument(
        "revision",
        nargs="?",
        help="commit, tag or branch to compare against (default: the newest tag reachable"
        " from HEAD, else origin/main, else main)",
    )
    for name, text in MEASUREMENTS.items():
        parser.add_argument(f"--{name}", action="store_true", help=text)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        metavar="DIR",
        default=Path(xdg) / "chunked-prefill-compare",
        help="built revisions (one directory per commit), the Cargo target dir and the"
        " generated trace (default: %(default)s)",
    )
    parser.add_argument(
        "--revision-pythonpath",
        type=Path,
        metavar="DIR",
        help="import the revision's package from this directory instead of building it",
    )
    parser.add_argument(
        "--rounds", type=int, default=5, metavar="N", help="timed runs of each side (default: 5)"
    )
    parser.add_argument(
        "--memory-rounds", type=int, default=1, metavar="N", help="--memory's runs (default: 1)"
    )
    parser.add_argument(
        "--requests",
        type=int,
        default=100_000,
        metavar="N",
        help="requests of --simulate and --sim-rate (default: 100000)",
    )
    parser.add_argument(
        "--memory-requests", type=int, default=1_000_000, metavar="N", help="default: 1000000"
    )
    parser.add_argument(
        "--trace-rows", type=int, default=100_000, metavar="N", help="default: 100000"
    )
    parser.add_argument(
        "--decodes",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[256, 1024],
        metavar="LIST",
        help="decoding requests of --step, a comma list (default: 256,1024)",
    )
    parser.add_argument(
        "--step-rounds",
        type=int,
        default=15,
        metavar="N",
        help="rounds per process of --step (default: 15)",
    )
    parser.add_argument(
        "--step-steps",
        type=int,
        default=50,
        metavar="N",
        help="steps per round of --step (default: 50)",
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="write every sample to this file")
    return parser


def _revision_directory(args: argparse.Namespace, commit: str, cache: Path) -> Path:
    """The revision's package directory: built into the cache, or the one given (noting
    when it is not a checkout of ``commit``)."""
    if args.revision_pythonpath is None:
        return build(commit, cache)
    directory: Path = args.revision_pythonpath
    checked_out = subprocess.run(
        ["git", "-C", str(directory), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    if checked_out != commit:
        print(f"note: {directory} is not a checkout of {commit[:12]} ({checked_out or '?'})")
    return directory


def _write_json(path: Path, commit: str, rows: list[Row]) -> None:
    samples = [
        {"name": r.name, "unit": r.unit, "scale": r.scale, "samples": r.samples} for r in rows
    ]
    document = {"revision": commit, "checkout": _git("rev-parse", "HEAD"), "rows": samples}
    path.write_text(json.dumps(document, indent=1))


def main(argv: list[str] | None = None) -> None:
    """Parse the options, build or find the revision, measure both sides, print the table."""
    args = _parser().parse_args(argv)
    revision = args.revision or default_revision()
    commit = _git("rev-parse", "--verify", f"{revision}^{{commit}}")
    cache = args.cache_dir.resolve()
    cache.mkdir(parents=True, exist_ok=True)
    print(f"cache: {cache}")
    directory = _revision_directory(args, commit, cache)
    sides = [
        _revision_side(revision, commit, directory.resolve(), cache),
        _checkout_side(cache),
    ]
    rows = measure(args, sides, cache)
    print_table(rows, sides)
    if args.json is not None:
        _write_json(args.json, commit, rows)


if __name__ == "__main__":
    main()
