"""chunked_prefill.vllm.Scheduler against vLLM's own scheduler, without a model.

Both drive the same fake model runner (tests/vllm_fake_runner.py), which checks every KV slot a
step reads was written for the same token sequence, and samples a token that is a function of
the sequence: so both must generate exactly the tokens of :func:`reference`, under chunking,
prefix caching, preemption, aborts, stop tokens, EOS, ``min_tokens`` and cache salts.
Runs where vLLM is installed (the vLLM venvs of scripts/test.sh); skipped elsewhere.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CHUNKED_PREFILL_REQUIRE_VLLM") == "1":
    import vllm  # noqa: F401  (an ImportError fails the run in the vLLM venv instead of skipping)
else:
    pytest.importorskip("vllm", reason="vLLM is not installed (the vLLM venvs run these tests)")

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from vllm.config import (
    CacheConfig,
    DeviceConfig,
    ModelConfig,
    SchedulerConfig,
    SpeculativeConfig,
    VllmConfig,
)
from vllm.sampling_params import SamplingParams, StructuredOutputsParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.scheduler import Scheduler as VllmScheduler
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    SlidingWindowSpec,
)
from vllm.v1.request import Request, RequestStatus
from vllm.v1.structured_output import StructuredOutputManager

from chunked_prefill.vllm import Scheduler
from vllm_fake_runner import FakeRunner, reference

VOCAB = 40
EOS = 3
MAX_MODEL_LEN = 512


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A model config on disk (vLLM reads it; no weights are needed to schedule)."""
    path = tmp_path_factory.mktemp("model")
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "vocab_size": VOCAB,
        "max_position_embeddings": 4096,
        "torch_dtype": "float32",
        "eos_token_id": EOS,
    }
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


def make(
    cls: type[Any],
    model: str,
    *,
    num_blocks: int = 200,
    block_size: int = 16,
    budget: int = 64,
    threshold: int = 16,
    prefix: bool = True,
    max_seqs: int = 8,
    log_stats: bool = True,
    spec: Any = None,
    **sched: Any,
) -> Any:
    model_config = ModelConfig(
        model=model, dtype="float16", seed=0, skip_tokenizer_init=True, max_model_len=MAX_MODEL_LEN
    )
    scheduler_config = SchedulerConfig(
        max_num_seqs=max_seqs,
        max_num_batched_tokens=budget,
        max_model_len=MAX_MODEL_LEN,
        long_prefill_token_threshold=threshold,
        enable_chunked_prefill=True,
        is_encoder_decoder=False,
        **{"async_scheduling": False, **sched},
    )
    cache_config = CacheConfig(
        block_size=block_size, cache_dtype="auto", enable_prefix_caching=prefix
    )
    vllm_config = VllmConfig(
        scheduler_config=scheduler_config,
        model_config=model_config,
        cache_config=cache_config,
        device_config=DeviceConfig("cpu"),
    )
    spec = spec or FullAttentionSpec(
        block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float32
    )
    kv_cache_config = KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)],
    )
    cache_config.num_gpu_blocks = num_blocks
    return cls(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=StructuredOutputManager(vllm_config),
        include_finished_set=False,
        log_stats=log_stats,
        block_size=block_size,
        hash_block_size=block_size,
    )


def params(**kw: Any) -> SamplingParams:
    p = SamplingParams(temperature=0.0, detokenize=False, **kw)
    p.update_from_generation_config({}, eos_token_id=EOS)
    return p


init_none_hash(sha256)


def request(rid: str, prompt: list[int], **kw: Any) -> Request:
    """A request as vLLM's engine makes it (vLLM's prefix cache needs its block hasher; the
    adapter does not use it)."""
    salt = kw.pop("cache_salt", None)
    priority = kw.pop("priority", 0)
    return Request(
        block_hasher=get_request_block_hasher(16, sha256),
        request_id=rid,
        prompt_token_ids=prompt,
        sampling_params=params(**kw),
        pooling_params=None,
        cache_salt=salt,
        priority=priority,
    )


