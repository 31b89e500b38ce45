"""A reference engine loop: a transformers causal LM driven by the scheduler's steps."""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from ._args import (
    as_count,
    as_optional_count,
    check_model,
    check_prompts,
    optional_list,
    vocab_size,
)
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
    check_model(model)
    ids = check_prompts(prompts, vocab_size(model))
    module = resolve_backend(backend)
    cfg = convert_config(config, module)
    max_new_tokens = as_count("max_new_tokens", max_new_tokens)
    max_running = as_optional_count("max_running", max_running)
    timings = optional_list("timings", timings)
    run = _Run(_Forward(model), module.Scheduler(cfg), ids, max_new_tokens, max_running)
    # With interleave_decode=False a step may plan nothing while requests decode.
    fallback_decodes = max(cfg.max_decode_tokens, 1)
    with torch.inference_mode():
        while run.waiting or run.decoding or not run.scheduler.is_idle():
            timing = run.step(fallback_decodes, sync=timings is not None)
            if timings is not None:
                timings.append(timing)
    return run.outputs


class _Forward:
    """One forward pass of the model on a request's own ``DynamicCache``, with the keyword
    arguments this model's transformers version takes."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.device = model.device
        text_config = (
            model.config.get_text_config() if hasattr(model.config, "get_text_config") else None
        )
        self.cache_kwargs: dict[str, Any] = (
            {"config": text_config} if text_config is not None else {}
        )
        self.extra: dict[str, Any] = {}
        if _accepts(model, "logits_to_keep"):
            self.extra["logits_to_keep"] = 1
        self.pass_cache_position = _accepts(model, "cache_position")
        # transformers 5.24 renamed the forward argument ``past_key_values`` to ``cache``.
        use_new_name = not _accepts(model, "past_key_values") and _accepts(model, "cache")
        self.cache_arg = "cache" if use_new_name else "past_key_values"

    def new_cache(self) -> Any:
        return DynamicCache(**self.cache_kwargs)

    def __call__(self, rid: int, cache: Any, tokens: list[int], start: int) -> int:
        """Run ``tokens`` at positions ``start...`` and return the greedy next token."""
        seen = cache.get_seq_length()
        if seen != start:
            raise RuntimeError(f"request {rid}: chunk starts at {start} but its cache holds {seen}")
        positions = torch.arange(start, start + len(tokens), device=self.device)
        kwargs = dict(self.extra)
        kwargs[self.cache_arg] = cache
        if self.pass_cache_position:
            kwargs["cache_position"] = positions
        out = self.model(
            input_ids=torch.tensor([tokens], device=self.device),
            position_ids=positions.unsqueeze(0),
            use_cache=True,
            **kwargs,
        )
        return int(out.logits[0, -1].argmax())


class _Run:
    """The state of one :func:`generate` call: who waits, who decodes, their caches."""

    def __init__(
        self,
        forward: _Forward,
        scheduler: Any,
        ids: list[list[int]],
        max_new_tokens: int,
        max_running: int | None,
    ) -> None:
        self.forward = forward
        self.scheduler = scheduler
        self.ids = ids
        self.max_new_tokens = max_new_tokens
        self.max_running = max_running
        self.outputs: list[list[int]] = [[] for _ in ids]
        self.caches: dict[int, Any] = {}
        self.waiting = deque(range(len(ids)))
        self.decoding: list[int] = []  # oldest first: the order their prefill completed
        self.running = 0

    def step(self, fallback_decodes: int, *, sync: bool) -> StepTiming:
        """Admit, plan, run the chunks and decodes, drain: one engine step."""
        t_step = perf_counter()
        self._admit()
        step = self.scheduler.next_step(len(self.decoding))
        t_sched = perf_counter() - t_step
        n_decode = step.decode_tokens
        if n_decode == 0 and not step.chunks:
            if not self.decoding:
                raise RuntimeError(f"the scheduler planned an empty step {step.step_index}")
            n_decode = min(len(self.decoding), fallback_decodes)
        to_decode = self.decoding[:n_decode]
        t_fwd = perf_counter()
        started, finished = self._run_chunks(step.chunks)
        finished |= self._run_decodes(to_decode)
        if sync and self.forward.device.type == "cuda":
            torch.cuda.synchronize(self.forward.device)
        forward_s = perf_counter() - t_fwd
        self._retire(started, finished)
        t_drain = perf_counter()
        self.scheduler.drain_completed()
        t_end = perf_counter()
        return StepTiming(
            step_index=step.step_index,
            scheduler_s=t_sched + (t_end - t_drain),
            forward_s=forward_s,
            total_s=t_end - t_step,
            prefill_tokens=step.prefill_tokens,
            decode_tokens=len(to_decode),
        )

    def _admit(self) -> None:
        while self.waiting and (self.max_running is None or self.running < self.max_running):
            rid = self.waiting.popleft()
            self.scheduler.enqueue(rid, len(self.ids[rid]))
            self.caches[rid] = self.forward.new_cache()
            self.running += 1

    def _run_chunks(self, chunks: Sequence[Any]) -> tuple[list[int], set[int]]:
        """Run each prefill chunk; a last chunk emits the first output token."""
        started: list[int] = []
        finished: set[int] = set()
        for chunk in chunks:
            rid, start = chunk.request_id, chunk.start
            tokens = self.ids[rid][start : start + chunk.tokens]
            token = self.forward(rid, self.caches[rid], tokens, start)
            if chunk.is_last:
                self.outputs[rid].append(token)
                if self.max_new_tokens == 1:
                    finished.add(rid)
                else:
                    started.append(rid)
        return started, finished

    def _run_decodes(self, to_decode: list[int]) -> set[int]:
        finished: set[int] = set()
        for rid in to_decode:
            out = self.outputs[rid]
            position = len(self.ids[rid]) + len(out) - 1
            out.append(self.forward(rid, self.caches[rid], [out[-1]], position))
            if len(out) == self.max_new_tokens:
                finished.add(rid)
        return finished

    def _retire(self, started: list[int], finished: set[int]) -> None:
        if finished:
            self.decoding = [rid for rid in self.decoding if rid not in finished]
            for rid in finished:
                del self.caches[rid]
            self.running -= len(finished)
        self.decoding.extend(started)
