"""The SIGALRM timer the interrupt tests fire at random points of a run
(``test_interrupts.py``, ``test_interrupts_planner.py``)."""

from __future__ import annotations

import gc
import random
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

__all__ = ["Alarm", "Boom", "Hung"]


class Boom(Exception):
    """What the test's signal handler raises into the running code."""


class Hung(Exception):
    """Raised by the watchdog: a call waited for a lock that nobody will release."""


class Alarm:
    """One ``ITIMER_REAL`` timer: armed, it raises :class:`Boom` where it lands; as a
    watchdog, :class:`Hung`; otherwise it does nothing (that interrupt is skipped)."""

    def __init__(self, rng: random.Random, max_delay: float) -> None:
        self.rng, self.max_delay = rng, max_delay
        self.mode = "off"
        self.ticking = False

    def handler(self, signum: int, frame: FrameType | None) -> None:
        self.ticking = False
        if self.mode == "armed":
            raise Boom
        if self.mode == "watchdog":
            raise Hung

    def arm(self) -> None:
        if not self.ticking:
            self.ticking = True
            signal.setitimer(signal.ITIMER_REAL, self.rng.uniform(1e-6, self.max_delay))
        self.mode = "armed"

    @contextmanager
    def watchdog(self, seconds: float = 10.0) -> Iterator[None]:
        self.mode = "watchdog"
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            self.mode = "off"
            signal.setitimer(signal.ITIMER_REAL, 0)
            self.ticking = False

    @contextmanager
    def installed(self) -> Iterator[None]:
        # No garbage collection meanwhile: an interrupt that lands in a gc callback (pytest
        # and hypothesis install some) is printed and lost, not raised where it was aimed.
        collecting = gc.isenabled()
        gc.disable()
        old = signal.signal(signal.SIGALRM, self.handler)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
            if collecting:
                gc.enable()

    def run(self, fn: Callable[[], Any]) -> tuple[bool, Any]:
        """``(True, fn())``, or ``(False, None)`` when the alarm landed first."""
        try:
            try:
                self.arm()
                return True, fn()
            finally:
                self.mode = "off"
        except Boom:
            return False, None
