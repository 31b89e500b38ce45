"""The Python API: names, value types, conveniences, backend selection."""

from __future__ import annotations

import copy
import importlib.metadata
import os
import pickle
import subprocess
import sys
from types import ModuleType

import pytest

import chunked_prefill


def test_top_level_names_and_aliases() -> None:
    from chunked_prefill import (
        ChunkedPrefillConfig,
        ChunkedPrefillScheduler,
        ChunkedStep,
        Config,
        PrefillChunkState,
        Scheduler,
        Step,
    )

    assert ChunkedPrefillConfig is Config
    assert ChunkedPrefillScheduler is Scheduler
    assert ChunkedStep is Step
    expected = "pure" if os.environ.get("CHUNKED_PREFILL_BACKEND") == "pure" else "rust"
    assert expected == chunked_prefill.BACKEND
    module = chunked_prefill._core if expected == "rust" else chunked_prefill.pure
    assert Scheduler is module.Scheduler
    assert PrefillChunkState is module.PrefillChunkState


@pytest.mark.parametrize("name", ["pure", "rust"])
def test_backend_environment_variable(name: str) -> None:
    code = "import chunked_prefill as c; print(c.BACKEND, c.Scheduler.__module__)"
    env = {**os.environ, "CHUNKED_PREFILL_BACKEND": name}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == [name, {"pure": "chunked_prefill.pure", "rust": "chunked_prefill._core"}[name]]


def test_unknown_backend_is_an_import_error() -> None:
    env = {**os.environ, "CHUNKED_PREFILL_BACKEND": "cuda"}
    proc = subprocess.run(
        [sys.executable, "-c", "import chunked_prefill"], env=env, capture_output=True, text=True
    )
    assert proc.returncode != 0
    assert "CHUNKED_PREFILL_BACKEND must be 'rust' or 'pure', got 'cuda'" in proc.stderr


def test_version(backend: ModuleType) -> None:
    assert backend.__version__ == importlib.metadata.version("chunked-prefill")
    assert chunked_prefill.__version__ == backend.__version__


def test_constants(backend: ModuleType) -> None:
    assert (backend.U64_MAX, backend.I64_MIN, backend.I64_MAX) == (2**64 - 1, -(2**63), 2**63 - 1)
    assert backend.STATE_VERSION == 1


def test_config_defaults_equality_hash_repr(backend: ModuleType) -> None:
    c = backend.Config()
    assert (c.chunk_size, c.max_decode_tokens, c.interleave_decode) == (512, 128, True)
    assert (c.token_budget, c.max_prefills_per_step) == (None, 1)
    assert c == backend.Config(chunk_size=512)
    assert c != backend.Config(chunk_size=256)
    assert hash(c) == hash(backend.Config())
    assert len({c, backend.Config(), backend.Config(max_decode_tokens=0)}) == 2
    assert repr(c) == (
        "Config(chunk_size=512, max_decode_tokens=128, interleave_decode=True,"
        " token_budget=None, max_prefills_per_step=1)"
    )
    assert backend.Config(max_decode_tokens=0).max_decode_tokens == 0


def test_config_is_keyword_only_and_immutable(backend: ModuleType) -> None:
    with pytest.raises(TypeError):
        backend.Config(512)
    c = backend.Config()
    with pytest.raises(AttributeError):
        c.chunk_size = 3
    with pytest.raises(AttributeError):
        c.other = 3


def test_config_replace(backend: ModuleType) -> None:
    c = backend.Config(chunk_size=256)
    d = c.replace(token_budget=1024, max_prefills_per_step=2)
    assert (d.chunk_size, d.token_budget, d.max_prefills_per_step) == (256, 1024, 2)
    assert c.token_budget is None
    assert c.replace() == c
    assert d.to_dict() == {
        "chunk_size": 256,
        "max_decode_tokens": 128,
        "interleave_decode": True,
        "token_budget": 1024,
        "max_prefills_per_step": 2,
    }


