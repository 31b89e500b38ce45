"""The host-engine helpers: the KV pool's size for a model on a GPU (the simulator's own
number) and the slot mapping of paged attention."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from types import ModuleType

import numpy as np
import pytest

import chunked_prefill
from chunked_prefill import batch_slot_mapping, num_blocks_for, slot_mapping
from chunked_prefill.sim.catalog import EngineFitError, ModelConfigError
from serving_invariants import SERVING_BACKENDS


@pytest.fixture(params=sorted(SERVING_BACKENDS))
def serving_backend(request: pytest.FixtureRequest) -> ModuleType:
    return SERVING_BACKENDS[request.param]


def test_exported() -> None:
    for name in ("num_blocks_for", "slot_mapping", "batch_slot_mapping"):
        assert name in chunked_prefill.__all__
        assert getattr(chunked_prefill, name).__doc__


def test_import_stays_light() -> None:
    code = "import sys, chunked_prefill; print('chunked_prefill.sim' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def simulated_pool(*flags: str) -> int:
    """The pool ``chunked-prefill simulate`` reports for these flags."""
    cmd = [sys.executable, "-m", "chunked_prefill", "simulate", "--requests", "2", *flags]
    env = {**os.environ, "COLUMNS": "400"}  # one line per fact, unwrapped
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout
    found = re.search(r"(\d+) KV blocks of (\d+) tokens", out)
    assert found is not None, out
    return int(found.group(1))


def test_num_blocks_matches_the_simulator() -> None:
    assert num_blocks_for("llama-3.1-8b", "h100-sxm") == 28181
    assert num_blocks_for("llama-3.1-8b", "h100-sxm") == simulated_pool(
        "--model", "llama-3.1-8b", "--gpu", "h100-sxm"
    )
    flags = ["--model", "llama-3.1-70b", "--gpu", "a100-80gb", "--tp", "4"]
    flags += ["--gpu-memory-utilization", "0.8", "--block-size", "32"]
    got = num_blocks_for(
        "llama-3.1-70b", "a100-80gb", tp=4, gpu_memory_utilization=0.8, block_size=32
    )
    assert got == simulated_pool(*flags)


def test_num_blocks_scales_with_the_block_and_the_dtype() -> None:
    base = num_blocks_for("llama-3.1-8b", "h100-sxm", block_size=16)
    assert num_blocks_for("llama-3.1-8b", "h100-sxm", block_size=32) == base // 2
    fp8 = num_blocks_for("llama-3.1-8b", "h100-sxm", kv_cache_dtype="fp8")
    assert fp8 >= 2 * base - 1


def test_num_blocks_errors() -> None:
    with pytest.raises(ModelConfigError):
        num_blocks_for("no-such-model", "h100-sxm")
    with pytest.raises(EngineFitError):
        num_blocks_for("llama-3.1-70b", "a100-40gb")
    with pytest.raises(ValueError, match="block_size must be at least 1, got 0"):
        num_blocks_for("llama-3.1-8b", "h100-sxm", block_size=0)


def test_slot_mapping_values() -> None:
    assert slot_mapping([7, 2, 5], [0, 1, 3, 4, 9, 11], 4) == [28, 29, 31, 8, 21, 23]
    assert slot_mapping((3,), range(2), 16) == [48, 49]
    assert slot_mapping([1, 0], [], 2) == []


def test_slot_mapping_numpy() -> None:
    got = slot_mapping(np.array([7, 2, 5]), np.array([0, 4, 11], dtype=np.int32), 4)
    assert isinstance(got, np.ndarray) and got.dtype == np.int64
    assert got.tolist() == [28, 8, 23]
    assert slot_mapping([7, 2, 5], np.arange(3), np.int64(4)).tolist() == [28, 29, 30]


@pytest.mark.parametrize("as_array", [False, True])
def test_slot_mapping_errors(as_array: bool) -> None:
    def wrap(values: list[int]) -> object:
        return np.array(values) if as_array else values

    beyond = "positions[1] must be between 0 and 7 (the block table's 8 slots), got 8"
    with pytest.raises(ValueError, match=re.escape(beyond)):
        slot_mapping([0, 1], wrap([7, 8]), 4)
    negative = "positions[0] must be between 0 and 7 (the block table's 8 slots), got -1"
    with pytest.raises(ValueError, match=re.escape(negative)):
        slot_mapping([0, 1], wrap([-1]), 4)
    with pytest.raises(ValueError, match="block_size must be at least 1, got 0"):
        slot_mapping([0, 1], wrap([0]), 0)


def test_slot_mapping_type_errors() -> None:
    with pytest.raises(TypeError, match=re.escape("positions[0] must be an int, got float: 1.5")):
        slot_mapping([0], [1.5], 4)
    with pytest.raises(TypeError, match="block_size must be an int, got bool: True"):
        slot_mapping([0], [0], True)
    with pytest.raises(TypeError, match="positions must hold ints, got an array of float64"):
        slot_mapping(np.array([0]), np.array([0.0]), 4)


def test_batch_slot_mapping(serving_backend: ModuleType) -> None:
    b = serving_backend
    cfg = b.ServingConfig(num_blocks=8, block_size=4, token_budget=16, chunk_size=6, max_running=2)
    s = b.ServingScheduler(cfg)
    s.add_request(1, list(range(10)), 2)
    s.add_request(2, list(range(100, 103)), 1)
    batch = s.schedule()
    # Request 1 computes positions 0..5 in blocks (0, 1); request 2 positions 0..2 in (2,).
    assert [i.new_blocks for i in batch.items] == [(0, 1), (2,)]
    assert batch_slot_mapping(s, batch) == [0, 1, 2, 3, 4, 5, 8, 9, 10]
    s.update(batch, token_ids=[7])
    batch = s.schedule()
    # Request 2 finished and freed block 2 (unhashed: to the head), which 1 takes next.
    assert [(i.request_id, i.start, i.tokens, i.new_blocks) for i in batch.items] == [
        (1, 6, 4, (2,))
    ]
    assert batch_slot_mapping(s, batch) == [6, 7, 8, 9]
