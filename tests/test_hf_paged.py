"""chunked_prefill.hf.PagedEngine: a paged KV pool driven by the ServingScheduler produces
the greedy tokens of ``model.generate()``, on both backends, while it chunks, shares
prefixes, preempts and aborts.

Needs the ``hf`` extra (torch, transformers); without it the whole module is skipped.
"""

from __future__ import annotations

import csv
import errno
import importlib
import os
import re
import stat
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

_EXTRA = "needs torch and transformers: pip install '.[hf]' in the checkout"
torch = pytest.importorskip("torch", reason=_EXTRA)
transformers = pytest.importorskip("transformers", reason=_EXTRA)

from chunked_prefill import hf  # noqa: E402
from hf_common import (  # noqa: E402
    CHUNK_SIZES,
    LENGTHS,
    make_prompts,
    one_torch_thread,  # noqa: F401  (an autouse fixture, used by being imported)
    refused,
    tiny_llama,
)

ROOT = Path(__file__).resolve().parents[1]
MAX_NEW = 8


@pytest.fixture(params=["pure", "rust"], scope="module")
def backend(request: pytest.FixtureRequest) -> ModuleType:
    """The serving scheduler of each backend; the Rust one is skipped until it is bound."""
    name = {"pure": "chunked_prefill.pure_serving", "rust": "chunked_prefill._core"}
    module = importlib.import_module(name[request.param])
    if not hasattr(module, "ServingScheduler"):
        pytest.skip(f"{module.__name__} has no ServingScheduler yet (the binding is not merged)")
    return module


@pytest.fixture(scope="module")
def model() -> Any:
    return tiny_llama()


_REFERENCE: dict[tuple[int, ...], list[int]] = {}


def reference(model: Any, prompts: list[list[int]], max_new: int = MAX_NEW) -> list[list[int]]:
    """Unchunked greedy ``model.generate`` of each prompt alone, computed once per prompt
    (greedy outputs of fewer tokens are prefixes of longer ones)."""
    outs = []
    for p in prompts:
        key = tuple(p)
        if len(_REFERENCE.get(key, ())) < max_new:
            ids = torch.tensor([p])
            n = max(max_new, MAX_NEW)
            out = model.generate(ids, do_sample=False, max_new_tokens=n, min_new_tokens=n)
            _REFERENCE[key] = out[0, len(p) :].tolist()
        outs.append(_REFERENCE[key][:max_new])
    return outs


def config(backend: ModuleType, **changes: Any) -> Any:
    options: dict[str, Any] = {
        "num_blocks": 64,
        "block_size": 4,
        "token_budget": 24,
        "chunk_size": 8,
        "max_prefills_per_step": 3,
        "max_running": 16,
    }
    options.update(changes)
    return backend.ServingConfig(**options)