class Run:
    """Drives a scheduler with the fake runner; collects each request's tokens and finish."""

    def __init__(self, scheduler: Any, runner: FakeRunner) -> None:
        self.scheduler, self.runner = scheduler, runner
        self.tokens: dict[str, list[int]] = {}
        self.finish: dict[str, str] = {}
        self.stop_reason: dict[str, Any] = {}
        self.stats: list[Any] = []

    def step(self, abort_during: list[str] = ()) -> None:  # type: ignore[assignment]
        output = self.scheduler.schedule()
        runner_output = self.runner.execute(output)
        if abort_during:  # as the engine does with aborts that arrive while the model runs
            self.scheduler.finish_requests(abort_during, RequestStatus.FINISHED_ABORTED)
        result = self.scheduler.update_from_output(output, runner_output)
        for eco in result.values():
            if eco.scheduler_stats is not None:
                self.stats.append(eco.scheduler_stats)
            for out in eco.outputs:
                self.tokens.setdefault(out.request_id, []).extend(out.new_token_ids)
                if out.finish_reason is not None:
                    self.finish[out.request_id] = str(out.finish_reason)
                    self.stop_reason[out.request_id] = out.stop_reason

    def drain(self, limit: int = 2000) -> None:
        for _ in range(limit):
            if not self.scheduler.has_requests():
                return
            self.step()
        raise AssertionError("the scheduler did not finish its requests")


def both(model: str, **config: Any) -> Iterator[Run]:
    v2 = config.pop("v2", False)
    for cls in (VllmScheduler, Scheduler):
        scheduler = make(cls, model, **config)
        scheduler.use_v2_model_runner = v2
        yield Run(
            scheduler, FakeRunner(config.get("block_size", 16), config["num_blocks"], VOCAB, v2=v2)
        )


# --- token identity under every feature, against vLLM's scheduler -------------------------

workloads = st.lists(
    st.tuples(
        st.sampled_from([0, 1, 2]),  # shared prefix
        st.integers(1, 70),  # own suffix length
        st.integers(1, 30),  # max_tokens
        st.sampled_from([None, "a", "b"]),  # cache_salt
        st.integers(0, 6),  # step it arrives at
        st.sampled_from([(), (5,), (7, 11)]),  # stop_token_ids
        st.integers(0, 4),  # min_tokens
        st.sampled_from([None, 2, 6]),  # abort at this step after arrival
    ),
    min_size=1,
    max_size=10,
)


def prompts_of(workload: list[Any]) -> list[list[int]]:
    prefixes = [[(7 * i + 5 * j) % VOCAB for j in range(48)] for i in range(3)]
    return [
        prefixes[p] + [(11 * k + 3 * n) % VOCAB for n in range(s)]
        for k, (p, s, *_rest) in enumerate(workload)
    ]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    workload=workloads,
    num_blocks=st.sampled_from([12, 24, 200]),
    budget=st.sampled_from([32, 64, 128]),
    threshold=st.sampled_from([0, 8, 16]),
    prefix=st.booleans(),
    v2=st.booleans(),
)
def test_same_tokens_as_vllm(
    model_dir: str,
    workload: list[Any],
    num_blocks: int,
    budget: int,
    threshold: int,
    prefix: bool,
    v2: bool,
) -> None:
    prompts = prompts_of(workload)
    config = dict(num_blocks=num_blocks, budget=budget, threshold=threshold, prefix=prefix, v2=v2)
    runs = list(both(model_dir, **config))
    for run in runs:
        play(run, workload, prompts)
    ours, theirs = runs[1], runs[0]
    for k, (*_, abort_after) in enumerate(workload):
        rid = str(k)
        w = workload[k]
        p = params(max_tokens=w[2], stop_token_ids=list(w[5]) or None, min_tokens=min(w[6], w[2]))
        full = reference(prompts[k], p, VOCAB, MAX_MODEL_LEN)
        got = ours.tokens.get(rid, [])
        if abort_after is None:
            assert got == full == theirs.tokens[rid], rid
            assert ours.finish[rid] == theirs.finish[rid], rid
            assert ours.stop_reason[rid] == theirs.stop_reason[rid], rid
        else:
            assert got == full[: len(got)], rid


