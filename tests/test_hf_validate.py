"""README's "Validate the simulator on your engine" runs as written (issue 24).

The three commands of its ``bash`` block run in a shell from the checkout with this
interpreter's ``python`` and ``chunked-prefill`` first on ``PATH`` and no ``PYTHONPATH``
(as after ``pip install '.[hf]'``), ``DIR`` a scratch folder and step 1 at CI size
(``--requests 20 --rate 10`` appended). Needs the ``hf`` extra; skipped without it
(scripts/test-hf.sh runs it in CI).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

_EXTRA = "needs torch and transformers: pip install '.[hf]' in the checkout"
pytest.importorskip("torch", reason=_EXTRA)
pytest.importorskip("transformers", reason=_EXTRA)

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    """The commands of the README section's ``bash`` block, continuation lines joined."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Validate the simulator on your engine", 1)[1]
    (block,) = re.findall(r"^```bash\n(.*?)^```", section.split("\n## ", 1)[0], re.S | re.M)
    joined = block.replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines() if line.strip() and line[0] != "#"]


def test_readme_block_is_the_three_steps() -> None:
    commands = readme_commands()
    assert len(commands) == 3
    assert commands[0] == "python benches/validate_simulator.py --out-dir DIR"
    assert commands[1].startswith("chunked-prefill fit DIR/steps.csv")
    assert commands[2].startswith("chunked-prefill simulate --trace DIR/trace.csv")


def test_readme_validation_runs_as_written(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    out = tmp_path / "run"
    first, fit, replay = (c.replace("DIR", str(out)) for c in readme_commands())
    done = []
    for command in (first + " --requests 20 --rate 10", fit, replay):
        proc = subprocess.run(
            ["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True
        )
        assert proc.returncode == 0, (command, proc.stderr)
        done.append(proc)
    progress = done[0].stderr.splitlines()
    assert progress[0] == "validate_simulator: 20 requests at 10/s, seed 0; building the model"
    assert any(line.startswith("validate_simulator: engine done in ") for line in progress)
    assert "| TTFT p50 |" in done[0].stdout
    assert {p.name for p in out.iterdir()} >= {"steps.csv", "trace.csv", "profile.json"}
    (predicted,) = json.loads(done[2].stdout)
    assert predicted["requests"] == 20