class Recording(hf.PagedEngine):
    """Keeps every batch, and how many tokens each preempted request had generated."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batches: list[Any] = []
        self.preempted_after: list[int] = []  # generated tokens of each preempted request
        self.recomputed = 0  # generated tokens that prefill items computed again

    def _scheduled(self, batch: Any) -> None:
        self.batches.append(batch)
        run = self._run
        assert run is not None
        for rid in batch.preempted:
            self.preempted_after.append(len(run.seqs[rid]) - run.prompt_lens[rid])
        for it in batch.items:
            if it.is_prefill:
                end = it.start + it.tokens
                self.recomputed += max(0, end - max(it.start, run.prompt_lens[it.request_id]))


def check_drained(engine: hf.PagedEngine) -> None:
    """After a run the scheduler tracks nothing and every block is free again."""
    assert len(engine.scheduler) == 0
    assert engine.scheduler.num_free_blocks == engine.config.num_blocks


# -- chunking ----------------------------------------------------------------------------


@pytest.mark.parametrize("chunk_size", CHUNK_SIZES)
def test_chunk_sizes_match_generate(model: Any, backend: ModuleType, chunk_size: int) -> None:
    prompts = make_prompts(LENGTHS)
    engine = Recording(model, config(backend, chunk_size=chunk_size), backend=backend)
    assert engine.generate(prompts, max_new_tokens=MAX_NEW) == reference(model, prompts)
    check_drained(engine)
    prefills = [sum(it.is_prefill for it in b.items) for b in engine.batches]
    assert max(prefills) == 3  # several prefills share a step
    widest = max(it.tokens for b in engine.batches for it in b.items)
    assert widest <= chunk_size
    assert widest == chunk_size or chunk_size > 8


@pytest.mark.parametrize(
    "changes",
    [
        {"token_budget": 7, "max_prefills_per_step": 1, "max_running": 6},
        {"token_budget": 40, "chunk_size": 40, "max_prefills_per_step": 6},
        {"block_size": 1, "chunk_size": 3},
        {"block_size": 16, "chunk_size": 5, "num_blocks": 16},
    ],
    ids=["budget7x1", "one-step-prefills", "block1", "block16"],
)
@pytest.mark.parametrize("separate", [False, True], ids=["one-pass", "separate-decodes"])
def test_policies_match_generate(
    model: Any, backend: ModuleType, changes: dict[str, Any], separate: bool
) -> None:
    prompts = make_prompts((*LENGTHS, 40, 3, 26), seed=2)
    cfg = config(backend, **changes)
    engine = hf.PagedEngine(model, cfg, backend=backend, separate_decodes=separate)
    assert engine.generate(prompts, max_new_tokens=MAX_NEW) == reference(model, prompts)
    check_drained(engine)


def test_one_new_token_and_reuse(model: Any, backend: ModuleType) -> None:
    """max_new_tokens=1 samples at the last prompt chunk; a second run starts afresh."""
    prompts = make_prompts(LENGTHS, seed=3)
    engine = hf.PagedEngine(model, config(backend, chunk_size=4), backend=backend)
    assert engine.generate(prompts, max_new_tokens=1) == reference(model, prompts, max_new=1)
    assert engine.generate(prompts, max_new_tokens=MAX_NEW) == reference(model, prompts)
    assert engine.generate([], max_new_tokens=1) == []


def test_max_new_tokens_per_prompt(model: Any, backend: ModuleType) -> None:
    """One ``max_new_tokens`` per prompt: each output is that prompt's reference prefix."""
    prompts = make_prompts(LENGTHS, seed=3)
    lengths = [1, 8, 3, 5, 2, 7]
    engine = hf.PagedEngine(model, config(backend, chunk_size=4), backend=backend)
    out = engine.generate(prompts, max_new_tokens=lengths)
    assert [len(o) for o in out] == lengths
    assert out == [r[:n] for r, n in zip(reference(model, prompts), lengths)]
    assert engine.generate(prompts, max_new_tokens=torch.tensor(lengths)) == out
    two = reference(model, prompts[:2], max_new=2)
    assert engine.generate(prompts[:2], max_new_tokens=torch.tensor(2)) == two  # a 0-d tensor
    check_drained(engine)


def test_pool_layout(model: Any, backend: ModuleType) -> None:
    engine = hf.PagedEngine(model, config(backend, num_blocks=10), backend=backend)
    assert engine.pool.keys(0).shape == (10, 4, 2, 16)
    assert engine.pool.values(1).shape == (10, 4, 2, 16)
    assert engine.pool.data.dtype == model.dtype
    assert engine.pool.data.device == model.device
    assert engine.pool.data.shape == (2, 2, 10, 4, 2, 16)


# -- prefix caching ----------------------------------------------------------------------


@pytest.mark.parametrize("prefix_caching", [True, False])
def test_shared_prefixes(model: Any, backend: ModuleType, prefix_caching: bool) -> None:
    """Prompts sharing 40 tokens: later ones start after the cached blocks, and match."""
    prompts = make_prompts((5, 17, 2, 30, 1, 9), seed=3, prefix=40)
    cfg = config(backend, max_prefills_per_step=1, prefix_caching=prefix_caching)
    engine = Recording(model, cfg, backend=backend)
    assert engine.generate(prompts, max_new_tokens=MAX_NEW) == reference(model, prompts)
    check_drained(engine)
    cached = [t.cached_tokens for t in engine.last_run]
    starts = [it.start for b in engine.batches for it in b.items if it.cached_tokens]
    if prefix_caching:
        assert cached[0] == 0
        assert all(c == 40 for c in cached[1:])  # ten full blocks of 4
        assert engine.scheduler.num_cached_tokens == 40 * (len(prompts) - 1)
        assert starts == [40] * (len(prompts) - 1)
    else:
        assert cached == [0] * len(prompts)
        assert engine.scheduler.num_cached_tokens == 0


def test_cache_salts_separate_prefixes(model: Any, backend: ModuleType) -> None:
    """The same tokens under salts 0, 1, 0, 1: each salt only hits its own blocks."""
    prompt = make_prompts((21,), seed=4)[0]
    prompts = [prompt] * 4
    engine = hf.PagedEngine(model, config(backend, max_prefills_per_step=1), backend=backend)
    out = engine.generate(prompts, max_new_tokens=MAX_NEW, cache_salts=[0, 1, 0, 1])
    assert out == reference(model, prompts)
    assert [t.cached_tokens for t in engine.last_run] == [0, 0, 20, 20]
    same = hf.PagedEngine(model, config(backend, max_prefills_per_step=1), backend=backend)
    same.generate(prompts, max_new_tokens=MAX_NEW)
    assert [t.cached_tokens for t in same.last_run] == [0, 20, 20, 20]


