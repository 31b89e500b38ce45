"""Output files and early ends of the command line (docs/cli.md, "Output files" and "Exit
status"): every output path is checked before the work and named by its flag; a file is
written whole or not at all; Ctrl-C, SIGTERM and SIGHUP end a command with one line and
128 + the signal number; a search's workers neither print on Ctrl-C nor outlive a killed
parent."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from chunked_prefill import cli as top_cli
from chunked_prefill.cli import main
from chunked_prefill.sim.cli.search import drive as search_cli
from chunked_prefill.sim.cli.simulate import planner as planner_cli
from chunked_prefill.sim.cli.simulate import serving as serving_cli
from chunked_prefill.sim.engines import fit as fit_module

PLANNER = ["--scheduler", "planner", "--chunk-size", "512", "--requests", "5", "--quiet"]
SEARCH = ["--requests", "20", "--slo-ttft", "1", "--workers", "1", "--quiet"]
KEPT = "data\n"


def _err(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


@pytest.fixture
def nothing_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if anything is simulated, searched or fitted: a path is checked first."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("ran before refusing the output path")

    for module, name in (
        (planner_cli, "simulate"),
        (serving_cli, "simulate_serving"),
        (search_cli, "search"),
        (fit_module, "fit_steps"),
        (fit_module, "read_steps_csv"),
    ):
        monkeypatch.setattr(module, name, refuse)


# --- item 2: a refused run leaves --steps-csv whole ---------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--trace", "/nonexistent.csv"],
            "argument --trace: /nonexistent.csv: cannot be read: No such file or directory",
        ),
        (["--max-steps", "1"], "argument --max-steps: "),
        (["--chunk-size", "256,512"], "argument --steps-csv: records one configuration, got 2"),
        (["--plot", "x.xyz"], "argument --plot: 'x.xyz': unsupported image format '.xyz'"),
        (["--profile", "/nonexistent.json"], "argument --profile: /nonexistent.json: "),
    ],
)
def test_a_refused_simulate_keeps_the_steps_file(
    argv: list[str],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A refused run opens no output file: the old one keeps its content (it held a header)."""
    monkeypatch.chdir(tmp_path)
    keep = tmp_path / "keep.csv"
    keep.write_text(KEPT)
    code = main(["simulate", *PLANNER, "--steps-csv", "keep.csv", *argv])
    assert code == 2
    assert _err(capsys).startswith(f"chunked-prefill simulate: error: {message}")
    assert keep.read_text() == KEPT
    assert [p.name for p in tmp_path.iterdir()] == ["keep.csv"]


class _Interrupted(list[Any]):
    """A step log that is interrupted (Ctrl-C) halfway through being written."""

    def __iter__(self) -> Iterator[Any]:
        yield from self[:2]
        raise KeyboardInterrupt


