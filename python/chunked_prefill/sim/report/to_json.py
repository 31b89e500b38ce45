"""Results as the ``--json`` text (a figure that is not a finite number is null)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..runs.results import SimResult


def results_to_json(results: Sequence[SimResult], *, indent: int | None = 2) -> str:
    """The ``--json`` document: a list with one object per configuration.

    A figure that is not a finite number (the throughput of a run whose span rounds to
    zero) is written as ``null``, so the document is always standard JSON.
    """
    return json.dumps([_finite(r.to_dict()) for r in results], indent=indent, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
