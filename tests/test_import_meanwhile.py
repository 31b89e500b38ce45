"""What a run imports while the core's loop runs (``sim._lazy.import_meanwhile``): the
modules it names, on another thread, only those not imported yet; and ``simulate
--quiet`` imports neither numpy nor rich before its loop, so both are imported meanwhile."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def _run(script: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_imports_the_missing_modules_on_another_thread() -> None:
    out = _run(
        """
        import sys, threading
        from chunked_prefill.sim._lazy import import_meanwhile
        assert "wave" not in sys.modules and "os" in sys.modules
        before = threading.active_count()
        import_meanwhile("os")  # imported already: no thread
        assert threading.active_count() == before
        import_meanwhile("os", "wave")
        (thread,) = [t for t in threading.enumerate() if t.name.startswith("import ")]
        print(thread.name, thread.daemon)
        thread.join()
        print("wave" in sys.modules)
        """
    )
    assert out.splitlines() == ["import wave False", "True"]


def test_quiet_simulate_imports_numpy_and_rich_while_its_loop_runs() -> None:
    # Each call of import_meanwhile is seen with what was imported already: nothing of
    # what it names, so both imports were left to the threads.
    pytest.importorskip("chunked_prefill._core", reason="the core draws the workload")
    out = _run(
        """
        import sys
        from chunked_prefill.sim import _lazy
        import chunked_prefill.sim.runs.serving as run
        import chunked_prefill.sim.cli.simulate.serving as cli
        from chunked_prefill.cli import main

        def spy(*names):
            print(names, [name for name in names if name in sys.modules])
            _lazy.import_meanwhile(*names)

        run.import_meanwhile = cli.import_meanwhile = spy
        try:
            main(["simulate", "--requests", "200", "--chunk-size", "512",
                  "--token-budget", "2048", "--quiet"])
        except SystemExit as stop:
            assert not stop.code, stop.code
        """
    )
    lines = out.splitlines()
    assert lines[:2] == ["('rich.console',) []", "('numpy',) []"], out
    assert "TTFT" in out  # the report printed after them