def test_step_value_semantics(backend: ModuleType) -> None:
    s = backend.Scheduler(backend.Config(chunk_size=4))
    s.enqueue(9, 6)
    first = s.next_step(2)
    assert repr(first) == (
        "Step(step_index=0, decode_tokens=2, prefill_tokens=4,"
        " chunks=(Chunk(request_id=9, start=0, tokens=4, is_last=False),))"
    )
    same = backend.Step(step_index=0, decode_tokens=2, chunks=[backend.Chunk(9, 0, 4, False)])
    assert first == same
    assert hash(first) == hash(same)
    assert first != s.next_step(2)
    with pytest.raises(AttributeError):
        first.decode_tokens = 5
    empty = backend.Step(step_index=3, decode_tokens=1)
    assert (empty.prefill_request_id, empty.prefill_start, empty.is_last_chunk) == (None, 0, False)
    assert repr(empty) == "Step(step_index=3, decode_tokens=1, prefill_tokens=0, chunks=())"


def test_chunk_value_semantics(backend: ModuleType) -> None:
    a = backend.Chunk(1, 0, 5, False)
    b = backend.Chunk(1, 5, 3, True)
    assert a < b and b > a and a <= a and a >= a
    assert sorted([b, a]) == [a, b]
    assert pickle.loads(pickle.dumps(b)) == b
    assert copy.copy(b) == b
    assert repr(b) == "Chunk(request_id=1, start=5, tokens=3, is_last=True)"
    assert hash(a) == hash(backend.Chunk(1, 0, 5, False))
    with pytest.raises(AttributeError):
        a.tokens = 1


def test_prefill_chunk_state_fields_are_read_only(backend: ModuleType) -> None:
    st = backend.PrefillChunkState(5, 10, cached_tokens=3, priority=-4)
    assert (st.request_id, st.total_tokens, st.processed_tokens, st.is_complete) == (
        5,
        10,
        3,
        False,
    )
    assert (st.cached_tokens, st.priority) == (3, -4)
    for field in ("request_id", "total_tokens", "processed_tokens", "is_complete"):
        with pytest.raises(AttributeError):
            setattr(st, field, 1)
    assert st.progress() == 0.3
    assert repr(st) == (
        "PrefillChunkState(request_id=5, total_tokens=10, processed_tokens=3,"
        " is_complete=False, cached_tokens=3, priority=-4)"
    )
    full = backend.PrefillChunkState(6, 10, cached_tokens=10)
    assert full.processed_tokens == 9
    with pytest.raises(TypeError):
        hash(st)


def test_progress_is_double_precision(backend: ModuleType) -> None:
    st = backend.PrefillChunkState(1, 3)
    st.advance(1)
    assert st.progress() == 1 / 3
    big = backend.PrefillChunkState(1, 2**53 + 1)
    big.advance(2**53)
    assert big.progress() == float(2**53) / float(2**53 + 1) == 1.0


def test_scheduler_conveniences(backend: ModuleType) -> None:
    s = backend.Scheduler()
    assert s.config == backend.Config()
    s.enqueue(1, 700)
    s.enqueue(2, 10)
    assert len(s) == 2 == s.active_count()
    assert 1 in s and 3 not in s
    copy_of = s.state(1)
    copy_of.advance(100)
    assert s.state(1).processed_tokens == 0
    s.next_step()
    assert s.state(1).processed_tokens == 512
    assert repr(s) == (
        "Scheduler(config=Config(chunk_size=512, max_decode_tokens=128, interleave_decode=True,"
        " token_budget=None, max_prefills_per_step=1), tracked=2, incomplete=2,"
        " next_step_index=1)"
    )
    with pytest.raises(KeyError):
        s.state(3)


def test_scheduler_default_config_is_the_original(backend: ModuleType) -> None:
    assert backend.Scheduler().config == backend.Scheduler(None).config == backend.Config()


def test_pickle_and_copy_of_values(backend: ModuleType) -> None:
    config = backend.Config(token_budget=300, max_prefills_per_step=2)
    sched = backend.Scheduler(config)
    sched.enqueue(1, 500, priority=2)
    sched.enqueue(2, 50, cached_tokens=10)
    step = sched.next_step(4)
    state = sched.state(1)
    for value in (config, step, state):
        for clone in (pickle.loads(pickle.dumps(value)), copy.copy(value), copy.deepcopy(value)):
            assert clone == value
            assert type(clone) is type(value)
    for make in (lambda s: pickle.loads(pickle.dumps(s)), copy.copy, copy.deepcopy):
        clone = make(sched)
        assert type(clone) is type(sched)
        assert clone.to_state() == sched.to_state()
        assert clone.next_step(1) == sched.next_step(1)
        assert clone.to_state() == sched.to_state()
