"""What one step of :class:`~chunked_prefill.hf.PagedEngine` computed, and its wall time.

The counts are the inputs of the simulator's step-time model
(:meth:`chunked_prefill.sim.engine.EngineModel.step_time`), so a recorded run can later be
fitted against it.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

STEP_COLUMNS = (
    "prefill_tokens",
    "decode_tokens",
    "attention_pairs",
    "decode_context_tokens",
    "duration_s",
    "prefill_chunk_sq",
)
"""The columns of ``PagedEngine.generate(steps_csv=...)``, in order."""


@dataclass(frozen=True)
class StepRecord:
    """One engine step.

    ``prefill_tokens`` and ``decode_tokens``: the tokens of the step's prefill items (prompt
    chunks and the recomputation of preempted requests) and of its decode items.
    ``attention_pairs``: causal (query, key) pairs of the prefill items, ``n * start +
    n * (n + 1) / 2`` for ``n`` tokens after ``start`` already cached ones (prefix-cache hits
    included). ``decode_context_tokens``: the context each decode item reads, summed (its
    position + 1: the prompt and the tokens generated so far). ``duration_s``: wall time from
    ``schedule()`` to the end of ``update()``, the forward pass and the KV gather and scatter
    included; ``scheduler_s`` the part of it spent in ``schedule()`` and ``update()``;
    ``cpu_s`` the CPU time of the engine's thread over the same span (below ``duration_s``
    when the thread waited: for a CPU on a busy machine, or for a GPU). ``step_index``,
    ``num_items`` and ``num_preempted`` identify the batch. ``prefill_chunk_sq``: the squares
    of the prefill items' lengths, summed (the model's ``c_chunk_sq_s`` term).
    """

    step_index: int
    num_items: int
    num_preempted: int
    prefill_tokens: int
    decode_tokens: int
    attention_pairs: int
    decode_context_tokens: int
    duration_s: float
    scheduler_s: float
    cpu_s: float
    prefill_chunk_sq: int = 0

    @classmethod
    def of_batch(
        cls,
        batch: Any,
        computed: Iterable[Any],
        duration_s: float,
        scheduler_s: float,
        cpu_s: float,
    ) -> StepRecord:
        """The record of ``batch``, counting the items in ``computed`` (the ones that ran)."""
        prefill = decode = pairs = context = items = squares = 0
        for item in computed:
            n, start = item.tokens, item.start
            items += 1
            if item.is_prefill:
                prefill += n
                pairs += n * start + n * (n + 1) // 2
                squares += n * n
            else:
                decode += n
                context += start + n
        return cls(
            step_index=batch.step_index,
            num_items=items,
            num_preempted=len(batch.preempted),
            prefill_tokens=prefill,
            decode_tokens=decode,
            attention_pairs=pairs,
            decode_context_tokens=context,
            duration_s=duration_s,
            scheduler_s=scheduler_s,
            cpu_s=cpu_s,
            prefill_chunk_sq=squares,
        )


def write_steps_csv(path: str | os.PathLike[str], steps: Sequence[StepRecord]) -> None:
    """Write ``steps`` to ``path`` with the header :data:`STEP_COLUMNS`."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(STEP_COLUMNS)
        for s in steps:
            writer.writerow(
                (
                    s.prefill_tokens,
                    s.decode_tokens,
                    s.attention_pairs,
                    s.decode_context_tokens,
                    repr(s.duration_s),
                    s.prefill_chunk_sq,
                )
            )
