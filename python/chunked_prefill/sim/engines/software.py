"""The software a step runs on, beside the GPU: the serving engine's CPU time and the
attention kernels (issue 23).

The roofline's GPU terms come from the model and the GPU (:mod:`.catalog`); two costs depend
on the software instead:

- :class:`ServingEngine`: the CPU work of one step that the GPU waits for (scheduling, input
  preparation, sampling's bookkeeping, output processing), per step and per sequence, and in
  eager mode the kernel launches (the step lasts at least as long as launching its kernels
  one by one: CUDA graphs replay them at once);
- :class:`AttentionBackend`: how prefill attention's (query, key) pairs are charged, and how
  much of the KV cache decode attention reads.

``docs/engines.md`` gives the source of every figure.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from .._check import boolean, count
from .gpus import GpuSpec, resolve_gpu

__all__ = [
    "ATTENTION_BACKENDS",
    "DEFAULT_ATTENTION_BACKEND",
    "DEFAULT_SERVING_ENGINE",
    "SERVING_ENGINES",
    "AttentionBackend",
    "ServingEngine",
    "resolve_attention_backend",
    "resolve_serving_engine",
    "vllm_software",
    "vllm_token_budget",
]


V0_OUTPUT_SEQ_S = (3.4e-3 - 0.2e-3) / 31
"""V0's ``_process_model_outputs`` per sequence of a step (detokenizing, stop checks, the
sequences' bookkeeping): the line through RFC #6913's 0.2 ms at batch 1 and 3.4 ms at
batch 32 (vLLM issue #6913, July 2024: Llama-3-70B FP8 on 4 H100s), about 103 us."""

V0_OUTPUT_STEP_S = 0.2e-3 - V0_OUTPUT_SEQ_S
"""The same line's time at no sequence: about 97 us a step."""


@dataclass(frozen=True)
class ServingEngine:
    """The CPU side of a serving engine's step."""

    name: str
    cpu_step_s: float
    """CPU time per step the GPU waits for (not overlapped with the forward pass)."""
    cpu_seq_s: float
    """CPU time per sequence of the step (one per decode and per prefill chunk)."""
    launch_layer_s: float
    """CPU time to launch one layer's kernels one by one (0 with CUDA graphs)."""
    description: str
    source: str


SERVING_ENGINES: dict[str, ServingEngine] = {
    engine.name: engine
    for engine in (
        ServingEngine(
            name="vllm",
            cpu_step_s=0.5e-3,
            cpu_seq_s=5e-6,
            launch_layer_s=0.0,
            description="vLLM V1 (0.8+), CUDA graphs, synchronous scheduling",
            source="vLLM 0.33's scheduler measured here (benches/bench_vllm.py: about 3 us"
            " per running request and 0.1 ms per step of schedule() + update_from_output()),"
            " plus the model runner's input preparation and sampler bookkeeping",
        ),
        ServingEngine(
            name="vllm-eager",
            cpu_step_s=0.5e-3,
            cpu_seq_s=5e-6,
            launch_layer_s=150e-6,
            description="vLLM V1 with enforce_eager=True (no CUDA graphs)",
            source="as vllm, plus about 10 kernels a decoder layer launched from Python at"
            " about 15 us each (PyTorch's eager dispatch)",
        ),
        ServingEngine(
            name="vllm-v0",
            cpu_step_s=1.5e-3,
            cpu_seq_s=20e-6,
            launch_layer_s=0.0,
            description="vLLM V0 0.6 and 0.7, CUDA graphs (output processing overlapped)",
            source="vLLM's v0.6.0 performance post (blog.vllm.ai, 2024-09-05): scheduling and"
            " output processing were 29 % and the GPU 38 % of a Llama-3-8B H100 step in v0.5.3",
        ),
        ServingEngine(
            name="vllm-v0-sync",
            cpu_step_s=1.5e-3 + V0_OUTPUT_STEP_S,
            cpu_seq_s=20e-6 + V0_OUTPUT_SEQ_S,
            launch_layer_s=0.0,
            description="vLLM V0 before 0.6, CUDA graphs: output processing on the critical path",
            source="as vllm-v0, plus _process_model_outputs, which the GPU waited for until the"
            " asynchronous output processor (vLLM PR #7049, in 0.6.0): 0.2 ms at batch 1 and"
            " 3.4 ms at batch 32 (RFC #6913, Llama-3-70B FP8 on 4 H100s)",
        ),
        ServingEngine(
            name="vllm-v0-eager",
            cpu_step_s=1.5e-3 + V0_OUTPUT_STEP_S,
            cpu_seq_s=20e-6 + V0_OUTPUT_SEQ_S,
            launch_layer_s=150e-6,
            description="vLLM V0 (before 0.8) with enforce_eager=True: output processing on"
            " the critical path",
            source="as vllm-v0-sync (V0 turns the asynchronous output processor off in eager"
            " mode: 'Since, enforce-eager is enabled, async output processor cannot be used'),"
            " with vllm-eager's kernel launches",
        ),
        ServingEngine(
            name="sglang",
            cpu_step_s=0.2e-3,
            cpu_seq_s=2e-6,
            launch_layer_s=0.0,
            description="SGLang with its overlap scheduler and CUDA graphs",
            source="SGLang v0.4 release post (lmsys.org, 2024-12-04): the zero-overhead batch"
            " scheduler overlaps the CPU scheduling with the GPU's previous batch",
        ),
        ServingEngine(
            name="tensorrt-llm",
            cpu_step_s=0.2e-3,
            cpu_seq_s=1e-6,
            launch_layer_s=0.0,
            description="TensorRT-LLM's C++ runtime (in-flight batching)",
            source="a C++ batch manager: CPU time per step of the order of 0.1 ms",
        ),
        ServingEngine(
            name="none",
            cpu_step_s=0.0,
            cpu_seq_s=0.0,
            launch_layer_s=0.0,
            description="GPU time only (Vidur's profiles, which leave CPU overhead out)",
            source="Vidur (Agrawal et al., MLSys 2024): CPU overheads off by default",
        ),
    )
}
"""Serving engines (``--serving-engine NAME``) and their CPU costs."""

DEFAULT_SERVING_ENGINE = "vllm"


@dataclass(frozen=True)
class AttentionBackend:
    """How attention is charged. Prefill: each causal (query, key) pair at its FLOPs and
    ``pair_efficiency`` (``None``: the GPU's ``attention_efficiency``); ``chunk_square``
    adds a cost per squared chunk token at the GPU's ``chunk_attention_efficiency`` (a
    kernel whose cost grows with the chunk beyond its pairs). Decode: reading each context
    token's K and V once per K/V head, or, with ``kv_read_per_query_head``, once per query
    head (a kernel that gives each query head its own thread block, as vLLM's PagedAttention,
    reads a K/V head's cache as many times as query heads share it)."""

    name: str
    chunk_square: bool
    pair_efficiency: float | None
    description: str
    kv_read_per_query_head: bool = False


ATTENTION_BACKENDS: dict[str, AttentionBackend] = {
    backend.name: backend
    for backend in (
        AttentionBackend(
            name="flash",
            chunk_square=False,
            pair_efficiency=None,
            description="FlashAttention-2/3 (vLLM's and SGLang's default): pairs only",
        ),
        AttentionBackend(
            name="vidur",
            chunk_square=True,
            pair_efficiency=0.65,
            description="the kernel of Vidur's A100 profiles: pairs plus a term per squared"
            " chunk token",
        ),
        AttentionBackend(
            name="paged",
            chunk_square=False,
            pair_efficiency=None,
            description="vLLM's PagedAttention decode kernel (vLLM before 0.4.3, and V0's"
            " XFORMERS backend): FlashAttention prefill, decode reading each K/V head once per"
            " query head",
            kv_read_per_query_head=True,
        ),
    )
}
"""Attention backends (``--attention-backend NAME``)."""

DEFAULT_ATTENTION_BACKEND = "flash"


def _resolve(kind: str, table: dict[str, object], name: str) -> object:
    if not isinstance(name, str) or name not in table:
        raise ValueError(f"unknown {kind} {name!r}: one of {', '.join(table)}")
    return table[name]


def resolve_serving_engine(engine: str | ServingEngine) -> ServingEngine:
    """A :data:`SERVING_ENGINES` name or a spec as is."""
    if isinstance(engine, ServingEngine):
        return engine
    found = _resolve("serving engine", dict(SERVING_ENGINES), engine)
    assert isinstance(found, ServingEngine)
    return found


def resolve_attention_backend(backend: str | AttentionBackend) -> AttentionBackend:
    """An :data:`ATTENTION_BACKENDS` name or a spec as is."""
    if isinstance(backend, AttentionBackend):
        return backend
    found = _resolve("attention backend", dict(ATTENTION_BACKENDS), backend)
    assert isinstance(found, AttentionBackend)
    return found


VLLM_FLASH_DECODE_FROM = (0, 4, 3)
"""The first vLLM release whose decode attention is FlashAttention's (PR #4907, 2024-05-19):
the ones before decode through its PagedAttention kernel (the ``paged`` backend)."""

VLLM_ASYNC_OUTPUT_FROM = (0, 6, 0)
"""The first vLLM release that processes a step's outputs while the GPU runs the next (the
asynchronous output processor, PR #7049, merged 2024-08; with CUDA graphs only)."""

VLLM_V1_FROM = (0, 8, 0)
"""The first vLLM release that runs its V1 engine by default (March 2025)."""

VLLM_V1_TOKEN_BUDGETS = {
    (True, True): 16384,
    (True, False): 8192,
    (False, True): 8192,
    (False, False): 2048,
}
"""V1's default ``max_num_batched_tokens`` (chunked prefill always on), by (an H100 or H200,
offline): vLLM PR #12369 (January 2025) raised it on GPUs whose name holds ``h100`` or
``h200`` to 16 384 for the ``LLM`` class (offline: ``benchmark_latency``, scripts) and
8 192 for the API server (``vllm serve``), and kept 8 192 and 2 048 on the others."""

VLLM_LONG_CONTEXT_CHUNKING_FROM = (0, 5, 4)
"""The first vLLM release that turns chunked prefill on by default for a long
``max_model_len`` (PR #6666, merged 2024-07-23, "to avoid possible OOM errors during the
initial memory profiling"; 0.5.3 was tagged the same day and is not counted)."""

VLLM_LONG_CONTEXT = 32768
"""V0 chunks prompts by default when ``max_model_len`` is over this (``use_long_context``)."""

VLLM_V0_CHUNKED_BUDGET = 512
"""V0's default ``max_num_batched_tokens`` with chunked prefill on (its ``SchedulerConfig``:
"the values that have the best balance between ITL and TTFT on A100"; the engine logs
"Chunked prefill is enabled with max_num_batched_tokens=512")."""

_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?!\d)")


