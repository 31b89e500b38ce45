"""chunked_prefill.hf: greedy outputs identical to unchunked generation, on both backends.

Needs the ``hf`` extra (torch, transformers); without it the whole module is skipped.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

_EXTRA = "needs torch and transformers: pip install '.[hf]' in the checkout"
torch = pytest.importorskip("torch", reason=_EXTRA)
transformers = pytest.importorskip("transformers", reason=_EXTRA)

from transformers import GenerationConfig  # noqa: E402
from transformers.generation.configuration_utils import ContinuousBatchingConfig  # noqa: E402

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
MAX_NEW = 6


@pytest.fixture(params=["pure", "rust"], scope="module")
def backend(request: pytest.FixtureRequest) -> ModuleType:
    """Each backend module; the Rust one is skipped until it is built."""
    name = {"pure": "chunked_prefill.pure", "rust": "chunked_prefill._core"}[request.param]
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        pytest.skip(f"{name} is not built: {exc}")


@pytest.fixture(scope="module")
def model() -> Any:
    return tiny_llama()


def reference(model: Any, prompts: list[list[int]], max_new: int = MAX_NEW) -> list[list[int]]:
    """Unchunked greedy generation, one prompt at a time."""
    outs = []
    for p in prompts:
        ids = torch.tensor([p])
        out = model.generate(ids, do_sample=False, max_new_tokens=max_new, min_new_tokens=max_new)
        outs.append(out[0, len(p) :].tolist())
    return outs


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    return make_prompts(LENGTHS)


@pytest.fixture(scope="module")
def expected(model: Any, prompts: list[list[int]]) -> list[list[int]]:
    return reference(model, prompts)


# -- the reference engine loop ------------------------------------------------------------


@pytest.mark.parametrize("chunk_size", CHUNK_SIZES)
@pytest.mark.parametrize(
    "policy",
    [
        {},
        {"token_budget": 6},
        {"token_budget": 12, "max_prefills_per_step": 3},
        {"token_budget": 40, "max_prefills_per_step": 6},
    ],
    ids=["unbudgeted", "budget6", "budget12x3", "budget40x6"],
)
def test_generate_matches_model_generate(
    model: Any,
    prompts: list[list[int]],
    expected: list[list[int]],
    backend: ModuleType,
    chunk_size: int,
    policy: dict[str, int],
) -> None:
    config = backend.Config(chunk_size=chunk_size, max_decode_tokens=4, **policy)
    out = hf.generate(model, prompts, config=config, max_new_tokens=MAX_NEW, backend=backend)
    assert out == expected


@pytest.mark.parametrize("max_running", [1, 2, None])
@pytest.mark.parametrize("interleave", [True, False])
def test_generate_admission_and_prefill_first(
    model: Any,
    prompts: list[list[int]],
    expected: list[list[int]],
    backend: ModuleType,
    max_running: int | None,
    interleave: bool,
) -> None:
    config = backend.Config(chunk_size=4, max_decode_tokens=2, interleave_decode=interleave)
    out = hf.generate(
        model,
        prompts,
        config=config,
        max_new_tokens=MAX_NEW,
        max_running=max_running,
        backend=backend,
    )
    assert out == expected


def test_generate_other_backend_config_and_one_token(
    model: Any, prompts: list[list[int]], backend: ModuleType
) -> None:
    """A Config of the other backend is converted; max_new_tokens=1 emits at the last chunk."""
    import chunked_prefill.pure as pure

    config = pure.Config(chunk_size=3, max_decode_tokens=4, token_budget=8, max_prefills_per_step=2)
    out = hf.generate(model, prompts, config=config, max_new_tokens=1, backend=backend)
    assert out == [e[:1] for e in reference(model, prompts, max_new=1)]


def test_generate_timings(model: Any, prompts: list[list[int]], backend: ModuleType) -> None:
    timings: list[hf.StepTiming] = []
    config = backend.Config(chunk_size=4, max_decode_tokens=8, token_budget=12)
    hf.generate(
        model, prompts, config=config, max_new_tokens=MAX_NEW, backend=backend, timings=timings
    )
    assert [t.step_index for t in timings] == list(range(len(timings)))
    assert sum(t.prefill_tokens for t in timings) == sum(map(len, prompts))
    assert sum(t.decode_tokens for t in timings) == len(prompts) * (MAX_NEW - 1)
    for t in timings:
        assert t.scheduler_s > 0
        assert t.forward_s > 0
        assert t.scheduler_s + t.forward_s <= t.total_s
        assert t.prefill_tokens + t.decode_tokens <= 12


_LOOP_REFUSALS = [
    (
        {"model": None},
        TypeError,
        "model must be a transformers causal LM (a torch.nn.Module"
        " with a config), got NoneType: None",
    ),
    (
        {"model": "gpt2"},
        TypeError,
        "model must be a transformers causal LM (a torch.nn.Module with a config), got str: 'gpt2'",
    ),
    (
        {"prompts": "hello"},
        TypeError,
        "prompts must be a sequence of prompts (each a sequence of"
        " token ids), got str: 'hello'; tokenize the text first",
    ),
    (
        {"prompts": None},
        TypeError,
        "prompts must be a sequence of prompts (each a sequence of token ids), got NoneType: None",
    ),
    ({"prompts": [[1], []]}, ValueError, "prompts[1] must hold at least 1 token, got 0"),
    ({"prompts": [[1], 5]}, TypeError, "prompts[1] must be a sequence of token ids, got int: 5"),
    ({"prompts": [[1, 2.0]]}, TypeError, "prompts[0][1] must be an int, got float: 2.0"),
    (
        {"prompts": [[True]]},
        TypeError,
        "prompts[0][0] must be an int, got the bool True: a bool is not a number",
    ),
    (
        {"prompts": [[1, 128]]},
        ValueError,
        "prompts[0][1] must be a token id of the model's vocabulary [0, 128), got 128",
    ),
    (
        {"prompts": [[-1]]},
        ValueError,
        "prompts[0][0] must be a token id of the model's vocabulary [0, 128), got -1",
    ),
    ({"config": None}, TypeError, "config must be a Config, got NoneType: None"),
    (
        {"max_new_tokens": True},
        TypeError,
        "max_new_tokens must be an int, got the bool True: a bool is not a number",
    ),
    ({"max_new_tokens": 0}, ValueError, "max_new_tokens must be at least 1, got 0"),
    ({"max_new_tokens": -3}, ValueError, "max_new_tokens must be at least 1, got -3"),
    ({"max_new_tokens": 2.0}, TypeError, "max_new_tokens must be an int, got float: 2.0"),
    (
        {"max_new_tokens": 2**64},
        OverflowError,
        "max_new_tokens must be at most 18446744073709551615, got 18446744073709551616",
    ),
    ({"max_running": 0}, ValueError, "max_running must be at least 1, got 0"),
    (
        {"max_running": False},
        TypeError,
        "max_running must be an int, got the bool False: a bool is not a number",
    ),
    ({"timings": ()}, TypeError, "timings must be None or a list to append to, got tuple: ()"),
    ({"backend": 42}, TypeError, "backend must be None, 'rust', 'pure' or a module, got int: 42"),
    (
        {"backend": "nope"},
        ValueError,
        "backend must be None, 'rust', 'pure', a module or the name of one, got 'nope'",
    ),
    ({"backend": "os"}, ValueError, "backend 'os' has no Scheduler and Config"),
]


@pytest.mark.parametrize(("change", "exc", "text"), _LOOP_REFUSALS)
def test_generate_rejects_bad_arguments(
    model: Any, backend: ModuleType, change: dict[str, Any], exc: type[Exception], text: str
) -> None:
    """Each bad argument of hf.generate is refused before any step, naming it."""
    config = backend.Config()
    sink: list[Any] = []
    args: dict[str, Any] = {
        "model": model,
        "prompts": [[1]],
        "config": config,
        "max_new_tokens": 1,
        "backend": backend,
        "timings": sink,
    }
    args.update(change)
    with refused(exc, text):
        hf.generate(args.pop("model"), args.pop("prompts"), **args)
    assert sink == []  # no step ran


def test_generate_of_no_prompts(model: Any, backend: ModuleType) -> None:
    config = backend.Config()
    assert hf.generate(model, [], config=config, max_new_tokens=1, backend=backend) == []


# -- transformers continuous batching -----------------------------------------------------


class Recorder:
    """Wraps a scheduler class and records every batch it returns.

    Each batch is ``(max_prefills_per_step, [(request_id, query_tokens, is_prefill)])``, or
    ``None`` when the cache could take nothing.
    """

    def __init__(self, cls: type[Any]) -> None:
        self.batches: list[tuple[int, list[tuple[str, int, bool]]] | None] = []
        batches = self.batches

        inner = cls.schedule_batch

        def schedule_batch(self: Any, token_budget: int, cache_budget: int) -> Any:
            result = inner(self, token_budget, cache_budget)
            requests = result[0]
            if requests is None:
                batches.append(None)
                return result
            entries = []
            for f in requests:
                state = f.state
                entries.append(
                    (
                        state.request_id,
                        f.query_length,
                        state.position_offset < len(state.initial_tokens),
                    )
                )
            batches.append((self._prefills, entries))
            assert result[2] == sum(f.query_length for f in requests) <= token_budget
            assert len(requests) <= self.max_requests_per_batch
            return result

        recording = type("Recording", (cls,), {"schedule_batch": schedule_batch})
        self.cls = recording

    def check_policy(self, chunk_size: int) -> None:
        """Chunks of at most ``chunk_size``, at most max_prefills_per_step a batch, split."""
        chunks_per_request: dict[str, int] = {}
        for batch in self.batches:
            if batch is None:
                continue
            prefills, entries = batch
            chunks = [(rid, n) for rid, n, is_prefill in entries if is_prefill]
            assert all(n <= chunk_size for _, n in chunks), entries
            assert len(chunks) <= prefills, entries
            for rid, _ in chunks:
                chunks_per_request[rid] = chunks_per_request.get(rid, 0) + 1
        assert max(chunks_per_request.values()) > 1


def generate_batch(
    model: Any, prompts: list[list[int]], scheduler_type: str, **cb: Any
) -> list[list[int]]:
    gen = GenerationConfig(  # type: ignore[no-untyped-call]
        do_sample=False, max_new_tokens=MAX_NEW, eos_token_id=None, pad_token_id=0
    )
    options: dict[str, Any] = {"num_blocks": 64, "max_batch_tokens": 16, "page_size": 16}
    options.update(cb)
    cb_config = ContinuousBatchingConfig(scheduler_type=scheduler_type, **options)
    res = model.generate_batch(
        prompts, generation_config=gen, continuous_batching_config=cb_config, progress_bar=False
    )
    return [res[f"req_{i}"].generated_tokens for i in range(len(prompts))]


@pytest.fixture
def mapping(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """transformers' SCHEDULER_MAPPING, restored after the test."""
    from transformers.generation.continuous_batching import scheduler

    monkeypatch.setattr(scheduler, "SCHEDULER_MAPPING", dict(scheduler.SCHEDULER_MAPPING))
    from transformers.generation.continuous_batching import continuous_api

    monkeypatch.setattr(continuous_api, "SCHEDULER_MAPPING", scheduler.SCHEDULER_MAPPING)
    return scheduler.SCHEDULER_MAPPING


