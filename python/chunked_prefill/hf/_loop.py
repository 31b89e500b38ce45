"""A reference engine loop: a transformers causal LM driven by the scheduler's steps."""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from ._backend import convert_config, resolve_backend

try:
    import torch
    from transformers import DynamicCache
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "chunked_prefill.hf needs torch and transformers: pip install '.[hf]' in the checkout"
    ) from exc


@dataclass(frozen=True)
class StepTiming:
    """Wall time of one engine step of :func:`generate`, split by who spent it.

    ``scheduler_s`` covers the scheduler calls (``enqueue``, ``next_step``,
    ``drain_completed``), ``forward_s`` the model forward passes (with the argmax of the
    tokens they emit), ``total_s`` the whole step including the loop's own bookkeeping.
    """

    step_index: int
    scheduler_s: float
    forward_s: float
    total_s: float
    prefill_tokens: int
    decode_tokens: int


def _accepts(model: Any, name: str) -> bool:
    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        return False


def generate(
    model: Any,
    prompts: Sequence[Sequence[int]],
    *,
    config: Any,
    max_new_tokens: int,
    max_running: int | None = None,
    backend: Any = None,
    timings: list[StepTiming] | None = None,
) -> list[list[int]]:
    """Greedy generation of ``max_new_tokens`` tokens per prompt, planned by the scheduler.

    ``prompts`` are token-id lists; ``config`` is a :class:`chunked_prefill.Config` (of any
    backend). Each step asks ``Scheduler.next_step(number of decoding requests)`` for a plan,
    runs every chunk it names at its ``start`` on the request's own ``DynamicCache`` (with
    ``position_ids``, and ``cache_position`` for models that still take it), emits the first
    output token from the last logits of each ``is_last`` chunk, and runs one decode token
    for each of the ``decode_tokens`` oldest decoding requests. Finished prompts are drained
    every step.

    ``max_running`` caps the requests in flight (prefilling or decoding, i.e. holding a KV
    cache); the others wait outside the scheduler and are enqueued in order as slots free.
    ``backend`` picks the scheduler (``"rust"``, ``"pure"``, a module, or ``None`` for the
    package default). ``timings``, if given, receives one :class:`StepTiming` per step.

    If a step plans no work at all while requests are decoding (``interleave_decode=False``
    gives such steps once prefill is done), the loop runs a decode-only step of up to
    ``max(max_decode_tokens, 1)`` tokens, so generation always finishes.

    Runs on whatever device the model is on, one forward per chunk and per decode: it is a
    reference for correctness, not a batched engine. Returns the generated tokens of each
    prompt, in the order of ``prompts``; greedy output matches ``model.generate(ids,
    do_sample=False, max_new_tokens=..., min_new_tokens=...)`` token for token.
    """
    module = resolve_backend(backend)
    cfg = convert_config(config, module)
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    if max_running is not None and max_running < 1:
        raise ValueError(f"max_running must be at least 1 or None, got {max_running}")
    ids = [[int(t) for t in p] for p in prompts]
    for i, p in enumerate(ids):
        if not p:
            raise ValueError(f"prompt {i} is empty")

    device = model.device
    text_config = (
        model.config.get_text_config() if hasattr(model.config, "get_text_config") else None
    )
    cache_kwargs: dict[str, Any] = {"config": text_config} if text_config is not None else {}
    extra: dict[str, Any] = {}
    if _accepts(model, "logits_to_keep"):
        extra["logits_to_keep"] = 1
    pass_cache_position = _accepts(model, "cache_position")
    # transformers 5.24 renamed the forward argument ``past_key_values`` to ``cache``.
    use_new_name = not _accepts(model, "past_key_values") and _accepts(model, "cache")
    cache_arg = "cache" if use_new_name else "past_key_values"
    fallback_decodes = max(cfg.max_decode_tokens, 1)

    scheduler = module.Scheduler(cfg)
    outputs: list[list[int]] = [[] for _ in ids]
    caches: dict[int, Any] = {}
    waiting = deque(range(len(ids)))
    decoding: list[int] = []  # oldest first: the order their prefill completed
    running = 0

    def forward(rid: int, tokens: list[int], start: int) -> int:
        cache = caches[rid]
        seen = cache.get_seq_length()
        if seen != start:
            raise RuntimeError(f"request {rid}: chunk starts at {start} but its cache holds {seen}")
        n = len(tokens)
        positions = torch.arange(start, start + n, device=device)
        kwargs = dict(extra)
        kwargs[cache_arg] = cache
        if pass_cache_position:
            kwargs["cache_position"] = positions
        out = model(
            input_ids=torch.tensor([tokens], device=device),
            position_ids=positions.unsqueeze(0),
            use_cache=True,
            **kwargs,
        )
        return int(out.logits[0, -1].argmax())

    with torch.inference_mode():
        while waiting or decoding or not scheduler.is_idle():
            t_step = perf_counter()
            while waiting and (max_running is None or running < max_running):
                rid = waiting.popleft()
                scheduler.enqueue(rid, len(ids[rid]))
                caches[rid] = DynamicCache(**cache_kwargs)
                running += 1
            step = scheduler.next_step(len(decoding))
            t_sched = perf_counter() - t_step

            n_decode = step.decode_tokens
            if n_decode == 0 and not step.chunks:
                if not decoding:
                    raise RuntimeError(f"the scheduler planned an empty step {step.step_index}")
                n_decode = min(len(decoding), fallback_decodes)
            to_decode = decoding[:n_decode]
            finished: set[int] = set()
            started: list[int] = []

            t_fwd = perf_counter()
            for chunk in step.chunks:
                rid, start = chunk.request_id, chunk.start
                token = forward(rid, ids[rid][start : start + chunk.tokens], start)
                if chunk.is_last:
                    outputs[rid].append(token)
                    if max_new_tokens == 1:
                        finished.add(rid)
                    else:
                        started.append(rid)
            for rid in to_decode:
                out = outputs[rid]
                token = forward(rid, [out[-1]], len(ids[rid]) + len(out) - 1)
                out.append(token)
                if len(out) == max_new_tokens:
                    finished.add(rid)
            if timings is not None and device.type == "cuda":
                torch.cuda.synchronize(device)
            forward_s = perf_counter() - t_fwd

            if finished:
                decoding = [rid for rid in decoding if rid not in finished]
                for rid in finished:
                    del caches[rid]
                running -= len(finished)
            decoding.extend(started)
            t_drain = perf_counter()
            scheduler.drain_completed()
            t_end = perf_counter()
            if timings is not None:
                timings.append(
                    StepTiming(
                        step_index=step.step_index,
                        scheduler_s=t_sched + (t_end - t_drain),
                        forward_s=forward_s,
                        total_s=t_end - t_step,
                        prefill_tokens=step.prefill_tokens,
                        decode_tokens=len(to_decode),
                    )
                )
    return outputs