def _release(version: str) -> tuple[int, int, int]:
    """``version``'s (major, minor, patch); :class:`TypeError` or :class:`ValueError` as
    :func:`vllm_software` documents."""
    if not isinstance(version, str):
        raise TypeError(f"vLLM version must be a string such as '0.4.2', got {version!r}")
    found = _VERSION.match(version)
    if found is None:
        raise ValueError(
            f"vLLM version {version!r}: want MAJOR.MINOR or MAJOR.MINOR.PATCH, e.g. 0.4.2"
        )
    major, minor, patch = (int(part or 0) for part in found.groups())
    return major, minor, patch


def vllm_software(version: str, *, eager: bool = False) -> tuple[str, str]:
    """The :data:`SERVING_ENGINES` and :data:`ATTENTION_BACKENDS` names that model vLLM
    release ``version`` (``"0.4.2"``, ``"v0.6.4.post1"``, ``"0.10.1rc1"``): ``vllm-v0-sync``
    before 0.6, ``vllm-v0`` from it, ``vllm`` from 0.8 (with ``eager``, vLLM's
    ``enforce_eager``: ``vllm-v0-eager`` before 0.8, ``vllm-eager`` from it); ``paged``
    before 0.4.3, ``flash`` from it. Raises :class:`TypeError` for a version that is no
    string, :class:`ValueError` for one that does not start with ``MAJOR.MINOR``."""
    release = _release(version)
    backend = "paged" if release < VLLM_FLASH_DECODE_FROM else "flash"
    if release >= VLLM_V1_FROM:
        return ("vllm-eager" if eager else "vllm"), backend
    if eager:
        return "vllm-v0-eager", backend
    return ("vllm-v0" if release >= VLLM_ASYNC_OUTPUT_FROM else "vllm-v0-sync"), backend