def test_register_adds_chunked_prefill(mapping: dict[str, Any], backend: ModuleType) -> None:
    cls = hf.register(backend=backend)
    assert mapping["chunked_prefill"] is cls
    assert issubclass(cls, hf.ChunkedPrefillCBScheduler)
    assert hf.register() is hf.ChunkedPrefillCBScheduler
    assert mapping["chunked_prefill"] is hf.ChunkedPrefillCBScheduler
    with pytest.raises(ValueError, match="chunk_size"):
        hf.register(chunk_size=0)


@pytest.mark.parametrize(
    ("kwargs", "exc", "text"),
    [
        ({"name": 3}, TypeError, "name must be a str, got int: 3"),
        ({"name": ""}, ValueError, "name must be a non-empty str, got ''"),
        (
            {"chunk_size": True},
            TypeError,
            "chunk_size must be an int, got the bool True: a bool is not a number",
        ),
        ({"chunk_size": -1}, ValueError, "chunk_size must be at least 1, got -1"),
        (
            {"chunk_size": 2**64},
            OverflowError,
            "chunk_size must be at most 18446744073709551615, got 18446744073709551616",
        ),
        (
            {"max_prefills_per_step": 0},
            ValueError,
            "max_prefills_per_step must be at least 1, got 0",
        ),
        (
            {"max_prefills_per_step": 1.5},
            TypeError,
            "max_prefills_per_step must be an int, got float: 1.5",
        ),
        (
            {"backend": "nope"},
            ValueError,
            "backend must be None, 'rust', 'pure', a module or the name of one, got 'nope'",
        ),
        ({"backend": 1}, TypeError, "backend must be None, 'rust', 'pure' or a module, got int: 1"),
    ],
)
def test_register_rejects_bad_arguments(
    mapping: dict[str, Any], kwargs: dict[str, Any], exc: type[Exception], text: str
) -> None:
    before = dict(mapping)
    with refused(exc, text):
        hf.register(**kwargs)
    assert mapping == before


