"""The catalog's errors: a model config that cannot be used, a model that does not fit
the GPUs, a roofline past the coefficient limit."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass


class ModelConfigError(ValueError):
    """A model ``config.json`` that cannot be used; the message names the file and key."""


class EngineFitError(ValueError):
    """A model that does not fit (or does not split across) the GPUs at that TP degree."""


class EngineRangeError(ValueError):
    """A model and GPU whose roofline gives a step time past :data:`~.linear.MAX_COEFFICIENT_S`
    per unit (a GPU figure far too small for the model): the message names the GPU figure."""
