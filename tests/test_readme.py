"""The README's Python examples run, and pass ``mypy --strict``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def examples() -> list[str]:
    """The ``python`` code blocks of the README, in order."""
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def uses_transformers(code: str) -> bool:
    """Whether an example needs the hf extra (tests/test_hf.py runs it)."""
    return "import torch" in code or "chunked_prefill import hf" in code


def test_readme_has_examples() -> None:
    assert examples()


@pytest.mark.parametrize("index", range(len(examples())))
def test_readme_example_runs(index: int) -> None:
    code = examples()[index]
    if uses_transformers(code):
        pytest.skip("run by tests/test_hf.py, with the hf extra")
    exec(compile(code, f"README.md example {index}", "exec"), {"__name__": "__readme__"})


def test_readme_examples_pass_mypy_strict(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    files = []
    for index, code in enumerate(examples()):
        if uses_transformers(code):
            continue
        path = tmp_path / f"example_{index}.py"
        path.write_text(code, encoding="utf-8")
        files.append(str(path))
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", *files],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