def vllm_token_budget(
    version: str,
    max_model_len: int,
    *,
    gpu: str | os.PathLike[str] | GpuSpec | None = None,
    offline: bool = False,
) -> int | None:
    """The tokens a step of vLLM release ``version`` holds by default when the engine is
    started with ``max_model_len``, ``None`` where it prefills each prompt whole in one
    step (V0's default). V0 from 0.5.4 turns chunked prefill on for a ``max_model_len``
    over :data:`VLLM_LONG_CONTEXT` tokens, at :data:`VLLM_V0_CHUNKED_BUDGET` (on CUDA
    GPUs). V1 (0.8 on) always chunks, at a budget that depends on the ``gpu`` (a preset,
    alias, profile or spec; required for V1) and on the entry point, ``offline`` for the
    ``LLM`` class, else the API server (:data:`VLLM_V1_TOKEN_BUDGETS`). Give the result as
    both ``chunk_size`` and ``token_budget``. Raises as :func:`vllm_software` for a bad
    ``version``; :class:`ValueError` for a ``max_model_len`` that is no int in [1, 2**63 - 1]
    (the simulator's rule for counts) and for V1 without a ``gpu``; :class:`TypeError` for
    an ``offline`` that is no bool."""
    release = _release(version)
    max_model_len = count("max_model_len", max_model_len, 1, 2**63 - 1)
    offline = boolean("offline", offline)
    if release >= VLLM_V1_FROM:
        if gpu is None:
            raise ValueError(
                f"vLLM {version}'s default token budget depends on the GPU (V1: larger on"
                " the H100 and H200): give gpu="
            )
        name = resolve_gpu(gpu).name.lower()
        hopper = "h100" in name or "h200" in name
        return VLLM_V1_TOKEN_BUDGETS[hopper, offline]
    if release >= VLLM_LONG_CONTEXT_CHUNKING_FROM and max_model_len > VLLM_LONG_CONTEXT:
        return VLLM_V0_CHUNKED_BUDGET
    return None
