"""Signals during a long simulation: the Rust loop runs the interpreter's signal handlers
every few dozen milliseconds, so Ctrl-C (or the CLI's SIGTERM handler) stops a run at once,
not when the whole run ends; the run leaves nothing behind and the module carries on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

import pytest

from chunked_prefill.sim import Workload, default_workload
from chunked_prefill.sim.serving import ServingSimConfig, simulate_serving

_core = pytest.importorskip("chunked_prefill._core")

pytestmark = pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs setitimer (POSIX)")

ALARM_S = 0.3
PROMPT = 1.0
"""How soon after the alarm is due the call must have raised (the loop polls every 50 ms;
the run would take seconds)."""


def _long(n: int = 40_000, scale: int = 100) -> Workload:
    """A workload whose Rust run takes seconds (outputs stretched, all at t = 0)."""
    base = default_workload(n, seed=7)
    return Workload((0.0,) * n, base.prompt_tokens, tuple(o * scale for o in base.output_tokens))


def _raw(workload: Workload) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments of ``_core.simulate_serving`` for a plain workload (no token ids)."""
    args = (
        workload.arrival_s,
        workload.prompt_tokens,
        workload.output_tokens,
        b"",
        b"",
        0,
        b"",
        b"",
        0,
        b"",
        b"",
    )
    kwargs: dict[str, Any] = dict(
        num_blocks=10**7,
        block_size=16,
        token_budget=2048,
        chunk_size=512,
        max_prefills_per_step=4,
        max_running=256,
        watermark=0.0,
        prefix_caching=True,
        engine=(9.8e-3, 7.4e-3, 57.5e-6, 2.7e-9, 0.31e-6, 6.5e-9),
        max_steps=10**12,
    )
    return args, kwargs


class Stop(Exception):
    """What the test's SIGALRM handler raises (as the CLI's raises ``Terminated``)."""


@pytest.fixture
def alarm() -> Iterator[list[float]]:
    """The times the SIGALRM handler of :func:`_arm` ran; the handler and the timer are put
    back afterwards."""
    fired: list[float] = []
    previous = signal.getsignal(signal.SIGALRM)
    try:
        yield fired
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _arm(fired: list[float], seconds: float, exc: type[BaseException] | None) -> None:
    """SIGALRM in ``seconds``, its handler raising ``exc`` (``None``: every ``seconds``,
    raising nothing)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        fired.append(time.monotonic())
        if exc is not None:
            raise exc

    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds, seconds if exc is None else 0)


@pytest.mark.parametrize("exc", [KeyboardInterrupt, Stop])
def test_a_signal_handlers_exception_stops_the_rust_loop_at_once(
    alarm: list[float], exc: type[BaseException]
) -> None:
    """The exception comes out of ``simulate_serving`` itself, within a poll of the alarm
    (the run would take seconds); a later run gives what a fresh one gives."""
    small = _raw(default_workload(50, seed=1))
    fresh = _core.simulate_serving(*small[0], **small[1])
    args, kwargs = _raw(_long())
    start = time.monotonic()
    _arm(alarm, ALARM_S, exc)
    with pytest.raises(exc):
        _core.simulate_serving(*args, **kwargs)
    assert len(alarm) == 1
    assert time.monotonic() - start < ALARM_S + PROMPT
    assert _core.simulate_serving(*small[0], **small[1]) == fresh


def test_a_fleet_is_stopped_too(alarm: list[float]) -> None:
    args, kwargs = _raw(_long())
    start = time.monotonic()
    _arm(alarm, ALARM_S, KeyboardInterrupt)
    with pytest.raises(KeyboardInterrupt):
        _core.simulate_serving(*args, **kwargs, replicas=3, router="least-loaded")
    assert time.monotonic() - start < ALARM_S + PROMPT


def test_a_handler_that_returns_lets_the_run_finish(alarm: list[float]) -> None:
    """Signals whose handlers return run them in the middle of the loop and change nothing."""
    args, kwargs = _raw(_long(8000, 60))  # about half a second
    quiet = _core.simulate_serving(*args, **kwargs)
    _arm(alarm, 0.01, None)
    start = time.monotonic()
    busy = _core.simulate_serving(*args, **kwargs)
    signal.setitimer(signal.ITIMER_REAL, 0)
    assert busy == quiet
    # The handler ran during the call, at each poll (pending alarms run it once), not
    # only once after the call returned.
    assert len(alarm) >= 3
    assert alarm[0] - start < 0.2


@pytest.mark.parametrize("backend", ["rust", "pure"])
def test_ctrl_c_stops_simulate_serving_on_both_loops(alarm: list[float], backend: str) -> None:
    workload = _long()
    config = ServingSimConfig(num_blocks=10**7)
    start = time.monotonic()
    _arm(alarm, 1.0, KeyboardInterrupt)
    with pytest.raises(KeyboardInterrupt):
        simulate_serving(workload, config, backend=backend, max_steps=10**12)
    assert time.monotonic() - start < 1.0 + PROMPT


LONG_SIMULATE = [
    "simulate",
    # 31 M steps, about 40 s of loop (issue 25's speed work made 3 M steps take 3 s).
    *("--requests", "40000", "--output-scale", "1000", "--rate", "inf"),
    *("--num-blocks", "10000000", "--chunk-size", "512", "--max-steps", "1000000000"),
    "--quiet",
    "--json",
]


@pytest.mark.parametrize(
    ("signum", "status", "line"),
    [
        (signal.SIGINT, 130, "chunked-prefill simulate: interrupted\n"),
        (signal.SIGTERM, 143, "chunked-prefill simulate: terminated by SIGTERM\n"),
        (signal.SIGHUP, 129, "chunked-prefill simulate: terminated by SIGHUP\n"),
    ],
)
def test_a_signal_stops_simulate_in_the_rust_loop_within_seconds(
    signum: int, status: int, line: str
) -> None:
    """The run would take about a minute; signalled once it is in the loop, `simulate`
    ends within 3 s with one line and the signal's status, printing nothing on stdout."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "chunked_prefill", *LONG_SIMULATE],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        time.sleep(2.5)
        assert proc.poll() is None, proc.communicate()
        sent = time.monotonic()
        os.killpg(proc.pid, signum)
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - sent
        assert (proc.returncode, err.decode(), out) == (status, line, b"")
        assert took < 3, took
    finally:
        proc.kill()
        proc.communicate()
