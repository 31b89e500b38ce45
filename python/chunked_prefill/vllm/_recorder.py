"""The step recorder: one row per engine step, in the steps-file format ``chunked-prefill fit``
reads, so a vLLM deployment can calibrate the simulator on its own hardware.

A row is written and flushed at the end of each step (a server that is stopped keeps the steps
it ran). ``duration_s`` is the wall time from the start of ``schedule()`` to the end of
``update_from_output()``: the model's forward pass and sampling, and this adapter's own work.
"""

from __future__ import annotations

import csv
import os
from time import perf_counter, thread_time
from typing import IO, Any

from .._output import _unwritable
from .._steps import STEP_COLUMNS, StepRecord, step_row

ENV = "CHUNKED_PREFILL_STEPS_CSV"
"""The environment variable that names the steps file."""


class StepRecorder:
    """Writes ``path`` as the engine runs; ``name`` names the setting in errors."""

    def __init__(self, path: str | os.PathLike[str], name: str) -> None:
        shown = os.fspath(path)
        if not isinstance(shown, str):
            raise TypeError(f"{name} must be a file path (str), got {type(shown).__name__}")
        reason = _unwritable(shown)
        if reason is not None:
            raise ValueError(f"{name}: cannot write {shown!r}: {reason}")
        self._file: IO[str] = open(shown, "w", newline="", encoding="utf-8")  # noqa: SIM115
        self._writer = csv.writer(self._file)
        self._writer.writerow(STEP_COLUMNS)
        self._file.flush()
        self._start = self._cpu = self._scheduler_s = 0.0

    def begin(self) -> None:
        """The start of ``schedule()``."""
        self._start, self._cpu = perf_counter(), thread_time()

    def add_scheduler_time(self, seconds: float) -> None:
        self._scheduler_s += seconds

    def end(self, batch: Any) -> None:
        """The end of ``update_from_output()`` for ``batch`` (a :class:`~chunked_prefill.Batch`)."""
        duration = perf_counter() - self._start
        record = StepRecord.of_batch(
            batch, batch.items, duration, self._scheduler_s, thread_time() - self._cpu
        )
        self._scheduler_s = 0.0
        self._writer.writerow(step_row(record))
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def recorder_for(option: str | os.PathLike[str] | None) -> StepRecorder | None:
    """The recorder the environment (first) or the subclass option asks for, if any."""
    env = os.environ.get(ENV)
    if env:
        return StepRecorder(env, ENV)
    if option is not None:
        return StepRecorder(option, "steps_csv")
    return None
