"""One vLLM step: vLLM 0.33's own scheduler against ``chunked_prefill.vllm.Scheduler``.

Run ``pytest benches/bench_vllm.py --benchmark-group-by=group --benchmark-columns=min,median``
in a venv with vLLM, or ``python benches/bench_vllm.py [STEPS] [--sequential] [--no-stats]``
for the table of docs/performance.md (the two schedulers alternate step by step unless
``--sequential``; ``--profile`` prints where the adapter's time goes, by cProfile).

The workload is the issue's: 256 decoding requests and 1 000 waiting 2 000-token prompts that
share a 1 000-token prefix; block 16, prefix caching on, ``max_num_batched_tokens`` 2048,
``long_prefill_token_threshold`` 512, ``max_num_seqs`` 512, a pool of 16 384 usable blocks
(``num_blocks`` 16 385: vLLM keeps block 0 as its null block, the adapter maps the rest).
Requests carry vLLM's block hasher, as the engine makes them, so vLLM's prefix cache works
and both pay for hashing the blocks decodes fill (``Request.append_output_token_ids``).
A fake runner samples one token for every request whose scheduled tokens complete it.

A step is ``schedule()`` + ``update_from_output()``, timed in CPU time of the calling thread
(``time.thread_time``; the wall clock of this shared machine moves far more); building the
fake runner's output is not counted. Both schedulers are built in one process from the same
requests, warmed up until the 256 decode, then the 1 000 are added and 8 more steps run
(the prefix is cached, chunks are under way); each benchmark round is the next step, so the
rounds are consecutive steps of one steady workload. Under ``--benchmark-disable`` (the CI
smoke run) the workload is 16 decodes and 32 prompts.
"""

from __future__ import annotations

import cProfile
import importlib.util
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
pytestmark = pytest.mark.skipif(
    not HAVE_VLLM,
    reason="vLLM is not installed: this benchmark compares the adapter with vLLM's scheduler",
)

TOKEN = 7  # what the fake runner samples
WARM_STEPS = 8  # steps after the prompts arrive, before measuring
MAX_MODEL_LEN = 4096


@dataclass(frozen=True)
class Workload:
    decodes: int
    waiting: int
    prefix: int  # shared prefix of every waiting prompt
    prompt: int  # waiting prompt length
    output: int  # tokens each waiting prompt generates


FULL = Workload(decodes=256, waiting=1000, prefix=1000, prompt=2000, output=64)
SMOKE = Workload(decodes=16, waiting=32, prefix=96, prompt=200, output=8)


def _model_dir() -> str:
    """A local Llama config.json (the scheduler reads only the config; no hub, no weights)."""
    path = os.path.join(tempfile.gettempdir(), "chunked-prefill-bench-vllm-model")
    os.makedirs(path, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "vocab_size": 32000,
        "max_position_embeddings": MAX_MODEL_LEN,
        "torch_dtype": "float32",
    }
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    return path


def make_scheduler(cls: type, log_stats: bool = True, num_blocks: int = 16384) -> Any:
    """``cls`` built as vLLM's engine core builds its scheduler, for the issue's settings."""
    import torch
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    block, blocks = 16, num_blocks + 1  # + vLLM's null block
    model = ModelConfig(
        model=_model_dir(),
        dtype="float16",
        seed=0,
        skip_tokenizer_init=True,
        max_model_len=MAX_MODEL_LEN,
    )
    sched = SchedulerConfig(
        max_num_seqs=512,
        max_num_batched_tokens=2048,
        max_model_len=MAX_MODEL_LEN,
        long_prefill_token_threshold=512,
        enable_chunked_prefill=True,
        async_scheduling=False,
        is_encoder_decoder=False,
    )
    cache = CacheConfig(block_size=block, cache_dtype="auto", enable_prefix_caching=True)
    cache.num_gpu_blocks = blocks
    vllm_config = VllmConfig(
        scheduler_config=sched,
        model_config=model,
        cache_config=cache,
        device_config=DeviceConfig("cpu"),
    )
    spec = FullAttentionSpec(block_size=block, num_kv_heads=1, head_size=1, dtype=torch.float32)
    kv = KVCacheConfig(
        num_blocks=blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)],
    )
    return cls(
        vllm_config=vllm_config,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(vllm_config),
        include_finished_set=False,
        log_stats=log_stats,
        block_size=block,
        hash_block_size=block,
    )


def _hasher() -> Callable[[Any], list[Any]]:
    """vLLM's block hasher, as its engine core makes it (prefix caching on)."""
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

    hash_fn = get_hash_fn_by_name("sha256")
    init_none_hash(hash_fn)
    return get_request_block_hasher(16, hash_fn)


def _requests(ids: range, prompts: Callable[[int], list[int]], max_tokens: int) -> list[Any]:
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    hasher = _hasher()
    return [
        Request(
            request_id=str(i),
            prompt_token_ids=prompts(i),
            sampling_params=SamplingParams(max_tokens=max_tokens),
            pooling_params=None,
            block_hasher=hasher,
        )
        for i in ids
    ]


def _decode_prompt(i: int) -> list[int]:
    return [(i * 32 + k) % 30000 + 100 for k in range(32)]


class Clock:
    """CPU time of this thread, less the time the fake runner took (not the scheduler's)."""

    def __init__(self) -> None:
        self.excluded = 0.0

    def __call__(self) -> float:
        return time.thread_time() - self.excluded