def test_helpers_reject_bad_arguments() -> None:
    from transformers.generation.continuous_batching.scheduler import FIFOScheduler

    with refused(
        TypeError,
        "cls must be a transformers Scheduler class (with schedule_batch),"
        " got str: 'FIFOScheduler'",
    ):
        hf.timed_scheduler("FIFOScheduler", [])
    with refused(TypeError, "sink must be a list to append to, got NoneType: None"):
        hf.timed_scheduler(FIFOScheduler, None)  # type: ignore[arg-type]
    with refused(TypeError, "version must be None or a str, got float: 5.2"):
        hf.check_transformers_version(5.2)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("chunk_size", "prefills", "cb"),
    [
        (None, None, {}),
        (4, 2, {}),
        (1, 1, {}),
        (3, 4, {"max_requests_per_batch": 3}),
        (5, 3, {"num_blocks": 6}),  # tight cache: allocation failures and offloading
    ],
    ids=["defaults", "chunk4x2", "chunk1", "mrpb3", "tight-cache"],
)
def test_generate_batch_matches_fifo_and_generate(
    model: Any,
    backend: ModuleType,
    mapping: dict[str, Any],
    chunk_size: int | None,
    prefills: int | None,
    cb: dict[str, Any],
) -> None:
    prompts = make_prompts((*LENGTHS, 40, 3, 26), seed=2)
    expected = reference(model, prompts)
    cls = hf.register(chunk_size=chunk_size, max_prefills_per_step=prefills, backend=backend)
    recorder = Recorder(cls)
    mapping["recording"] = recorder.cls

    fifo = generate_batch(model, prompts, "fifo", **cb)
    ours = generate_batch(model, prompts, "recording", **cb)
    assert ours == fifo == expected
    assert generate_batch(model, prompts, "chunked_prefill", **cb) == expected
    loop = hf.generate(
        model,
        prompts,
        config=backend.Config(chunk_size=chunk_size or 16, token_budget=16, max_decode_tokens=8),
        max_new_tokens=MAX_NEW,
        backend=backend,
    )
    assert loop == expected

    recorder.check_policy(chunk_size or 16)


