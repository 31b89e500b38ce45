"""``chunked_prefill.sim.roofline``, as documented: the roofline engine model, now
:mod:`.engines.roofline`, re-exported here."""

from __future__ import annotations

from .engines.roofline import (
    COEFFICIENTS,
    RooflineModel,
    StepTimeModel,
    pow_int,
    roofline_line,
)

__all__ = [
    "COEFFICIENTS",
    "RooflineModel",
    "StepTimeModel",
    "pow_int",
    "roofline_line",
]