def test_an_interrupted_write_keeps_the_old_file_and_no_temporary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while --steps-csv is written: status 130, one line, the old file whole, no
    temporary file left; the same run uninterrupted replaces the file."""
    real = planner_cli.simulate

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        (result,) = real(*args, **kwargs)
        return [replace(result, step_log=_Interrupted(result.step_log))]

    keep = tmp_path / "keep.csv"
    keep.write_text(KEPT)
    monkeypatch.setattr(planner_cli, "simulate", interrupted)
    assert main(["simulate", *PLANNER, "--steps-csv", str(keep)]) == 130
    assert capsys.readouterr().err == "chunked-prefill simulate: interrupted\n"
    assert keep.read_text() == KEPT
    assert [p.name for p in tmp_path.iterdir()] == ["keep.csv"]
    monkeypatch.setattr(planner_cli, "simulate", real)
    assert main(["simulate", *PLANNER, "--steps-csv", str(keep)]) == 0
    assert keep.read_text().startswith("step,start_s,prefill_tokens,")
    assert [p.name for p in tmp_path.iterdir()] == ["keep.csv"]


@pytest.mark.parametrize("binary", [False, True])
def test_replacing_writes_whole_or_not_at_all(tmp_path: Path, binary: bool) -> None:
    from chunked_prefill._output import replacing

    path = tmp_path / "out"
    path.write_text("old")
    path.chmod(0o640)
    with pytest.raises(KeyboardInterrupt), replacing(path, binary=binary) as fh:
        fh.write(b"new" if binary else "new")
        raise KeyboardInterrupt
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["out"]
    with replacing(path, binary=binary) as fh:
        fh.write(b"new\r\n" if binary else "new\r\n")
        assert path.read_text() == "old"  # not before the block ends
    assert path.read_bytes() == b"new\r\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # the old file's permissions
    assert os.listdir(tmp_path) == ["out"]


def test_a_new_file_gets_the_umask_permissions(tmp_path: Path) -> None:
    from chunked_prefill._output import replacing

    old = os.umask(0o027)
    try:
        with replacing(tmp_path / "new.csv") as fh:
            fh.write("x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.csv").stat().st_mode) == 0o640


def test_fit_out_is_replaced_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while fit writes --out: 130, one line, the old profile whole."""
    steps = tmp_path / "steps.csv"
    assert main(["simulate", *PLANNER, "--requests", "50", "--steps-csv", str(steps)]) == 0
    out = tmp_path / "fitted.json"
    out.write_text(KEPT)

    def interrupted(engine: Any, toml: bool) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(fit_module, "profile_text", interrupted)
    capsys.readouterr()
    assert main(["fit", str(steps), "--out", str(out)]) == 130
    assert capsys.readouterr().err == "chunked-prefill fit: interrupted\n"
    assert out.read_text() == KEPT
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fitted.json", "steps.csv"]


# --- item 3: every output path is checked before the work, naming its flag ----------------


def _bad_paths(tmp_path: Path) -> list[tuple[str, str]]:
    """(path, reason) pairs that no output flag may accept."""
    (tmp_path / "folder.png").mkdir()
    (tmp_path / "file").write_text("")
    (tmp_path / "dangling.png").symlink_to("/nonexistent/x.png")
    (tmp_path / "loop.png").symlink_to("loop.png")
    return [
        (f"{tmp_path}/folder.png", "it is a folder, not a file name"),
        (f"{tmp_path}/no/such/x.png", f"the folder {tmp_path}/no/such does not exist"),
        (f"{tmp_path}/file/x.png", f"{tmp_path}/file is not a folder"),
        (
            f"{tmp_path}/dangling.png",
            "it is a symbolic link to '/nonexistent/x.png', which leads to no file",
        ),
        (f"{tmp_path}/loop.png", "it is a symbolic link to 'loop.png', which leads to no file"),
        ("/proc/x.png", "the folder /proc is not writable ("),
    ]


@pytest.mark.parametrize(
    ("command", "flag"),
    [
        (["simulate", "--requests", "5"], "--plot"),
        (["simulate", *PLANNER], "--steps-csv"),
        (["search", *SEARCH], "--plot"),
        (["fit", "steps.csv"], "--out"),
    ],
)
def test_output_paths_are_checked_before_the_work(
    command: list[str],
    flag: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    nothing_runs: None,
) -> None:
    if flag == "--plot":
        pytest.importorskip("matplotlib")
    before = sorted(os.listdir(tmp_path))
    for path, reason in _bad_paths(tmp_path):
        assert main([*command, flag, path]) == 2, path
        err = _err(capsys)
        prog = f"chunked-prefill {command[0]}"
        assert err.startswith(f"{prog}: error: argument {flag}: cannot write {path}: {reason}")
    assert main([*command, flag, ""]) == 2
    assert _err(capsys) == f"{prog}: error: argument {flag}: cannot write : the name is empty\n"
    made = ["dangling.png", "file", "folder.png", "loop.png"]
    assert sorted(os.listdir(tmp_path)) == sorted([*before, *made])


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes whatever the permissions say")
def test_unwritable_file_and_folder_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], nothing_runs: None
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    readonly = tmp_path / "ro.csv"
    readonly.write_text(KEPT)
    readonly.chmod(0o444)
    locked.chmod(0o555)
    try:
        assert main(["simulate", *PLANNER, "--steps-csv", str(locked / "s.csv")]) == 2
        assert f"cannot write {locked}/s.csv: the folder {locked} is not writable" in _err(capsys)
        assert main(["simulate", *PLANNER, "--steps-csv", str(readonly)]) == 2
        assert f"cannot write {readonly}: the file is not writable" in _err(capsys)
    finally:
        locked.chmod(0o755)