def play(run: Run, workload: list[Any], prompts: list[list[int]]) -> None:
    arrivals: dict[int, list[int]] = {}
    aborts: dict[int, list[str]] = {}
    for k, (*_, at, _stops, _min_tokens, abort_after) in enumerate(workload):
        arrivals.setdefault(at, []).append(k)
        if abort_after is not None:
            aborts.setdefault(at + abort_after, []).append(str(k))
    for step in range(2000):
        for k in arrivals.get(step, []):
            w = workload[k]
            run.scheduler.add_request(
                request(
                    str(k),
                    prompts[k],
                    max_tokens=w[2],
                    cache_salt=w[3],
                    stop_token_ids=list(w[5]) or None,
                    min_tokens=min(w[6], w[2]),
                )
            )
        if step > max(arrivals) and not run.scheduler.has_requests():
            return
        # Half the aborts arrive while the step runs, half between steps.
        during = [rid for rid in aborts.get(step, []) if int(rid) % 2]
        between = [rid for rid in aborts.get(step, []) if not int(rid) % 2]
        run.scheduler.finish_requests(between, RequestStatus.FINISHED_ABORTED)
        run.step(during)
    raise AssertionError("did not finish")


# --- each scenario really happens, with the same tokens -----------------------------------


def run_both(model: str, prompts: list[list[int]], *, per_request: Any = None, **config: Any):
    """Both schedulers on ``prompts`` (all added at once); returns (vLLM's run, ours)."""
    runs = list(both(model, **config))
    for run in runs:
        for k, prompt in enumerate(prompts):
            kw = {"max_tokens": 12, **(per_request(k) if per_request else {})}
            run.scheduler.add_request(request(str(k), prompt, **kw))
        run.drain()
        assert run.tokens == {
            str(k): reference(
                prompt,
                params(**{"max_tokens": 12, **(per_request(k) if per_request else {})}),
                VOCAB,
                MAX_MODEL_LEN,
            )
            for k, prompt in enumerate(prompts)
        }
    assert runs[0].tokens == runs[1].tokens and runs[0].finish == runs[1].finish
    return runs


def long_prompts(n: int, length: int, shared: int = 0) -> list[list[int]]:
    return [[(j * 7 + (k if j >= shared else 0)) % VOCAB for j in range(length)] for k in range(n)]


def test_chunked_prefill_and_several_prefills_per_step(model_dir: str) -> None:
    _, ours = run_both(model_dir, long_prompts(4, 100), num_blocks=200, budget=64, threshold=16)
    assert ours.runner.max_prefills_in_a_step >= 3  # 64 tokens in chunks of 16
    assert ours.scheduler.core.step_index > 7  # 400 prompt tokens in steps of 64 at most


def test_prefix_cache_hits_are_reported_in_make_stats(model_dir: str) -> None:
    prompts = long_prompts(3, 80, shared=64)
    _, ours = run_both(model_dir, prompts[:1], num_blocks=200)
    for k, prompt in enumerate(prompts[1:], 1):
        ours.scheduler.add_request(request(str(k), prompt, max_tokens=12))
    ours.drain()
    hits = sum(s.prefix_cache_stats.hits for s in ours.stats)
    queries = sum(s.prefix_cache_stats.queries for s in ours.stats)
    assert hits == 2 * 64  # four shared blocks of 16, for each of the later two
    assert queries == 80 * 3
    assert ours.tokens["1"] == reference(prompts[1], params(max_tokens=12), VOCAB, MAX_MODEL_LEN)


def test_a_small_pool_preempts_and_recomputes(model_dir: str) -> None:
    _, ours = run_both(model_dir, long_prompts(4, 40), num_blocks=13, budget=64)
    assert ours.scheduler.num_preemptions > 0
    assert any(s.num_running_reqs < 4 for s in ours.stats)