# -- preemption --------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", [0, 8])
def test_small_pool_preempts_and_recomputes(model: Any, backend: ModuleType, prefix: int) -> None:
    """A pool barely larger than one request: decodes are preempted and recomputed, often."""
    prompts = make_prompts((4, 5, 6, 7, 3, 2), seed=5, prefix=prefix)
    max_new = 40
    need = -(-(max(map(len, prompts)) + max_new - 1) // 4)
    engine = Recording(model, config(backend, num_blocks=need + 1), backend=backend)
    expected = reference(model, prompts, max_new)
    assert engine.generate(prompts, max_new_tokens=max_new) == expected
    separate = hf.PagedEngine(model, engine.config, backend=backend, separate_decodes=True)
    assert separate.generate(prompts, max_new_tokens=max_new) == expected
    check_drained(engine)
    assert engine.scheduler.num_preemptions >= 10
    assert sorted(t.num_preemptions for t in engine.last_run)[-2:] == [3, 3]
    assert min(engine.preempted_after) > 0  # every preemption hit a decoding request
    assert max(engine.preempted_after) >= 15
    assert engine.recomputed >= sum(engine.preempted_after) - engine.scheduler.num_cached_tokens


# -- stopping early ----------------------------------------------------------------------


class AbortAt(Recording):
    """Aborts prompts when given steps are scheduled: ``{step_index: [prompt, ...]}``."""

    def __init__(self, *args: Any, aborts: dict[int, list[int]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.aborts = aborts

    def _scheduled(self, batch: Any) -> None:
        super()._scheduled(batch)
        for rid in self.aborts.get(batch.step_index, []):
            self.abort(rid)


def test_aborts_mid_run(model: Any, backend: ModuleType) -> None:
    prompts = make_prompts((*LENGTHS, 20, 11), seed=6)
    expected = reference(model, prompts)
    engine = AbortAt(
        model,
        config(backend, token_budget=10, max_prefills_per_step=2, max_running=4),
        backend=backend,
        aborts={0: [0], 3: [5, 7], 5: [1], 6: [1], 7: [6], 8: [4]},
    )
    out = engine.generate(prompts, max_new_tokens=MAX_NEW)
    check_drained(engine)
    aborted = {i for i, t in enumerate(engine.last_run) if t.aborted}
    assert aborted == {0, 1, 4, 5, 6, 7}
    for i, (tokens, ref) in enumerate(zip(out, expected)):
        if i in aborted:
            assert tokens == ref[: len(tokens)]
            assert len(tokens) < MAX_NEW
        else:
            assert tokens == ref
    # 0 had an item in the aborted step (its token is dropped), 5 and 7 were still waiting,
    # 6 was mid-prefill, 1 and 4 were decoding.
    assert any(it.request_id == 0 and it.samples for it in engine.batches[0].items)
    assert out[0] == out[5] == out[7] == out[6] == []
    assert out[1] and out[4]
    started = {it.request_id for b in engine.batches for it in b.items}
    assert 5 not in started and 7 not in started and 6 in started


def test_abort_outside_a_run(model: Any, backend: ModuleType) -> None:
    engine = hf.PagedEngine(model, config(backend), backend=backend)
    with pytest.raises(RuntimeError, match="generate"):
        engine.abort(0)
    engine = AbortAt(model, config(backend), backend=backend, aborts={0: [9]})
    with pytest.raises(IndexError, match="9"):
        engine.generate([[1, 2]], max_new_tokens=2)


def test_abort_from_another_thread(model: Any, backend: ModuleType) -> None:
    """A client going away: another thread aborts prompt 0 once it has a token."""
    import threading

    prompts = make_prompts((9, 17, 5), seed=12)
    expected = reference(model, prompts, max_new=40)
    engine = hf.PagedEngine(model, config(backend), backend=backend)
    done = threading.Event()

    def client() -> None:
        while not done.is_set():
            timings = engine.last_run
            if timings and timings[0].token_s:
                engine.abort(0)
                return
            done.wait(0.001)

    thread = threading.Thread(target=client)
    thread.start()
    try:
        out = engine.generate(prompts, max_new_tokens=40)
    finally:
        done.set()
        thread.join()
    check_drained(engine)
    assert out[1:] == expected[1:]
    assert out[0] == expected[0][: len(out[0])]
    assert engine.last_run[0].aborted == (len(out[0]) < 40)


def test_one_run_at_a_time(model: Any, backend: ModuleType) -> None:
    class Reentrant(hf.PagedEngine):
        def _scheduled(self, batch: Any) -> None:
            self.generate([[1]], max_new_tokens=1)

    engine = Reentrant(model, config(backend), backend=backend)
    with pytest.raises(RuntimeError, match="already running"):
        engine.generate([[1, 2]], max_new_tokens=2)


def test_eos_stops_some_requests_early(model: Any, backend: ModuleType) -> None:
    prompts = make_prompts((*LENGTHS, 20, 11), seed=7)
    full = reference(model, prompts)
    eos = full[3][2]
    expected = [
        model.generate(
            torch.tensor([p]), do_sample=False, max_new_tokens=MAX_NEW, eos_token_id=eos
        )[0, len(p) :].tolist()
        for p in prompts
    ]
    assert expected == [r[: r.index(eos) + 1] if eos in r else r for r in full]
    assert sum(len(e) < MAX_NEW for e in expected) >= 1
    assert sum(len(e) == MAX_NEW for e in expected) >= 1
    engine = hf.PagedEngine(model, config(backend, chunk_size=5), backend=backend)
    assert engine.generate(prompts, max_new_tokens=MAX_NEW, eos_token_id=eos) == expected
    check_drained(engine)
    assert engine.generate(prompts, max_new_tokens=MAX_NEW, eos_token_id=[eos, 999]) == expected
    assert engine.generate(prompts, max_new_tokens=MAX_NEW, eos_token_id=torch.tensor(eos)) == (
        expected
    )


# -- the test can fail -------------------------------------------------------------------


class Corrupted(hf.PagedEngine):
    """Hands request 1 the first block of request 0 in place of its own first block."""

    def _block_table(self, request_id: int) -> list[int]:
        table = super()._block_table(request_id)
        if request_id == 1 and 0 in self.scheduler and self.scheduler.block_table(0):
            table[0] = self.scheduler.block_table(0)[0]
        return table


def test_corrupted_block_table_changes_the_outputs(model: Any, backend: ModuleType) -> None:
    prompts = make_prompts((20, 20, 20), seed=8)
    expected = reference(model, prompts)
    assert (
        hf.PagedEngine(model, config(backend), backend=backend).generate(
            prompts, max_new_tokens=MAX_NEW
        )
        == expected
    )
    out = Corrupted(model, config(backend), backend=backend).generate(
        prompts, max_new_tokens=MAX_NEW
    )
    assert out[:2] != expected[:2]
    assert out[2] == expected[2]


# -- recording ---------------------------------------------------------------------------


def test_steps_csv(model: Any, backend: ModuleType, tmp_path: Path) -> None:
    prompts = make_prompts(LENGTHS, seed=9)
    path = tmp_path / "steps.csv"
    engine = hf.PagedEngine(model, config(backend, chunk_size=5), backend=backend)
    engine.generate(prompts, max_new_tokens=MAX_NEW, steps_csv=path)
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert (
        tuple(rows[0])
        == hf.STEP_COLUMNS
        == (
            "prefill_tokens",
            "decode_tokens",
            "attention_pairs",
            "decode_context_tokens",
            "duration_s",
            "prefill_chunk_sq",
            "prefill_chunks",
        )
    )
    steps = engine.last_steps
    assert len(rows) == len(steps) + 1
    for row, s in zip(rows[1:], steps):
        assert [int(x) for x in row[:4]] == [
            s.prefill_tokens,
            s.decode_tokens,
            s.attention_pairs,
            s.decode_context_tokens,
        ]
        assert float(row[4]) == s.duration_s > 0
        assert s.cpu_s >= 0
        assert int(row[5]) == s.prefill_chunk_sq <= s.prefill_tokens**2
        assert int(row[6]) == s.prefill_chunks <= s.num_items
        assert (s.prefill_chunks > 0) == (s.prefill_tokens > 0)
        assert s.prefill_tokens + s.decode_tokens <= 24
    assert sum(s.cpu_s for s in steps) > 0  # the engine's own thread ran the model
    assert sum(s.prefill_tokens for s in steps) == sum(map(len, prompts))
    assert sum(s.decode_tokens for s in steps) == len(prompts) * (MAX_NEW - 1)
    # Without sharing, every prompt's chunks tile its causal triangle, and every decode
    # reads its prompt plus the tokens before it.
    assert sum(s.attention_pairs for s in steps) == sum(n * (n + 1) // 2 for n in LENGTHS)
    assert sum(s.decode_context_tokens for s in steps) == sum(
        sum(n + k for k in range(1, MAX_NEW)) for n in LENGTHS
    )


def test_steps_of_one_request(model: Any, backend: ModuleType) -> None:
    engine = hf.PagedEngine(model, config(backend, chunk_size=4), backend=backend)
    engine.generate([list(range(10))], max_new_tokens=3)
    got = [
        (s.prefill_tokens, s.decode_tokens, s.attention_pairs, s.decode_context_tokens)
        for s in engine.last_steps
    ]
    # Chunks of 4, 4, 2 tokens after 0, 4, 8: pairs n*start + n*(n+1)/2; decodes at 10, 11.
    assert got == [(4, 0, 10, 0), (4, 0, 26, 0), (2, 0, 19, 0), (0, 1, 0, 11), (0, 1, 0, 12)]


def test_wall_clock_arrivals(model: Any, backend: ModuleType) -> None:
    prompts = make_prompts((9, 17, 5, 3), seed=10)
    arrivals = [0.0, 0.15, 0.05, 0.3]
    engine = hf.PagedEngine(model, config(backend, chunk_size=4), backend=backend)
    out = engine.generate(prompts, max_new_tokens=MAX_NEW, arrival_s=arrivals)
    assert out == reference(model, prompts)
    for t, a, tokens in zip(engine.last_run, arrivals, out):
        assert t.arrival_s == a
        assert t.first_token_s is not None and t.finish_s is not None
        assert a < t.first_token_s == t.token_s[0]
        assert t.token_s == sorted(t.token_s) and len(t.token_s) == len(tokens)
        assert t.finish_s == t.token_s[-1]
        assert not t.aborted


# -- arguments ---------------------------------------------------------------------------


def test_rejects_bad_arguments(model: Any, backend: ModuleType) -> None:
    engine = hf.PagedEngine(model, config(backend, num_blocks=4), backend=backend)
    with pytest.raises(ValueError):  # the scheduler's own check: never fits
        engine.generate([list(range(16))], max_new_tokens=2)
    with pytest.raises(ValueError, match="never"):
        engine.generate([list(range(16))], max_new_tokens=2)
    assert len(engine.scheduler) == 0


_MODEL_TEXT = "model must be a transformers causal LM (a torch.nn.Module with a config), got"
_PROMPTS_TEXT = "prompts must be a sequence of prompts (each a sequence of token ids), got"
_BOOL = "must be an int, got the bool True: a bool is not a number"
_PATH_TEXT = "steps_csv must be a file path (a str or an os.PathLike of a str), got"

# Every argument of PagedEngine.generate, each refused before any step with its message.
_GENERATE_REFUSALS = [
    ({"prompts": "hello"}, TypeError, f"{_PROMPTS_TEXT} str: 'hello'; tokenize the text first"),
    ({"prompts": None}, TypeError, f"{_PROMPTS_TEXT} NoneType: None"),
    ({"prompts": 7}, TypeError, f"{_PROMPTS_TEXT} int: 7"),
    ({"prompts": {0: [1]}}, TypeError, f"{_PROMPTS_TEXT} dict: {{0: [1]}}"),
    (
        {"prompts": [[1], "hi"]},
        TypeError,
        "prompts[1] must be a sequence of token ids, got str: 'hi'; tokenize the text first",
    ),
    ({"prompts": [[1], []]}, ValueError, "prompts[1] must hold at least 1 token, got 0"),
    ({"prompts": [[1, 2.0]]}, TypeError, "prompts[0][1] must be an int, got float: 2.0"),
    ({"prompts": [[1, True]]}, TypeError, f"prompts[0][1] {_BOOL}"),
    ({"prompts": [[1, None]]}, TypeError, "prompts[0][1] must be an int, got NoneType: None"),
    (
        {"prompts": [[1, 128]]},
        ValueError,
        "prompts[0][1] must be a token id of the model's vocabulary [0, 128), got 128",
    ),
    (
        {"prompts": [[-5]]},
        ValueError,
        "prompts[0][0] must be a token id of the model's vocabulary [0, 128), got -5",
    ),
    ({"max_new_tokens": True}, TypeError, f"max_new_tokens {_BOOL}"),
    ({"max_new_tokens": 0}, ValueError, "max_new_tokens must be at least 1, got 0"),
    ({"max_new_tokens": -1}, ValueError, "max_new_tokens must be at least 1, got -1"),
    ({"max_new_tokens": 1.0}, TypeError, "max_new_tokens must be an int, got float: 1.0"),
    (
        {"max_new_tokens": None},
        TypeError,
        "max_new_tokens must be a number or a sequence of"
        " one number per prompt, got NoneType: None",
    ),
    (
        {"max_new_tokens": "3"},
        TypeError,
        "max_new_tokens must be a number or a sequence of one number per prompt, got str: '3'",
    ),
    (
        {"max_new_tokens": 2**64},
        OverflowError,
        "max_new_tokens must be at most 18446744073709551615, got 18446744073709551616",
    ),
    (
        {"max_new_tokens": 10**12},
        ValueError,
        "request_id 0 can never fit: 1 prompt tokens and"
        " max_new_tokens 1000000000000 need 250000000000 blocks of 4 tokens, above the 64 usable"
        " blocks (num_blocks 64 minus 0 watermark blocks)",
    ),
    (
        {"max_new_tokens": [2, 2]},
        ValueError,
        "max_new_tokens needs one entry per prompt (1) when it is a sequence, got 2",
    ),
    (
        {"max_new_tokens": [False]},
        TypeError,
        "max_new_tokens[0] must be an int, got the bool False: a bool is not a number",
    ),
    ({"max_new_tokens": [0]}, ValueError, "max_new_tokens[0] must be at least 1, got 0"),
    ({"eos_token_id": True}, TypeError, f"eos_token_id {_BOOL}"),
    (
        {"eos_token_id": -1},
        ValueError,
        "eos_token_id must be a token id between 0 and 4294967295, got -1",
    ),
    (
        {"eos_token_id": "</s>"},
        TypeError,
        "eos_token_id must be None, a token id or a sequence of token ids, got str: '</s>'",
    ),
    ({"eos_token_id": [3, 1.5]}, TypeError, "eos_token_id[1] must be an int, got float: 1.5"),
    ({"cache_salts": [-1]}, ValueError, "cache_salts[0] must be non-negative, got -1"),
    ({"cache_salts": [True]}, TypeError, f"cache_salts[0] {_BOOL}"),
    (
        {"cache_salts": [0, 0]},
        ValueError,
        "cache_salts needs one entry per prompt (1) when it is a sequence, got 2",
    ),
    (
        {"arrival_s": [float("nan")]},
        ValueError,
        "arrival_s[0] must be a finite number of seconds >= 0, got nan",
    ),
    (
        {"arrival_s": [float("inf")]},
        ValueError,
        "arrival_s[0] must be a finite number of seconds >= 0, got inf",
    ),
    (
        {"arrival_s": [-1]},
        ValueError,
        "arrival_s[0] must be a finite number of seconds >= 0, got -1.0",
    ),
    ({"arrival_s": ["0"]}, TypeError, "arrival_s[0] must be a float or an int, got str: '0'"),
    ({"arrival_s": [True]}, TypeError, "arrival_s[0] must be a float or an int, got bool: True"),
    ({"steps_csv": 3}, TypeError, f"{_PATH_TEXT} int: 3"),
    ({"steps_csv": b"s.csv"}, TypeError, f"{_PATH_TEXT} bytes: b's.csv'"),
    ({"steps_csv": ""}, ValueError, "steps_csv must be a non-empty file path without NUL, got ''"),
    (
        {"steps_csv": "a\0b"},
        ValueError,
        "steps_csv must be a non-empty file path without NUL, got 'a\\x00b'",
    ),
    (
        {"steps_csv": "/nonexistent/d/s.csv"},
        FileNotFoundError,
        "steps_csv: cannot write '/nonexistent/d/s.csv': No such file or directory",
    ),
]


@pytest.mark.parametrize(("change", "exc", "text"), _GENERATE_REFUSALS)
def test_generate_refuses_each_bad_argument(
    model: Any, backend: ModuleType, change: dict[str, Any], exc: type[Exception], text: str
) -> None:
    """Refused before any step: no batch scheduled, the last run's results untouched."""
    engine = Recording(model, config(backend), backend=backend)
    engine.generate([[1, 2]], max_new_tokens=1)
    before = (engine.scheduler, engine.last_run, engine.last_steps, len(engine.batches))
    args: dict[str, Any] = {"prompts": [[1]], "max_new_tokens": 1}
    args.update(change)
    with refused(exc, text):
        engine.generate(args.pop("prompts"), **args)
    assert (engine.scheduler, engine.last_run, engine.last_steps, len(engine.batches)) == before
    assert engine._run is None


def test_constructor_refuses_bad_arguments(model: Any, backend: ModuleType) -> None:
    import chunked_prefill.pure as planner

    good = config(backend)
    with refused(TypeError, f"{_MODEL_TEXT} NoneType: None"):
        hf.PagedEngine(None, good, backend=backend)
    with refused(TypeError, f"{_MODEL_TEXT} str: 'meta-llama/Llama-3.2-1B'"):
        hf.PagedEngine("meta-llama/Llama-3.2-1B", good, backend=backend)
    with refused(TypeError, "config must be a ServingConfig, got NoneType: None"):
        hf.PagedEngine(model, None, backend=backend)
    with refused(TypeError, "config must be a ServingConfig, got dict: {'num_blocks': 4}"):
        hf.PagedEngine(model, {"num_blocks": 4}, backend=backend)
    with refused(TypeError, f"config must be a ServingConfig, got Config: {planner.Config()!r}"):
        hf.PagedEngine(model, planner.Config(), backend=backend)
    with refused(TypeError, "backend must be None, 'rust', 'pure' or a module, got int: 42"):
        hf.PagedEngine(model, good, backend=42)
    text = "backend must be None, 'rust', 'pure', a module or the name of one, got 'cpu'"
    with refused(ValueError, text):
        hf.PagedEngine(model, good, backend="cpu")
    with refused(ValueError, "backend 'os' has no ServingScheduler and ServingConfig"):
        hf.PagedEngine(model, good, backend="os")
    with refused(TypeError, "separate_decodes must be a bool, got int: 1"):
        hf.PagedEngine(model, good, backend=backend, separate_decodes=1)
    # 2**40 blocks of 16 tokens: far above any machine's memory, refused before allocating.
    huge = config(backend, num_blocks=2**40, block_size=16)
    with pytest.raises(MemoryError) as info:
        hf.PagedEngine(model, huge, backend=backend)
    assert str(info.value).startswith(
        "the KV pool of 1099511627776 blocks of 16 tokens (2 layers, keys and values, 2 heads"
        " of 16 torch.float32 values) needs 9007199254740992 bytes, above the "
    )
    assert str(info.value).endswith(" bytes of cpu; lower num_blocks")


def test_abort_refuses_bad_indices(model: Any, backend: ModuleType) -> None:
    engine = hf.PagedEngine(model, config(backend), backend=backend)
    with refused(TypeError, f"index {_BOOL}"):
        engine.abort(True)
    with refused(TypeError, "index must be an int, got float: 0.0"):
        engine.abort(0.0)  # type: ignore[arg-type]
    with refused(RuntimeError, "abort() needs a generate() in progress"):
        engine.abort(0)

    class AbortAt(hf.PagedEngine):
        def _scheduled(self, batch: Any) -> None:
            with refused(IndexError, "index must be a prompt index between 0 and 1, got 2"):
                self.abort(2)
            with refused(IndexError, "index must be a prompt index between 0 and 1, got -1"):
                self.abort(-1)

    AbortAt(model, config(backend), backend=backend).generate([[1], [2]], max_new_tokens=1)


def test_kv_pool_refuses_bad_sizes(model: Any) -> None:
    sizes = {"num_layers": 1, "num_blocks": 2, "block_size": 2, "kv_heads": 1, "head_dim": 4}
    kinds = {"dtype": torch.float32, "device": "cpu"}
    assert hf.KVPool(**sizes, **kinds).data.shape == (1, 2, 2, 2, 1, 4)
    for key in sizes:
        with refused(ValueError, f"{key} must be at least 1, got 0"):
            hf.KVPool(**{**sizes, key: 0}, **kinds)
        with refused(TypeError, f"{key} {_BOOL}"):
            hf.KVPool(**{**sizes, key: True}, **kinds)
    with refused(TypeError, "dtype must be a floating-point torch.dtype, got dtype: torch.int64"):
        hf.KVPool(**sizes, dtype=torch.int64, device="cpu")
    with refused(TypeError, "device must be a torch.device, a str or an int, got NoneType: None"):
        hf.KVPool(**sizes, dtype=torch.float32, device=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^device must name a torch device, got 'gpu0': "):
        hf.KVPool(**sizes, dtype=torch.float32, device="gpu0")  # type: ignore[arg-type]
    with refused(TypeError, "block_size must be an int, got float: 4.0"):
        hf.KVPool.for_model(model, 4, 4.0)  # type: ignore[arg-type]
    with refused(TypeError, f"{_MODEL_TEXT} NoneType: None"):
        hf.KVPool.for_model(None, 4, 4)


# -- the steps file: checked before the run, replaced whole after it ----------------------


def test_steps_csv_paths_refused_before_any_step(
    model: Any, backend: ModuleType, tmp_path: Path
) -> None:
    engine = Recording(model, config(backend), backend=backend)
    dangling = tmp_path / "link.csv"
    dangling.symlink_to(tmp_path / "missing" / "s.csv")
    afile = tmp_path / "afile"
    afile.write_text("x\n", encoding="utf-8")
    cases = [
        (FileNotFoundError, dangling, "No such file or directory"),
        (NotADirectoryError, afile / "s.csv", "Not a directory"),
        (IsADirectoryError, tmp_path, "it is a folder"),
    ]
    for exc, path, reason in cases:
        with refused(exc, f"steps_csv: cannot write {str(path)!r}: {reason}"):
            engine.generate([[1, 2]], max_new_tokens=2, steps_csv=path)
    assert engine.batches == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "link.csv"]
    assert afile.read_text(encoding="utf-8") == "x\n"


class Interrupted(hf.PagedEngine):
    """Raises KeyboardInterrupt (what Ctrl-C does) at its third step."""

    def _scheduled(self, batch: Any) -> None:
        if batch.step_index == 2:
            raise KeyboardInterrupt


class _NoSpace:
    def __str__(self) -> str:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class DiskFull(hf.PagedEngine):
    """Its last step's row cannot be written, as on a full disk."""

    def _step(self, run: Any) -> None:
        super()._step(run)
        self.last_steps[-1] = replace(self.last_steps[-1], prefill_tokens=_NoSpace())  # type: ignore[arg-type]


def test_steps_csv_of_a_failed_run_keeps_the_old_file(
    model: Any, backend: ModuleType, tmp_path: Path
) -> None:
    path = tmp_path / "steps.csv"
    path.write_text("keep\n", encoding="utf-8")
    path.chmod(0o640)
    link = tmp_path / "link.csv"
    link.symlink_to(path)
    prompts = make_prompts((9, 5), seed=12)
    with pytest.raises(KeyboardInterrupt):
        Interrupted(model, config(backend, chunk_size=2), backend=backend).generate(
            prompts, max_new_tokens=4, steps_csv=link
        )
    assert path.read_text(encoding="utf-8") == "keep\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.csv", "steps.csv"]
    # The disk fills up while the rows are written: the old file stays, the error names it.
    text = f"steps_csv: cannot write {str(link)!r}: No space left on device"
    with refused(OSError, text):
        DiskFull(model, config(backend, chunk_size=2), backend=backend).generate(
            prompts, max_new_tokens=4, steps_csv=link
        )
    assert path.read_text(encoding="utf-8") == "keep\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.csv", "steps.csv"]
    # A run that succeeds replaces the file the link names, with its mode, in one rename.
    engine = hf.PagedEngine(model, config(backend, chunk_size=2), backend=backend)
    engine.generate(prompts, max_new_tokens=4, steps_csv=link)
    assert link.is_symlink() and link.resolve() == path
    rows = path.read_text(encoding="utf-8").splitlines()
    assert rows[0] == ",".join(hf.STEP_COLUMNS) and len(rows) == len(engine.last_steps) + 1
    assert path.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.csv", "steps.csv"]
    # A file that is no regular file is written in place, as open() would.
    engine.generate(prompts, max_new_tokens=1, steps_csv=os.devnull)
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_config_of_the_other_backend(model: Any, backend: ModuleType) -> None:
    import chunked_prefill.pure_serving as pure

    engine = hf.PagedEngine(model, config(pure), backend=backend)
    assert isinstance(engine.config, backend.ServingConfig)
    assert isinstance(engine.scheduler, backend.ServingScheduler)
    prompts = make_prompts((3, 7), seed=11)
    assert engine.generate(prompts, max_new_tokens=2) == reference(model, prompts, 2)


def test_refuses_sliding_window_models() -> None:
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    cfg = MistralConfig(
        vocab_size=32,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        sliding_window=8,
    )
    import chunked_prefill.pure_serving as pure

    with pytest.raises(ValueError, match="full attention"):
        hf.PagedEngine(MistralForCausalLM(cfg), pure.ServingConfig(num_blocks=4))


# -- the documented example (docs/transformers.md) ---------------------------------------


def test_docs_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # it writes steps.csv
    page = ROOT / "docs" / "transformers.md"
    text = page.read_text(encoding="utf-8")
    match = re.search(r"^## Paged engine\s*$(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, "docs/transformers.md has no 'Paged engine' section"
    block = re.search(r"```python\n(.*?)```", match.group(1), re.S)
    assert block, "the 'Paged engine' section has no python example"
    namespace: dict[str, Any] = {"__name__": "paged_example"}
    exec(compile(block.group(1), str(page), "exec"), namespace)
    assert (tmp_path / "steps.csv").exists()
    assert namespace["engine"].scheduler.num_preemptions > 0
    assert namespace["engine"].scheduler.num_cached_tokens > 0
