"""What a run imports while the core's loop runs (``sim._lazy.import_meanwhile``): the
modules it names, on another thread, only those neither imported nor asked for yet, at the
lowest priority when asked; ``simulate --quiet`` imports neither numpy nor rich before its
loop, so both are imported meanwhile; and what a ``chunked-prefill`` process sets around
its command (``_process.run_process``)."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import textwrap
from pathlib import Path

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


# The threads import_meanwhile starts, kept as they start: one that already finished is
# no longer in threading.enumerate().
_RECORDED = """
import threading
from chunked_prefill.sim import _lazy

started = []

class Recorded(threading.Thread):
    def start(self):
        started.append(self)
        super().start()

_lazy.threading.Thread = Recorded
"""


def test_imports_the_missing_modules_on_another_thread() -> None:
    out = _run(
        _RECORDED
        + """
import sys
assert "wave" not in sys.modules and "os" in sys.modules
_lazy.import_meanwhile("os")  # imported already: no thread
assert not started
_lazy.import_meanwhile("os", "wave")
(thread,) = started
print(thread.name, thread.daemon)
thread.join()
print("wave" in sys.modules)
"""
    )
    assert out.splitlines() == ["import wave False", "True"]


def test_a_module_asked_for_twice_gets_one_thread() -> None:
    out = _run(
        _RECORDED
        + """
_lazy.import_meanwhile("wave")
_lazy.import_meanwhile("wave", "colorsys")  # wave is asked for (or imported) already
for thread in started:
    thread.join()
print([thread.name for thread in started])
"""
    )
    assert out == "['import wave', 'import colorsys']"


@pytest.mark.skipif(sys.platform != "linux", reason="a thread's nice value is Linux's")
def test_low_priority_imports_run_at_nice_19_and_leave_the_caller_alone(tmp_path: Path) -> None:
    # The probe module records, as it is imported, the nice value of the thread importing it.
    (tmp_path / "nice_probe.py").write_text(
        "import os, threading\nNICE = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())\n"
    )
    out = _run(
        _RECORDED
        + f"""
import os, sys
sys.path.insert(0, {str(tmp_path)!r})
before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
_lazy.import_meanwhile("nice_probe", low_priority=True)
(thread,) = started
thread.join()
import nice_probe
after = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
print(before, nice_probe.NICE, after)
"""
    )
    before, probe, after = (int(word) for word in out.split())
    assert (probe, after) == (19, before)


def _process(script: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


@pytest.mark.parametrize(("given", "seen"), [(None, "1"), ("4", "4")])
def test_a_process_keeps_openblas_to_one_thread_unless_told(given: str | None, seen: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    done = _process(
        """
        import os
        from chunked_prefill._process import run_process
        run_process(lambda: print(os.environ["OPENBLAS_NUM_THREADS"]) or 0)
        """,
        env,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, seen + "\n", "")


def test_a_process_ends_with_its_status_after_what_an_exit_does_for_others() -> None:
    # Its threads waited for, its atexit handlers run, its buffered output (a pipe: stdout
    # is block-buffered without PYTHONUNBUFFERED) written, then the command's status;
    # nothing after run_process.
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    done = _process(
        """
        import atexit, sys, threading, time
        from chunked_prefill._process import run_process

        def late():
            time.sleep(0.2)
            print("thread")

        def command():
            threading.Thread(target=late).start()
            atexit.register(lambda: print("atexit"))
            print("command", end=" ")
            print("to stderr", file=sys.stderr)
            return 3

        run_process(command)
        print("after")
        """,
        buffered,
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        3,
        "command thread\natexit\n",
        "to stderr\n",
    )


def test_an_exception_ends_a_process_the_usual_way() -> None:
    done = _process(
        """
        from chunked_prefill._process import run_process

        def command():
            raise SystemExit(2)

        run_process(command)
        """
    )
    assert (done.returncode, done.stdout, done.stderr) == (2, "", "")


def test_quiet_simulate_imports_numpy_and_rich_while_its_loop_runs() -> None:
    # The command line asks first, at low priority, for all the report needs, none of it
    # imported yet; the run asks for numpy and the summary again (pending or imported by then).
    pytest.importorskip("chunked_prefill._core", reason="the core draws the workload")
    out = _run(
        """
        import sys
        from chunked_prefill.sim import _lazy
        import chunked_prefill.sim.runs.serving as run
        import chunked_prefill.sim.cli.simulate.serving as cli
        from chunked_prefill.cli import main

        def spy(*names, **options):
            print(names, options, [name for name in names if name in sys.modules])
            _lazy.import_meanwhile(*names, **options)

        run.import_meanwhile = cli.import_meanwhile = spy
        try:
            main(["simulate", "--requests", "200", "--chunk-size", "512",
                  "--token-budget", "2048", "--quiet"])
        except SystemExit as stop:
            assert not stop.code, stop.code
        """
    )
    lines = out.splitlines()
    asked = ("numpy", "chunked_prefill.sim.runs.summary", "rich.console", "rich.table")
    assert lines[0] == f"{asked} {{'low_priority': True}} []", out
    assert lines[1].startswith("('numpy', 'chunked_prefill.sim.runs.summary') {} "), out
    assert "TTFT" in out  # the report printed after them


def test_the_console_script_and_both_modules_run_their_command_as_a_process() -> None:
    # The installed script names the process entry (run_process), not cli.main.
    scripts = [
        entry
        for entry in importlib.metadata.entry_points(group="console_scripts")
        if entry.name == "chunked-prefill"
    ]
    if scripts:  # not installed when only PYTHONPATH finds the package
        assert [entry.value for entry in scripts] == ["chunked_prefill.cli:entry"]
    pytest.importorskip("chunked_prefill._core", reason="the core draws the workload")
    for module in ("chunked_prefill", "chunked_prefill.sim"):
        argv = ["simulate"] if module == "chunked_prefill" else []
        done = subprocess.run(
            [sys.executable, "-m", module, *argv, "--requests", "50", "--quiet"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, (module, done.stderr)
        assert "TTFT" in done.stdout, module


def test_a_process_without_stdout_or_a_reader_ends_with_its_status() -> None:
    # Less than a pipe's buffer: written by the last flush, after the command.
    script = """
        from chunked_prefill._process import run_process
        run_process(lambda: print("x" * 100) or 4)
        """
    # Started with stdout closed (Python makes it None): the command's status.
    closed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        check=False,
        close_fds=True,
        preexec_fn=lambda: os.close(1),
    )
    assert closed.returncode == 4
    # A reader that leaves before the last flush: as `| head`, not an error (stdout
    # buffered, which PYTHONUNBUFFERED would undo).
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    reader = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=buffered,
    )
    assert reader.stdout is not None and reader.stderr is not None
    reader.stdout.close()
    assert reader.wait(timeout=120) == 0
    assert reader.stderr.read() == b""