@pytest.mark.parametrize("v2", [False, True])
def test_preempted_requests_resume_where_each_runner_expects_them(model_dir: str, v2: bool) -> None:
    _, ours = run_both(model_dir, long_prompts(5, 30), num_blocks=10, budget=64, v2=v2)
    assert ours.scheduler.num_preemptions > 0


def test_stop_tokens_eos_and_min_tokens(model_dir: str) -> None:
    prompts = long_prompts(6, 20)
    full = [reference(p, params(max_tokens=30), VOCAB, MAX_MODEL_LEN) for p in prompts]
    stop = {k: full[k][3] for k in range(3)}  # the 4th token each would generate

    def per_request(k: int) -> dict[str, Any]:
        if k < 3:
            return {"max_tokens": 30, "stop_token_ids": [stop[k]]}
        return {"max_tokens": 30, "min_tokens": 2}

    _, ours = run_both(model_dir, prompts, per_request=per_request, num_blocks=200)
    for k in range(3):
        assert ours.finish[str(k)] == "stop" and ours.stop_reason[str(k)] == stop[k]
        assert len(ours.tokens[str(k)]) <= 4
    assert {ours.finish[str(k)] for k in range(6)} <= {"stop", "length"}


def test_eos_stops_unless_ignored(model_dir: str) -> None:
    # A prompt whose greedy continuation reaches EOS (found by search over the fake model).
    prompt = next(
        p
        for p in ([k % VOCAB, (k * 3) % VOCAB, 9] for k in range(200))
        if EOS in reference(p, params(max_tokens=40, ignore_eos=True), VOCAB, MAX_MODEL_LEN)[1:]
    )
    for ignore in (False, True):
        _, ours = run_both(
            model_dir,
            [prompt],
            per_request=lambda k, ignore=ignore: {"max_tokens": 40, "ignore_eos": ignore},
            num_blocks=200,
        )
        tokens = ours.tokens["0"]
        assert (tokens[-1] == EOS and ours.finish["0"] == "stop") is not ignore
        assert ours.stop_reason["0"] is None


def test_cache_salts_share_only_equal_salts(model_dir: str) -> None:
    prompt = long_prompts(1, 80)[0]
    scheduler = make(Scheduler, model_dir, num_blocks=200)
    run = Run(scheduler, FakeRunner(16, 200, VOCAB))
    run.scheduler.add_request(request("a", prompt, max_tokens=2, cache_salt="x"))
    run.drain()
    for rid, salt in (("b", "y"), ("c", None), ("d", "x")):
        run.scheduler.add_request(request(rid, prompt, max_tokens=2, cache_salt=salt))
        run.drain()
    hits = [s.prefix_cache_stats.hits for s in run.stats if s.prefix_cache_stats.queries]
    assert hits == [0, 0, 0, 64]  # only the same salt finds "a"'s blocks


def test_abort_while_the_step_runs_frees_at_once(model_dir: str) -> None:
    scheduler = make(Scheduler, model_dir, num_blocks=200)
    run = Run(scheduler, FakeRunner(16, 200, VOCAB))
    for k in range(3):
        scheduler.add_request(request(str(k), long_prompts(3, 20)[k], max_tokens=50))
    run.step()
    run.step(["1"])
    assert not scheduler.has_request("1") and "1" not in run.finish
    out = scheduler.schedule()
    assert out.finished_req_ids == {"1"} and "1" not in out.num_scheduled_tokens
    assert scheduler.finish_requests("1", RequestStatus.FINISHED_ABORTED) == []
    assert scheduler.get_request_counts() == (2, 0)


# --- configuration: the mapping and what is refused ---------------------------------------


def test_vllm_settings_map_onto_the_serving_config(model_dir: str) -> None:
    scheduler = make(
        Scheduler,
        model_dir,
        num_blocks=101,
        block_size=32,
        budget=96,
        threshold=24,
        max_seqs=7,
        prefix=False,
        watermark=0.25,
    )
    assert scheduler.core.config.to_dict() == {
        "num_blocks": 100,  # vLLM's block 0 is its null block
        "block_size": 32,
        "token_budget": 96,
        "chunk_size": 24,
        "max_prefills_per_step": 7,  # vLLM 0.32 and 0.33 have no cap: max_num_seqs
        "max_running": 7,
        "watermark": 0.25,
        "prefix_caching": False,
    }


