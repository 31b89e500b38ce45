"""Drive Hugging Face transformers models with the chunked-prefill scheduler.

Three ways in, all greedy-token-identical to unchunked generation:

- :func:`generate`: a small reference engine loop. Every step asks a
  :class:`chunked_prefill.Scheduler` for a :class:`~chunked_prefill.Step`, runs the prompt
  chunks it names (each at its ``start``, on the request's own KV cache) and one decode token
  for up to ``decode_tokens`` decoding requests, oldest first.
- :class:`PagedEngine`: a small paged-attention engine driven by a
  :class:`chunked_prefill.ServingScheduler`: its KV cache is one pool of blocks, read and
  written only through the block tables the scheduler hands out, with prefix caching and
  preemption.
- :func:`register`: adds :class:`ChunkedPrefillCBScheduler` to transformers' continuous
  batching as ``scheduler_type="chunked_prefill"``, so ``model.generate_batch(...)`` and the
  continuous-batching manager take their per-step decisions from this package.

Needs the optional extra: ``pip install '.[hf]'`` in the checkout (torch, transformers).
:func:`generate` works with any transformers release whose causal LMs take ``position_ids``
and a ``DynamicCache``; :func:`register` needs a supported 5.x release
(:data:`SUPPORTED_TRANSFORMERS`), because the continuous-batching scheduler interface changed
between 4.57 and 5.x and is internal to transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._steps import STEP_COLUMNS, StepRecord

# First: without torch and transformers, this raises the ImportError naming the extra.
from . import _loop  # noqa: F401
from ._args import as_optional_count, reject
from ._backend import resolve_backend, resolve_serving_backend
from ._kv_pool import KVPool
from ._loop import StepTiming, generate
from ._paged import PagedEngine, RequestTiming
from ._version import (
    SUPPORTED_TRANSFORMERS,
    VERIFIED_TRANSFORMERS,
    UnsupportedTransformersError,
    check_transformers_version,
)

if TYPE_CHECKING:
    from ._cb import ChunkedPrefillCBScheduler

__all__ = [
    "SCHEDULER_NAME",
    "STEP_COLUMNS",
    "SUPPORTED_TRANSFORMERS",
    "VERIFIED_TRANSFORMERS",
    "ChunkedPrefillCBScheduler",
    "KVPool",
    "PagedEngine",
    "RequestTiming",
    "StepRecord",
    "StepTiming",
    "UnsupportedTransformersError",
    "check_transformers_version",
    "generate",
    "register",
    "resolve_backend",
    "resolve_serving_backend",
    "timed_scheduler",
]

SCHEDULER_NAME = "chunked_prefill"
"""The ``scheduler_type`` under which :func:`register` installs the scheduler by default."""


def register(
    name: str = SCHEDULER_NAME,
    *,
    chunk_size: int | None = None,
    max_prefills_per_step: int | None = None,
    backend: Any = None,
) -> type[ChunkedPrefillCBScheduler]:
    """Add the chunked-prefill scheduler to transformers' ``SCHEDULER_MAPPING`` as ``name``.

    After this, ``ContinuousBatchingConfig(scheduler_type=name)`` selects it in
    ``model.generate_batch(...)`` and the continuous-batching manager. transformers builds its
    scheduler itself from ``(cache, safety_margin, max_requests_per_batch)``, so the policy
    options are fixed here:

    - ``chunk_size``: most prompt tokens one request receives in one batch (default: 512, or
      the manager's ``max_batch_tokens`` if smaller).
    - ``max_prefills_per_step``: most requests that receive a prompt chunk in one batch
      (default: 4, and always less than ``max_requests_per_batch`` when that is above 1, so
      decodes are never shut out by prefills).
    - ``backend``: ``"rust"``, ``"pure"``, a backend module, or ``None`` for the package's
      default (:mod:`chunked_prefill`).

    The token budget of each batch is the manager's ``max_batch_tokens``; decodes go first.
    Calling it again with the same ``name`` replaces the earlier registration. Returns the
    registered class. Raises :class:`UnsupportedTransformersError`, naming the supported
    versions, when the installed transformers is not one of them.
    """
    if not isinstance(name, str):
        reject("name", "a str", name)
    if not name:
        raise ValueError("name must be a non-empty str, got ''")
    chunk_size = as_optional_count("chunk_size", chunk_size)
    max_prefills_per_step = as_optional_count("max_prefills_per_step", max_prefills_per_step)
    module = None if backend is None else resolve_backend(backend)
    check_transformers_version()
    from transformers.generation.continuous_batching.scheduler import SCHEDULER_MAPPING

    from ._cb import ChunkedPrefillCBScheduler, configured

    if chunk_size is None and max_prefills_per_step is None and module is None:
        cls: type[ChunkedPrefillCBScheduler] = ChunkedPrefillCBScheduler
    else:
        cls = configured(
            chunk_size=chunk_size,
            max_prefills_per_step=max_prefills_per_step,
            backend=module,
        )
    SCHEDULER_MAPPING[name] = cls
    return cls


def timed_scheduler(cls: type[Any], sink: list[float]) -> type[Any]:
    """A subclass of the transformers scheduler class ``cls`` that times ``schedule_batch``.

    Every call appends its wall time in seconds to ``sink``. Register the result under a
    name of your own (``SCHEDULER_MAPPING["timed"] = timed_scheduler(FIFOScheduler, t)``) to
    compare schedulers on one workload; the figures in ``docs/hf.md`` come from this.
    """
    from time import perf_counter

    if not isinstance(cls, type) or not callable(getattr(cls, "schedule_batch", None)):
        reject("cls", "a transformers Scheduler class (with schedule_batch)", cls)
    if not isinstance(sink, list):
        reject("sink", "a list to append to", sink)
    inner = cls.schedule_batch

    def schedule_batch(self: Any, token_budget: int, cache_budget: int) -> Any:
        t0 = perf_counter()
        try:
            return inner(self, token_budget, cache_budget)
        finally:
            sink.append(perf_counter() - t0)

    timed = type(f"Timed{cls.__name__}", (cls,), {"schedule_batch": schedule_batch})
    timed.__doc__ = f"{cls.__name__} with ``schedule_batch`` timed."
    return timed


def __getattr__(name: str) -> Any:
    # The scheduler class imports transformers internals that only supported releases have,
    # so it is loaded on first use rather than with this module.
    if name == "ChunkedPrefillCBScheduler":
        check_transformers_version()
        from ._cb import ChunkedPrefillCBScheduler

        return ChunkedPrefillCBScheduler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
