"""The documentation's examples run: README.md and every page in docs/.

Every ``python`` block runs and passes ``mypy --strict``; every ``$ chunked-prefill ...``
line of a ``console`` block runs; the README links every page, and every relative link
points at a file (and heading) that exists. Blocks that need torch are run by
tests/test_hf.py in the hf venv.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from chunked_prefill import cli

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def pages() -> list[Path]:
    """README.md, then the pages of docs/ in name order."""
    return [README, *sorted(DOCS.glob("*.md"))]


def name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def blocks(page: Path, language: str) -> list[str]:
    """The ``language`` code blocks of ``page``, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", page.read_text(encoding="utf-8"), re.S | re.M)


def examples() -> list[tuple[str, int, str]]:
    """(page, index on that page, code) of every ``python`` block."""
    return [(name(p), i, code) for p in pages() for i, code in enumerate(blocks(p, "python"))]


def commands() -> list[tuple[str, str]]:
    """(page, command line) of every ``$ chunked-prefill`` line in a ``console`` block."""
    found = []
    for page in pages():
        for block in blocks(page, "console"):
            for line in block.splitlines():
                if line.startswith("$ chunked-prefill "):
                    found.append((name(page), line[2:]))
    return found


def uses_transformers(code: str) -> bool:
    """Whether an example needs the hf extra (tests/test_hf.py runs it)."""
    return "import torch" in code or "chunked_prefill import hf" in code


def uses_vllm(code: str) -> bool:
    """Whether an example runs inside vLLM (a model and vLLM's engine; tests/test_vllm_e2e.py
    runs LLM(..., scheduler_cls=...) end to end)."""
    return "from vllm" in code or "chunked_prefill.vllm" in code


def needs_missing_matplotlib(code: str) -> bool:
    """Whether an example draws a plot where the plot extra is not installed."""
    if "matplotlib" not in code:
        return False
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return True
    return False


@pytest.fixture
def in_scratch_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A scratch working directory in which ``examples/`` is the repository's."""
    (tmp_path / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_readme_has_examples() -> None:
    assert blocks(README, "python")
    assert any(page == "README.md" for page, _ in commands())


@pytest.mark.parametrize(
    ("page", "index", "code"), examples(), ids=[f"{p}-{i}" for p, i, _ in examples()]
)
def test_example_runs(page: str, index: int, code: str, in_scratch_dir: Path) -> None:
    if uses_transformers(code):
        pytest.skip("run by tests/test_hf.py, with the hf extra")
    if uses_vllm(code):
        pytest.skip("runs inside vLLM: tests/test_vllm_e2e.py does it end to end")
    if needs_missing_matplotlib(code):
        pytest.skip("needs the plot extra: pip install '.[plot]'")
    exec(compile(code, f"{page} example {index}", "exec"), {"__name__": "__readme__"})


def test_examples_pass_mypy_strict(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    files = []
    for page, index, code in examples():
        if uses_transformers(code) or uses_vllm(code) or needs_missing_matplotlib(code):
            continue
        path = tmp_path / f"{page.replace('/', '_').replace('.', '_')}_{index}.py"
        path.write_text(code, encoding="utf-8")
        files.append(str(path))
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", *files],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(("page", "line"), commands(), ids=[line for _, line in commands()])
def test_command_runs(
    page: str, line: str, in_scratch_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = shlex.split(line)
    if ">" in argv:  # a shell redirection: the test captures stdout instead
        argv = argv[: argv.index(">")]
    assert argv[0] == "chunked-prefill"
    if "--plot" in argv:
        pytest.importorskip("matplotlib")
    try:
        status = cli.main([*argv[1:], "--quiet"] if argv[1] == "simulate" else argv[1:])
    except SystemExit as done:  # --help and --version exit through argparse
        status = done.code
    assert status in (0, None), page
    out = capsys.readouterr().out
    assert out
    if "--plot" in argv:
        plot = in_scratch_dir / argv[argv.index("--plot") + 1]
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_example_trace_is_the_one_documented() -> None:
    """examples/trace.csv is what docs/simulate.md says: 200 requests, the 6 columns, every
    prompt longer than 128 tokens in prefix group ``system`` of 128 tokens."""
    from chunked_prefill.sim import load_trace

    text = (ROOT / "examples" / "trace.csv").read_text(encoding="utf-8")
    assert text.splitlines()[0] == (
        "arrival_s,prompt_tokens,output_tokens,cached_tokens,prefix_id,prefix_tokens"
    )
    assert "\n".join(text.splitlines()[:4]) in (DOCS / "simulate.md").read_text(encoding="utf-8")
    trace = load_trace(ROOT / "examples" / "trace.csv")
    assert len(trace) == 200
    assert 40 < max(trace.arrival_s) < 50
    long_prompts = [i for i, n in enumerate(trace.prompt_tokens) if n > 128]
    assert [trace.cached_tokens[i] for i in long_prompts] == [0] + [128] * (len(long_prompts) - 1)
    assert sum(trace.cached_tokens) == 128 * (len(long_prompts) - 1)
    assert trace.prefix_tokens == 128 and trace.shares_tokens
    assert [i for i, g in enumerate(trace.group) if g == 0] == long_prompts
    assert [g for g in trace.group if g != 0] == [-1] * (200 - len(long_prompts))


def test_example_trace_hits_the_prefix_cache() -> None:
    """The serving scheduler finds the trace's shared prefix without any flag (issue 24:
    with the prefix only as cached_tokens it found none)."""
    from chunked_prefill.sim import ServingSimConfig, load_trace, simulate_serving

    trace = load_trace(ROOT / "examples" / "trace.csv")
    (r,) = simulate_serving(trace, ServingSimConfig(chunk_size=512))
    assert r.serving is not None
    assert round(r.serving.prefix_hit_rate, 4) == 0.1482
    argv = ["simulate", "--trace", "examples/trace.csv", "--chunk-size", "512", "--json", "--quiet"]
    proc = subprocess.run(
        [sys.executable, "-m", "chunked_prefill", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    assert round(json.loads(proc.stdout)[0]["prefix_hit_rate"], 4) == 0.1482


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {slug(h) for h in re.findall(r"^#+ (.*)$", text, re.M)}


def test_readme_links_every_docs_page() -> None:
    linked = set(re.findall(r"\]\((docs/[^)#]+)", README.read_text(encoding="utf-8")))
    assert {name(p) for p in DOCS.glob("*.md")} <= linked


@pytest.mark.parametrize("page", pages(), ids=name)
def test_relative_links_resolve(page: Path) -> None:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{name(page)}: {target}"
        if anchor and linked.suffix == ".md":
            assert anchor in anchors(linked), f"{name(page)}: {target}"