def runner_output(scheduler: Any, output: Any) -> Any:
    """One token for each request whose scheduled tokens complete it (the end of a prefill,
    or a decode); nothing for a prefill chunk that leaves tokens to compute."""
    from vllm.v1.outputs import ModelRunnerOutput

    ids = list(output.num_scheduled_tokens)
    requests = scheduler.requests
    sampled = [
        [TOKEN] if requests[rid].num_computed_tokens >= requests[rid].num_tokens else []
        for rid in ids
    ]
    return ModelRunnerOutput(
        req_ids=ids,
        req_id_to_index={rid: k for k, rid in enumerate(ids)},
        sampled_token_ids=sampled,
        logprobs=None,
        prompt_logprobs_dict={},
        pooler_output=[],
    )


@dataclass
class StepTimes:
    schedule: float
    update: float
    tokens: int
    running: int


def step(scheduler: Any, clock: Clock | None = None) -> StepTimes:
    """One engine step; the fake runner's time goes to ``clock.excluded``."""
    t0 = time.thread_time()
    output = scheduler.schedule()
    t1 = time.thread_time()
    runner = runner_output(scheduler, output)
    t2 = time.thread_time()
    scheduler.update_from_output(output, runner)
    t3 = time.thread_time()
    if clock is not None:
        clock.excluded += t2 - t1
    tokens = output.total_num_scheduled_tokens
    return StepTimes(t1 - t0, t3 - t2, tokens, len(output.num_scheduled_tokens))


def prepared(cls: type, size: Workload, log_stats: bool = True) -> Any:
    """A scheduler with ``size.decodes`` requests decoding and ``size.waiting`` prompts
    behind them, ``WARM_STEPS`` steps after they arrived."""
    scheduler = make_scheduler(cls, log_stats)
    for request in _requests(range(size.decodes), _decode_prompt, MAX_MODEL_LEN - 64):
        scheduler.add_request(request)
    while any(r.num_output_tokens == 0 for r in scheduler.requests.values()):
        step(scheduler)
    shared = list(range(1000, 1000 + size.prefix))
    tail = size.prompt - size.prefix
    prompts = range(10_000, 10_000 + size.waiting)
    for request in _requests(prompts, lambda i: shared + [i] * tail, size.output):
        scheduler.add_request(request)
    for _ in range(WARM_STEPS):
        step(scheduler)
    return scheduler


def _classes() -> dict[str, type]:
    from vllm.v1.core.sched.scheduler import Scheduler as VllmScheduler

    from chunked_prefill.vllm import Scheduler

    return {"vllm": VllmScheduler, "chunked_prefill": Scheduler}


@pytest.fixture(params=["vllm", "chunked_prefill"])
def scheduler_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


CLOCK = Clock()


@pytest.mark.benchmark(group="vllm_step", timer=CLOCK)
def test_vllm_step(benchmark: Any, scheduler_name: str) -> None:
    """One step (``schedule`` + ``update_from_output``) per round, in CPU time."""
    size = SMOKE if benchmark.disabled else FULL
    scheduler = prepared(_classes()[scheduler_name], size)
    benchmark.pedantic(step, args=(scheduler, CLOCK), rounds=100, iterations=1)
    assert scheduler.get_num_unfinished_requests() > 0  # still the same workload


# --- the table for docs/performance.md --------------------------------------------------


def measure(
    steps: int, log_stats: bool = True, alternate: bool = True
) -> dict[str, list[StepTimes]]:
    """``steps`` steps of each scheduler: alternating step by step (a load on the machine hits
    both, and each step starts with caches the other one filled, as after a forward pass), or
    one scheduler after the other (warm caches)."""
    schedulers = {name: prepared(cls, FULL, log_stats) for name, cls in _classes().items()}
    if not alternate:
        return {name: [step(s) for _ in range(steps)] for name, s in schedulers.items()}
    times: dict[str, list[StepTimes]] = {name: [] for name in schedulers}
    for _ in range(steps):
        for name, scheduler in schedulers.items():
            times[name].append(step(scheduler))
    return times


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1e3:.3f}"


def table(steps: int, log_stats: bool = True, alternate: bool = True) -> str:
    """Median CPU ms per step of both schedulers over ``steps`` consecutive steps."""
    times = measure(steps, log_stats, alternate)
    lines = [
        "| scheduler | schedule() | update_from_output() | step | tokens/step | requests/step |",
        "|---|---|---|---|---|---|",
    ]
    step_ms = {}
    for name, rows in times.items():
        total = [r.schedule + r.update for r in rows]
        step_ms[name] = statistics.median(total)
        lines.append(
            f"| {name} | {_ms([r.schedule for r in rows])} ms | {_ms([r.update for r in rows])}"
            f" ms | {_ms(total)} ms | {statistics.mean(r.tokens for r in rows):.0f} |"
            f" {statistics.mean(r.running for r in rows):.0f} |"
        )
    ratio = step_ms["vllm"] / step_ms["chunked_prefill"]
    lines.append(f"\nvLLM / chunked_prefill (medians of {steps} steps): {ratio:.1f}x")
    return "\n".join(lines)


def profile(steps: int) -> None:
    """cProfile of the adapter's steps, by cumulative time."""
    scheduler = prepared(_classes()["chunked_prefill"], FULL)
    profiler = cProfile.Profile(time.thread_time)
    profiler.enable()
    for _ in range(steps):
        step(scheduler)
    profiler.disable()
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)


def main(argv: list[str]) -> None:
    args = [a for a in argv if not a.startswith("--")]
    steps = int(args[0]) if args else 200
    if "--profile" in argv:
        profile(steps)
        return
    alternate = "--sequential" not in argv
    print(table(steps, log_stats="--no-stats" not in argv, alternate=alternate))


if __name__ == "__main__":
    main(sys.argv[1:])
