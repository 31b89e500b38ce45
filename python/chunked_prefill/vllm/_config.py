"""vLLM's configuration in the serving scheduler's terms, and what the adapter refuses.

Every refusal is one ``ValueError`` that names the vLLM setting and says why; the reasons
are listed in docs/vllm.md.
"""

from __future__ import annotations

import logging
from typing import Any

from .._core import ServingConfig

logger = logging.getLogger("chunked_prefill.vllm")

PREFIX = "chunked_prefill.vllm.Scheduler"


def refuse(setting: str, reason: str) -> ValueError:
    return ValueError(f"{PREFIX} does not support {setting}: {reason}")


def check_supported(vllm_config: Any, kv_cache_config: Any) -> None:
    """Raise ``ValueError`` for the first setting the adapter cannot serve."""
    sched, model = vllm_config.scheduler_config, vllm_config.model_config
    if sched.async_scheduling:
        raise refuse(
            "async_scheduling=True",
            "it plans step N+1 only after step N's update_from_output; pass async_scheduling=False",
        )
    if vllm_config.parallel_config.pipeline_parallel_size > 1:
        raise refuse(
            f"pipeline_parallel_size={vllm_config.parallel_config.pipeline_parallel_size}",
            "pipeline stages need several batches in flight, and it plans one at a time",
        )
    if vllm_config.speculative_config is not None:
        raise refuse("speculative_config", "the core schedules no draft tokens")
    if vllm_config.kv_transfer_config is not None:
        raise refuse("kv_transfer_config", "KV connectors load blocks the core does not own")
    if getattr(vllm_config, "ec_transfer_config", None) is not None:
        raise refuse("ec_transfer_config", "encoder-cache connectors need encoder inputs")
    if vllm_config.lora_config is not None:
        raise refuse("LoRA (enable_lora)", "the core does not batch by adapter")
    if model.is_encoder_decoder:
        raise refuse("encoder-decoder models", "the core schedules decoder tokens only")
    if model.is_multimodal_model:
        raise refuse(
            f"the multimodal model {model.model!r}", "the core schedules no encoder inputs"
        )
    if model.runner_type != "generate":
        raise refuse(f"runner={model.runner_type!r}", "only text generation is scheduled")
    if getattr(sched, "long_prefill_token_threshold_adaptive", False):
        raise refuse(
            "long_prefill_token_threshold_adaptive=True",
            "the core's chunk is min(tokens left, chunk_size, budget left), a fixed rule",
        )
    if not sched.enable_chunked_prefill:
        raise refuse(
            "enable_chunked_prefill=False",
            "the core always chunks prompts longer than the step's budget left",
        )
    if getattr(sched, "prefill_schedule_interval", 1) > 1:
        raise refuse(
            f"prefill_schedule_interval={sched.prefill_schedule_interval}",
            "the core admits prefills in every step (no prefill cadence)",
        )
    if getattr(sched, "max_num_active_seqs", None) is not None:
        raise refuse("max_num_active_seqs", "the core limits running requests only")
    check_kv_groups(kv_cache_config)


def check_kv_groups(kv_cache_config: Any) -> None:
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MLAAttentionSpec

    groups = kv_cache_config.kv_cache_groups
    if len(groups) != 1:
        raise refuse(
            f"{len(groups)} KV-cache groups",
            "the core keeps one block table per request (sliding-window and hybrid models"
            " have several)",
        )
    spec = groups[0].kv_cache_spec
    if type(spec) not in (FullAttentionSpec, MLAAttentionSpec):
        raise refuse(
            f"the KV-cache layout {type(spec).__name__}",
            "only full attention keeps every block of a request",
        )


def serving_config(
    vllm_config: Any,
    kv_cache_config: Any,
    block_size: int,
    max_prefills_per_step: int | None = None,
) -> ServingConfig:
    """The :class:`ServingConfig` of a vLLM deployment (the mapping is in docs/vllm.md).

    ``max_prefills_per_step``: the adapter's option; else vLLM's ``max_num_partial_prefills``
    where the installed vLLM has it; else no cap below ``max_num_seqs`` (as vLLM 0.32 and
    0.33 schedule).
    """
    sched, cache = vllm_config.scheduler_config, vllm_config.cache_config
    spec_block = kv_cache_config.kv_cache_groups[0].kv_cache_spec.block_size
    if spec_block != block_size:
        raise refuse(
            f"block_size={block_size} beside a KV-cache block of {spec_block} tokens",
            "hybrid block sizes need several block tables",
        )
    budget = getattr(sched, "max_num_scheduled_tokens", None) or sched.max_num_batched_tokens
    threshold = sched.long_prefill_token_threshold
    max_running = sched.max_num_seqs
    if max_running >= budget:
        # The core keeps one token of each step for prefill progress.
        logger.warning(
            "%s: max_num_seqs=%d capped at max_num_batched_tokens - 1 = %d",
            PREFIX,
            max_running,
            budget - 1,
        )
        max_running = budget - 1
    return ServingConfig(
        # vLLM keeps block 0 as its null block: the core's block b is vLLM's b + 1.
        num_blocks=kv_cache_config.num_blocks - 1,
        block_size=block_size,
        token_budget=budget,
        chunk_size=threshold if threshold > 0 else budget,
        max_prefills_per_step=max_prefills_per_step
        or getattr(sched, "max_num_partial_prefills", None)
        or max_running,
        max_running=max_running,
        watermark=float(getattr(sched, "watermark", 0.0)),
        prefix_caching=bool(cache.enable_prefix_caching),
    )
