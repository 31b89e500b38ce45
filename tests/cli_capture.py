"""Run the `chunked-prefill` command line in this process and capture what it printed."""

from __future__ import annotations

import pytest

from chunked_prefill.cli import main


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``chunked-prefill ARGV...``: its exit status (argparse's exit included), stdout and
    stderr."""
    try:
        code = main(list(argv))
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err
