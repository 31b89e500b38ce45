"""What does not fit in memory is refused, never an abort (issue 21, items 4 and 5).

Each case runs in a child process under an address-space limit (``RLIMIT_AS``), so that an
allocation the machine could even make fails; the child must end normally, with a
``MemoryError`` or the CLI's one error line and status 2, not by ``SIGABRT``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

resource = pytest.importorskip("resource")
if not hasattr(resource, "RLIMIT_AS"):
    pytest.skip("no RLIMIT_AS on this platform", allow_module_level=True)

LIMIT = 3 << 30  # bytes of address space: an interpreter with numpy fits, 2**30 blocks not

PRELUDE = f"""
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({LIMIT}, {LIMIT}))
"""


def run_child(code: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=cwd,
    )


def run_cli(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_child(
        f"""
        from chunked_prefill.cli import main
        sys.argv = ["chunked-prefill", *{list(argv)!r}]
        sys.exit(main())
        """,
        cwd,
    )


IMPORTS = {
    "rust": "from chunked_prefill._core import ServingConfig, ServingScheduler",
    "pure": "from chunked_prefill.pure_values import ServingConfig\n"
    "from chunked_prefill.pure_serving import ServingScheduler",
}

SCHEDULE = """
{imports}
cfg = ServingConfig(num_blocks=2**40, block_size=1, token_budget=2**40, chunk_size=2**40)
s = ServingScheduler(cfg)
s.add_request(7, [5, 6, 7], 5)
s.update(s.schedule())
s.add_request(1, 2**30, 1)
try:
    s.schedule()
except MemoryError as err:
    print("MemoryError", err)
"""


@pytest.mark.parametrize("backend_name", sorted(IMPORTS))
def test_a_step_of_2_30_blocks_raises_memory_error(backend_name: str) -> None:
    child = run_child(SCHEDULE.format(imports=IMPORTS[backend_name]))
    assert child.returncode == 0, child.stderr
    assert child.stdout.startswith("MemoryError")


def test_rust_step_too_big_says_what_and_changes_nothing() -> None:
    child = run_child(
        SCHEDULE.format(imports=IMPORTS["rust"])
        + """
print(s.step_index, s.num_waiting, s.num_running, s.num_free_blocks, s.block_table(7))
s.abort(1)
batch = s.schedule()
print(batch.step_index, [item.request_id for item in batch.items])
"""
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.splitlines() == [
        "MemoryError schedule(): a step of up to 1073741825 KV blocks does not fit in memory",
        f"1 1 1 {2**40 - 3} [0, 1, 2]",
        "1 [7]",
    ]


def test_rust_step_beyond_any_memory_raises_without_a_limit() -> None:
    # 2**61 blocks pass isize::MAX bytes: refused on any machine, in this process.
    import chunked_prefill._core as m

    cfg = m.ServingConfig(num_blocks=2**62, block_size=1, token_budget=2**62, chunk_size=2**62)
    s = m.ServingScheduler(cfg)
    s.add_request(1, 2**61, 1)
    with pytest.raises(MemoryError) as info:
        s.schedule()
    assert str(info.value) == (
        f"schedule(): a step of up to {2**61} KV blocks does not fit in memory"
    )
    assert (s.step_index, s.num_waiting, s.num_running) == (0, 1, 0)


PROMPT_ERROR = "request 0's prompt of {} token ids does not fit in memory"


def test_simulate_huge_shared_prefix_is_one_error_line() -> None:
    child = run_cli(
        "simulate",
        "--requests",
        "2",
        "--prefix-tokens",
        "1099511627776",
        "--num-blocks",
        "100000000000",
    )
    assert child.returncode == 2, child.stderr
    assert child.stderr == (
        "chunked-prefill simulate: error: " + PROMPT_ERROR.format(1099511628294) + "\n"
    )


@pytest.mark.parametrize("column", ["session_id", "prefix_id", "hash_ids"])
def test_simulate_trace_of_huge_shared_prompts_is_one_error_line(
    column: str, tmp_path: Path
) -> None:
    value = {"session_id": "a", "prefix_id": "g", "hash_ids": "1 2 3"}[column]
    trace = tmp_path / "trace.csv"
    trace.write_text(
        f"arrival_s,prompt_tokens,output_tokens,{column}\n"
        f"0,1099511627776,4,{value}\n1,1099511627780,4,{value}\n"
    )
    child = run_cli("simulate", "--trace", str(trace), "--num-blocks", "100000000000")
    assert child.returncode == 2, child.stderr
    prefix = "chunked-prefill simulate: error: "
    if column == "prefix_id":
        # No --prefix-tokens: nothing shared, length-only prompts, whose block table grows a
        # chunk at a time, doubling, until it no longer fits (before the pool's records,
        # 24 bytes a block to its 8, whose next doubling comes later).
        assert child.stderr.startswith(prefix + "schedule(): the block table of request_id 0 (")
        assert child.stderr.endswith(" blocks) does not fit in memory\n")
        assert child.stderr.count("\n") == 1
    else:
        assert child.stderr == prefix + PROMPT_ERROR.format(1099511627776) + "\n"


def test_search_worker_memory_error_is_one_error_line() -> None:
    child = run_cli(
        "search",
        "--requests",
        "2",
        "--prefix-tokens",
        "1099511627776",
        "--num-blocks",
        "100000000000",
        "--slo-ttft",
        "1",
        "--workers",
        "2",
    )
    assert child.returncode == 2, child.stderr
    assert child.stderr == (
        "chunked-prefill search: error: " + PROMPT_ERROR.format(1099511628294) + "\n"
    )


def test_python_memory_error_says_what_happened() -> None:
    from chunked_prefill._args import memory_message

    assert memory_message(MemoryError()) == "the run does not fit in memory (MemoryError)"
    assert memory_message(MemoryError("a\nb")) == "a b"
