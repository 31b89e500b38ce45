"""``chunked_prefill.sim.fit``, as documented: fitting the linear engine model to measured
steps, now :mod:`.engines.fit`, re-exported here."""

from __future__ import annotations

from .engines.fit import (
    CHUNKS_COLUMN,
    COLUMNS,
    LIKELY_CAUSES,
    MAX_THRESHOLDS,
    MIN_DURATION_S,
    OPTIONAL_COLUMN,
    POOR_P50,
    POOR_P90,
    REWEIGHTS,
    Array,
    FitResult,
    Steps,
    fit_steps,
    fit_warnings,
    profile_text,
    read_steps_csv,
    write_steps_csv,
)

__all__ = [
    "CHUNKS_COLUMN",
    "COLUMNS",
    "LIKELY_CAUSES",
    "MAX_THRESHOLDS",
    "MIN_DURATION_S",
    "OPTIONAL_COLUMN",
    "POOR_P50",
    "POOR_P90",
    "REWEIGHTS",
    "Array",
    "FitResult",
    "Steps",
    "fit_steps",
    "fit_warnings",
    "profile_text",
    "read_steps_csv",
    "write_steps_csv",
]