def test_no_threshold_means_chunks_of_the_budget_and_max_num_seqs_is_capped(
    model_dir: str,
) -> None:
    scheduler = make(Scheduler, model_dir, budget=64, threshold=0, max_seqs=64)
    assert scheduler.core.config.chunk_size == 64
    assert scheduler.core.config.max_running == 63


def test_subclass_options(model_dir: str, tmp_path: Path) -> None:
    class Capped(Scheduler):  # type: ignore[misc]
        max_prefills_per_step = 2
        steps_csv = str(tmp_path / "steps.csv")

    scheduler = make(Capped, model_dir)
    assert scheduler.core.config.max_prefills_per_step == 2
    scheduler.shutdown()
    assert (tmp_path / "steps.csv").read_text() == (
        "prefill_tokens,decode_tokens,attention_pairs,decode_context_tokens,duration_s,"
        "prefill_chunk_sq,prefill_chunks\n"
    )


PRE = "chunked_prefill.vllm.Scheduler does not support "


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"async_scheduling": True},
            "async_scheduling=True: it plans step N+1 only after step N's update_from_output;"
            " pass async_scheduling=False",
        ),
        (
            {"long_prefill_token_threshold_adaptive": True},
            "long_prefill_token_threshold_adaptive=True: the core's chunk is min(tokens left,"
            " chunk_size, budget left), a fixed rule",
        ),
        ({"max_num_active_seqs": 4}, "max_num_active_seqs: the core limits running requests only"),
        (
            {"enable_chunked_prefill": False},
            "enable_chunked_prefill=False: the core always chunks prompts longer than the step's"
            " budget left",
        ),
        (
            {"prefill_schedule_interval": 2},
            "prefill_schedule_interval=2: the core admits prefills in every step (no prefill"
            " cadence)",
        ),
    ],
)
def test_unsupported_scheduler_settings_are_refused(
    model_dir: str, settings: dict[str, Any], message: str
) -> None:
    # Set after VllmConfig's checks, which turn async scheduling off on a CPU platform.
    vllm_config, kv_cache_config = configs(model_dir)
    for name, value in settings.items():
        setattr(vllm_config.scheduler_config, name, value)
    with pytest.raises(ValueError) as err:
        Scheduler(vllm_config, kv_cache_config, None, block_size=16)
    assert str(err.value) == PRE + message


def configs(model_dir: str) -> tuple[Any, Any]:
    scheduler = make(VllmScheduler, model_dir)
    return scheduler.vllm_config, scheduler.kv_cache_config


def test_other_kv_cache_layouts_are_refused(model_dir: str) -> None:
    spec = SlidingWindowSpec(
        block_size=16, num_kv_heads=1, head_size=1, dtype=torch.float32, sliding_window=64
    )
    with pytest.raises(ValueError) as err:
        make(Scheduler, model_dir, spec=spec)
    assert str(err.value) == (
        PRE + "the KV-cache layout SlidingWindowSpec: only full attention keeps every block of"
        " a request"
    )


def test_speculative_decoding_is_refused(model_dir: str) -> None:
    vllm_config, kv_cache_config = configs(model_dir)
    vllm_config.speculative_config = object.__new__(SpeculativeConfig)
    with pytest.raises(ValueError) as err:
        Scheduler(vllm_config, kv_cache_config, None, block_size=16)
    assert str(err.value) == PRE + "speculative_config: the core schedules no draft tokens"


# --- requests it cannot serve finish with an error; the engine keeps running --------------