def test_generate_batch_prefix_sharing(
    model: Any, backend: ModuleType, mapping: dict[str, Any]
) -> None:
    """Prompts sharing 40 tokens: later ones start after the cached prefix, out of plan."""
    prompts = make_prompts((5, 17, 2, 30, 1, 9), seed=3, prefix=40)
    expected = reference(model, prompts)
    hf.register(chunk_size=8, max_prefills_per_step=2, backend=backend)
    assert generate_batch(model, prompts, "chunked_prefill") == expected
    assert generate_batch(model, prompts, "fifo") == expected


def test_generate_batch_forks_children(
    model: Any, backend: ModuleType, mapping: dict[str, Any]
) -> None:
    """num_return_sequences forks each request before its last prompt token, off plan."""
    prompts = make_prompts((5, 17, 2, 30), seed=6)
    expected = reference(model, prompts)
    hf.register(chunk_size=4, max_prefills_per_step=2, backend=backend)
    gen = GenerationConfig(  # type: ignore[no-untyped-call]
        do_sample=True,
        top_k=1,  # sampling among one token: greedy, whatever the batch
        num_return_sequences=3,
        max_new_tokens=MAX_NEW,
        eos_token_id=None,
        pad_token_id=0,
    )
    results = {}
    for scheduler_type in ("fifo", "chunked_prefill"):
        cb_config = ContinuousBatchingConfig(
            scheduler_type=scheduler_type, num_blocks=32, max_batch_tokens=16, page_size=16
        )
        res = model.generate_batch(
            prompts, generation_config=gen, continuous_batching_config=cb_config
        )
        results[scheduler_type] = {k: v.generated_tokens for k, v in res.items()}
    ours = results["chunked_prefill"]
    assert ours == results["fifo"]
    assert len(ours) == 3 * len(prompts)
    for i, tokens in enumerate(expected):
        for key in (f"req_{i}", f"req_{i}__child#0", f"req_{i}__child#1"):
            assert ours[key] == tokens


