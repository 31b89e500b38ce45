"""What one engine step computed, and its wall time: the rows of a steps file that
``chunked-prefill fit`` reads, written by :class:`~chunked_prefill.hf.PagedEngine` and by the
vLLM adapter's step recorder (:mod:`chunked_prefill.vllm`).

The counts are the inputs of the simulator's step-time model
(:meth:`chunked_prefill.sim.engine.EngineModel.step_time`), so a recorded run can later be
fitted against it.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import os
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import IO, Any

from ._output import _temporary

STEP_COLUMNS = (
    "prefill_tokens",
    "decode_tokens",
    "attention_pairs",
    "decode_context_tokens",
    "duration_s",
    "prefill_chunk_sq",
    "prefill_chunks",
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
    of the prefill items' lengths, summed (the model's ``c_chunk_sq_s`` term);
    ``prefill_chunks``: the number of prefill items (the roofline's LM-head rows and
    per-sequence CPU time count one per chunk).
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
    prefill_chunks: int = 0

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
        prefill = decode = pairs = context = items = squares = chunks = 0
        for item in computed:
            n, start = item.tokens, item.start
            items += 1
            if item.is_prefill:
                prefill += n
                pairs += n * start + n * (n + 1) // 2
                squares += n * n
                chunks += 1
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
            prefill_chunks=chunks,
        )


def write_steps_csv(path: str | os.PathLike[str], steps: Sequence[StepRecord]) -> None:
    """Write ``steps`` to ``path`` with the header :data:`STEP_COLUMNS` (through a temporary
    file renamed into place, so a failed write leaves an existing file whole)."""
    out = OutputFile("path", path)
    out.commit(lambda f: write_rows(f, steps))


def write_rows(f: IO[str], steps: Sequence[StepRecord]) -> None:
    writer = csv.writer(f)
    writer.writerow(STEP_COLUMNS)
    writer.writerows(step_row(s) for s in steps)


def step_row(s: StepRecord) -> tuple[object, ...]:
    """The cells of ``s`` under :data:`STEP_COLUMNS`."""
    return (
        s.prefill_tokens,
        s.decode_tokens,
        s.attention_pairs,
        s.decode_context_tokens,
        repr(s.duration_s),
        s.prefill_chunk_sq,
        s.prefill_chunks,
    )


def _os_error(name: str, shown: str, err: OSError) -> OSError:
    """``err``'s class (``FileNotFoundError``, ``PermissionError``, ...) and errno, with a
    message naming the argument: ``steps_csv: cannot write 'x/s.csv': No such file...``."""
    reason = err.strerror or str(err)
    new = type(err)(f"{name}: cannot write {shown!r}: {reason}")
    new.errno = err.errno  # without a filename, str() stays the message above
    return new


class OutputFile:
    """A file the caller writes after its work: the path is checked, and a temporary file
    beside it created, when this is built (before the work); :meth:`commit` writes the
    temporary file and renames it into place, :meth:`discard` removes it, so a run that
    fails leaves an existing file whole.

    The path follows symbolic links as ``open()`` does (the link keeps pointing at the new
    file). A target that exists and is no regular file (``/dev/null``, a FIFO) is written in
    place, as ``open()`` would.
    """

    def __init__(self, name: str, path: object) -> None:
        if not isinstance(path, (str, os.PathLike)) or not isinstance(os.fspath(path), str):
            raise TypeError(
                f"{name} must be a file path (a str or an os.PathLike of a str), got"
                f" {type(path).__name__}: {path!r}"
            )
        shown = os.fspath(path)
        if not shown or "\0" in shown:
            raise ValueError(f"{name} must be a non-empty file path without NUL, got {shown!r}")
        self.name, self.shown = name, shown
        self.target = os.path.realpath(shown)
        self.tmp: str | None = None
        self._fd: int | None = None
        try:
            self._prepare()
        except OSError as err:
            raise _os_error(name, shown, err) from None

    def _prepare(self) -> None:
        target = self.target
        if os.path.isdir(target):
            raise IsADirectoryError(errno.EISDIR, "it is a folder")
        exists = os.path.lexists(target)
        if exists and not os.access(target, os.W_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        if exists and not stat.S_ISREG(os.stat(target).st_mode):
            return  # a device or a FIFO: written in place at commit
        self._fd, self.tmp = _temporary(*os.path.split(target))
        if exists:  # keep the mode of the file it replaces
            os.chmod(self.tmp, stat.S_IMODE(os.stat(target).st_mode))

    def commit(self, write: Callable[[IO[str]], None]) -> None:
        """Write the file with ``write(file)`` and put it in place."""
        try:
            if self._fd is None:
                with open(self.target, "w", newline="", encoding="utf-8") as f:
                    write(f)
                return
            fd, self._fd = self._fd, None
            with os.fdopen(fd, "w", newline="", encoding="utf-8") as f:
                write(f)
            assert self.tmp is not None
            os.replace(self.tmp, self.target)
            self.tmp = None
        except OSError as err:
            raise _os_error(self.name, self.shown, err) from None
        finally:
            self.discard()

    def discard(self) -> None:
        """Remove the temporary file (the target is left as it was)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)
        if self.tmp is not None:
            tmp, self.tmp = self.tmp, None
            with contextlib.suppress(OSError):
                os.unlink(tmp)