def test_structured_output_requests_finish_with_an_error(model_dir: str) -> None:
    scheduler = make(Scheduler, model_dir)
    run = Run(scheduler, FakeRunner(16, 200, VOCAB))
    bad = Request(
        request_id="json",
        prompt_token_ids=[1, 2, 3],
        sampling_params=SamplingParams(
            max_tokens=4, structured_outputs=StructuredOutputsParams(json={"type": "object"})
        ),
        pooling_params=None,
    )
    scheduler.add_request(bad)
    scheduler.add_request(request("ok", [1, 2, 3], max_tokens=2))
    run.drain()
    assert run.finish == {"json": "error", "ok": "length"}
    assert run.tokens == {"json": [], "ok": reference([1, 2, 3], params(max_tokens=2), VOCAB, 512)}


def test_a_request_that_can_never_fit_is_ignored(model_dir: str) -> None:
    scheduler = make(Scheduler, model_dir, num_blocks=5)  # 4 usable blocks of 16
    run = Run(scheduler, FakeRunner(16, 5, VOCAB))
    scheduler.add_request(request("big", list(range(30)), max_tokens=40))
    run.step()
    assert run.finish == {"big": "length"} and run.tokens == {"big": []}
    assert not scheduler.has_requests()


def test_a_duplicate_request_id_is_refused(model_dir: str) -> None:
    scheduler = make(Scheduler, model_dir)
    scheduler.add_request(request("r", [1, 2], max_tokens=2))
    with pytest.raises(ValueError, match=r"^chunked_prefill\.vllm\.Scheduler: request id 'r' is"):
        scheduler.add_request(request("r", [1, 2], max_tokens=2))
    assert scheduler.get_request_counts() == (0, 1)


def test_pause_holds_new_requests_and_reset_prefix_cache_when_idle(model_dir: str) -> None:
    from vllm.v1.core.sched.interface import PauseState

    scheduler = make(Scheduler, model_dir)
    run = Run(scheduler, FakeRunner(16, 200, VOCAB))
    scheduler.set_pause_state(PauseState.PAUSED_ALL)
    scheduler.add_request(request("r", list(range(20)), max_tokens=2))
    assert scheduler.get_num_unfinished_requests() == 0
    run.step()
    assert scheduler.schedule().total_num_scheduled_tokens == 0
    scheduler.update_from_output(scheduler.schedule(), run.runner.execute(scheduler.schedule()))
    scheduler.set_pause_state(PauseState.UNPAUSED)
    assert scheduler.reset_prefix_cache() is False  # a request is tracked
    run.drain()
    assert run.tokens["r"] == reference(list(range(20)), params(max_tokens=2), VOCAB, 512)
    assert scheduler.reset_prefix_cache() is True


# --- the step recorder ---------------------------------------------------------------------


def test_the_step_recorder_writes_a_file_fit_reads(
    model_dir: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chunked_prefill.sim.fit import fit_steps, read_steps_csv

    path = tmp_path / "steps.csv"
    monkeypatch.setenv("CHUNKED_PREFILL_STEPS_CSV", str(path))
    scheduler = make(Scheduler, model_dir, num_blocks=200, budget=64, threshold=16)
    run = Run(scheduler, FakeRunner(16, 200, VOCAB))
    for k, prompt in enumerate(long_prompts(4, 50)):
        scheduler.add_request(request(str(k), prompt, max_tokens=8))
    run.drain()
    scheduler.shutdown()
    steps = read_steps_csv(path)
    assert len(steps.duration_s) == run.runner.num_busy_steps  # steps with tokens
    assert int(steps.prefill_tokens.sum()) == 4 * 50
    assert int(steps.decode_tokens.sum()) == 4 * 7  # the first token of each ends its prefill
    assert fit_steps(steps).steps == len(steps.duration_s)


def test_an_unwritable_steps_file_is_refused_at_construction(
    model_dir: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHUNKED_PREFILL_STEPS_CSV", str(tmp_path))
    with pytest.raises(ValueError) as err:
        make(Scheduler, model_dir)
    assert str(err.value) == (
        f"CHUNKED_PREFILL_STEPS_CSV: cannot write {str(tmp_path)!r}: it is a folder, not a file"
        " name"
    )