def test_manager_streaming_and_cancel(
    model: Any, backend: ModuleType, mapping: dict[str, Any]
) -> None:
    """The continuous-batching manager with our scheduler: add, cancel, collect."""
    prompts = make_prompts((12, 20, 7), seed=4)
    expected = reference(model, prompts, max_new=MAX_NEW)
    hf.register(chunk_size=4, backend=backend)
    gen = GenerationConfig(  # type: ignore[no-untyped-call]
        do_sample=False, max_new_tokens=MAX_NEW, eos_token_id=None, pad_token_id=0
    )
    cb_config = ContinuousBatchingConfig(
        scheduler_type="chunked_prefill", num_blocks=32, max_batch_tokens=8, page_size=16
    )
    manager = model.init_continuous_batching(
        generation_config=gen, continuous_batching_config=cb_config
    )
    manager.start()
    try:
        ids = [manager.add_request(p, max_new_tokens=MAX_NEW) for p in prompts]
        cancelled = manager.add_request(make_prompts((50,), seed=5)[0], max_new_tokens=200)
        manager.cancel_request(cancelled)
        results: dict[str, list[int]] = {}
        while len(results) < len(ids):
            out = manager.get_result(timeout=10)
            assert out is not None
            if out.request_id in ids:
                results[out.request_id] = out.generated_tokens
    finally:
        manager.stop(block=True, timeout=10)
    assert [results[i] for i in ids] == expected


# -- versions -----------------------------------------------------------------------------


def test_installed_transformers_is_supported() -> None:
    assert hf.check_transformers_version() == transformers.__version__


@pytest.mark.parametrize("version", ["4.57.1", "5.17.0", "5.25.0", "6.0.0"])
def test_unsupported_transformers_fails_at_register(
    monkeypatch: pytest.MonkeyPatch, mapping: dict[str, Any], version: str
) -> None:
    real = importlib.metadata.version

    def fake(name: str) -> str:
        return version if name == "transformers" else real(name)

    monkeypatch.setattr(importlib.metadata, "version", fake)
    with pytest.raises(hf.UnsupportedTransformersError) as info:
        hf.register()
    message = str(info.value)
    assert version in message
    assert hf.SUPPORTED_TRANSFORMERS in message
    for verified in hf.VERIFIED_TRANSFORMERS:
        assert verified in message
    assert "chunked_prefill" not in mapping


# -- the documented example (docs/transformers.md) -------------------------------------------


def readme_example() -> tuple[Path, str]:
    """The python block of the "Use with transformers" page, docs/transformers.md."""
    page = ROOT / "docs" / "transformers.md"
    text = page.read_text(encoding="utf-8")
    match = re.search(r"^#+ Use with transformers\s*$(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, "docs/transformers.md has no 'Use with transformers' section"
    block = re.search(r"```python\n(.*?)```", match.group(1), re.S)
    assert block, "the 'Use with transformers' section has no python example"
    return page, block.group(1)


def test_readme_example_runs(mapping: dict[str, Any]) -> None:
    path, code = readme_example()
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(code, str(path), "exec"), namespace)
