"""The serving scheduler as vLLM's scheduler: ``scheduler_cls="chunked_prefill.vllm.Scheduler"``.

``pip install 'chunked-prefill[vllm]'`` installs a vLLM this adapter supports. Use it with
``async_scheduling=False``::

    from vllm import LLM
    llm = LLM(model=..., scheduler_cls="chunked_prefill.vllm.Scheduler", async_scheduling=False)

or ``vllm serve MODEL --scheduler-cls chunked_prefill.vllm.Scheduler --no-async-scheduling``.
What it maps, refuses and records: docs/vllm.md.
"""

from __future__ import annotations

from ._recorder import ENV as STEPS_CSV_ENV
from ._recorder import StepRecorder
from ._scheduler import Scheduler

__all__ = ["STEPS_CSV_ENV", "Scheduler", "StepRecorder"]