def test_two_flags_naming_one_file_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], nothing_runs: None
) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "a.png"
    argv = ["simulate", *PLANNER, "--plot", str(png), "--steps-csv", f"{tmp_path}/./a.png"]
    assert main(argv) == 2
    assert _err(capsys) == (
        f"chunked-prefill simulate: error: argument --steps-csv: {tmp_path}/./a.png is also"
        " the file of --plot\n"
    )
    assert not png.exists()


def test_a_symlink_to_a_file_is_followed_and_stays(tmp_path: Path) -> None:
    target = tmp_path / "real.csv"
    target.write_text(KEPT)
    link = tmp_path / "link.csv"
    link.symlink_to("real.csv")
    assert main(["simulate", *PLANNER, "--steps-csv", str(link)]) == 0
    assert link.is_symlink() and os.readlink(link) == "real.csv"
    assert target.read_text().startswith("step,start_s,")
    assert sorted(os.listdir(tmp_path)) == ["link.csv", "real.csv"]


def test_a_device_is_written_in_place() -> None:
    assert main(["simulate", *PLANNER, "--steps-csv", "/dev/null"]) == 0
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_plot_is_written_through_a_temporary_file(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "cdf.png"
    png.write_text(KEPT)
    assert main(["simulate", "--requests", "20", "--quiet", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert os.listdir(tmp_path) == ["cdf.png"]


def test_a_plot_that_fails_to_write_names_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk that fills while the figure is saved: the flag is named, the old file kept."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    def full(self: Any, *args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    png = tmp_path / "cdf.png"
    png.write_text(KEPT)
    monkeypatch.setattr(Figure, "savefig", full)
    for command in (["simulate", "--requests", "20"], ["search", *SEARCH]):
        assert main([*command, "--quiet", "--plot", str(png)]) == 2
        assert _err(capsys) == (
            f"chunked-prefill {command[0]}: error: argument --plot: cannot write {png}:"
            " No space left on device\n"
        )
        assert png.read_text() == KEPT
        assert os.listdir(tmp_path) == ["cdf.png"]


# --- item 16: Ctrl-C and signals ----------------------------------------------------------


@pytest.mark.parametrize("command", ["fit", "engines", "plan"])
def test_ctrl_c_is_one_line_and_130(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupt(args: Any) -> int:
        raise KeyboardInterrupt

    parser = top_cli.build_parser()
    sub = parser._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr]
    sub.set_defaults(func=interrupt)
    monkeypatch.setattr(top_cli, "build_parser", lambda command=None: parser)
    argv = {"fit": ["fit", "x.csv"], "engines": ["engines"], "plan": ["plan", "5"]}[command]
    handler = signal.getsignal(signal.SIGINT)
    assert main(argv) == 130
    captured = capsys.readouterr()
    assert captured.err == f"chunked-prefill {command}: interrupted\n"
    assert signal.getsignal(signal.SIGINT) is handler  # as it was


def _cmd(*argv: str) -> list[str]:
    return [sys.executable, "-m", "chunked_prefill", *argv]


def _state(pid: int) -> str | None:
    """The /proc state letter of ``pid``, or None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _children(pid: int) -> set[int]:
    """Live processes whose parent is ``pid``."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                state, ppid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
            except OSError:
                continue
            if int(ppid) == pid and state != "Z":
                found.add(int(entry.name))
    return found


def _workers(pid: int) -> set[int]:
    """The pool workers of ``pid`` (children running the spawn entry point)."""
    found = set()
    for child in _children(pid):
        try:
            line = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in line:
            found.add(child)
    return found


def _gone(pids: set[int], within: float) -> set[int]:
    """The ``pids`` still alive (not zombies) after waiting up to ``within`` seconds."""
    deadline = time.monotonic() + within
    while (alive := {p for p in pids if _state(p) not in (None, "Z")}) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.1)
    return alive


# About 9 s on a 2-core VM (20 000 requests took 1.5 s once the loop was issue 25's).
SLOW_SEARCH = "search --requests 200000 --chunk-size 256,512,1024,2048 --slo-ttft 2 --workers 2"


def _search_with_workers() -> tuple[subprocess.Popen[bytes], set[int]]:
    """A running search in a session of its own, once both its workers are probing."""
    proc = subprocess.Popen(
        _cmd(*SLOW_SEARCH.split()),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while len(workers := _workers(proc.pid)) < 2 and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    assert len(workers) == 2
    time.sleep(0.5)  # let them start probing
    return proc, workers


def _kill(proc: subprocess.Popen[bytes], workers: set[int]) -> None:
    """Clean up after a failed test: the workers first, as they hold the pipes open."""
    for pid in _gone(workers, 0):
        os.kill(pid, signal.SIGKILL)
    proc.kill()
    proc.communicate()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
@pytest.mark.parametrize(
    ("signum", "status", "line"),
    [
        (signal.SIGINT, 130, "chunked-prefill search: interrupted\n"),
        (signal.SIGTERM, 143, "chunked-prefill search: terminated by SIGTERM\n"),
        (signal.SIGHUP, 129, "chunked-prefill search: terminated by SIGHUP\n"),
    ],
)
def test_a_signalled_search_prints_one_line_and_stops_its_workers(
    signum: int, status: int, line: str
) -> None:
    """The signal goes to the whole process group, as a terminal's Ctrl-C does: the workers
    print nothing, the search one line, and no worker outlives it."""
    proc, workers = _search_with_workers()
    try:
        os.killpg(proc.pid, signum)
        out, err = proc.communicate(timeout=30)
        assert (proc.returncode, err.decode(), out) == (status, line, b"")
        assert _gone(workers, 10) == set()
    finally:
        _kill(proc, workers)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
def test_the_workers_of_a_killed_search_exit() -> None:
    """SIGKILL runs no cleanup in the search: its workers notice and exit on their own."""
    proc, workers = _search_with_workers()
    try:
        proc.kill()
        proc.wait(timeout=10)
        assert _gone(workers, 5) == set()
    finally:
        _kill(proc, workers)


@pytest.mark.parametrize(
    ("signum", "status", "line"),
    [
        (signal.SIGINT, 130, "chunked-prefill simulate: interrupted\n"),
        (signal.SIGTERM, 143, "chunked-prefill simulate: terminated by SIGTERM\n"),
    ],
)
def test_a_signalled_simulate_prints_one_line_and_keeps_its_files(
    signum: int, status: int, line: str, tmp_path: Path
) -> None:
    keep = tmp_path / "keep.csv"
    keep.write_text(KEPT)
    argv = [*PLANNER[:4], "--requests", "1000000", "--max-steps", str(10**12)]
    argv += ["--steps-csv", str(keep)]
    proc = subprocess.Popen(
        _cmd("simulate", *argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        time.sleep(3)
        assert proc.poll() is None, proc.communicate()
        os.killpg(proc.pid, signum)
        _, err = proc.communicate(timeout=30)
        assert (proc.returncode, err.decode()) == (status, line)
        assert keep.read_text() == KEPT
        assert os.listdir(tmp_path) == ["keep.csv"]
    finally:
        proc.kill()
        proc.communicate()


def test_a_closed_stdout_is_not_an_error(tmp_path: Path) -> None:
    """`simulate --json | head -c 1`: the reader left; exit 0, nothing on stderr."""
    argv = ["simulate", "--requests", "5", "--chunk-size", ",".join(map(str, range(1, 400)))]
    proc = subprocess.Popen(
        _cmd(*argv, "--json", "--quiet"), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(1) == b"["
    proc.stdout.close()
    err = proc.stderr.read()
    assert (proc.wait(timeout=60), err) == (0, b"")
