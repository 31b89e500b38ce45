"""Roofline profiles: the files ``chunked-prefill fit --model ... --out PROFILE`` writes and
``simulate --profile`` / ``search --profile`` read.

A roofline profile is a flat TOML or JSON table with ``kind = "roofline"``, the model
(``model``: a preset name or a ``config.json`` path, relative to the current directory), the
GPU (``gpu``: a preset name or a GPU profile path), ``tp`` (default 1), ``serving_engine``
and ``attention_backend`` (default: the simulator's), ``cpu_seq_s`` (the serving engine's
CPU time per sequence; default: the engine's) and any :class:`~.gpus.GpuSpec` field over
the GPU's. It gives the roofline *and the KV memory* of that model on that GPU: a profile
without ``kind`` is a linear one (:func:`~.linear.load_profile`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from typing import Any

from .._json import Number, exact, whole
from .catalog import MAX_TP, engine_for
from .errors import ModelConfigError
from .gpus import GpuSpec, resolve_gpu
from .linear import DEFAULT_GPU_MEMORY_UTILIZATION, KVMemory, ProfileError, _kind, _seconds
from .roofline import RooflineModel
from .software import (
    ATTENTION_BACKENDS,
    DEFAULT_ATTENTION_BACKEND,
    DEFAULT_SERVING_ENGINE,
    SERVING_ENGINES,
)

__all__ = ["RooflineProfile", "is_roofline_profile", "load_roofline_profile"]

_GPU_KEYS = sorted(f.name for f in fields(GpuSpec) if f.name not in ("name", "source"))
_KEYS = ["kind", "model", "gpu", "tp", "serving_engine", "attention_backend", "cpu_seq_s"]


@dataclass(frozen=True)
class RooflineProfile:
    """A roofline profile as read: what it names and the GPU fields it sets."""

    path: str
    model: str
    gpu: str
    tp: int
    serving_engine: str
    attention_backend: str
    cpu_seq_s: float | None
    gpu_fields: dict[str, Any]

    def build(
        self, gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    ) -> tuple[RooflineModel, KVMemory]:
        """The roofline and KV memory of the profile (:func:`~.catalog.engine_for`). Raises
        :class:`ProfileError` naming the file and key for a model or GPU that cannot be
        read, does not fit, or fitted values the GPU refuses."""
        try:
            card = resolve_gpu(self.gpu)
        except ModelConfigError as err:
            raise ProfileError(f"{self.path}: key 'gpu': {err}") from None
        try:
            card = replace(card, name=f"{card.name} ({os.path.basename(self.path)})",
                           **self.gpu_fields)  # fmt: skip
        except ValueError as err:  # an efficiency above 1, a negative time
            raise ProfileError(f"{self.path}: {err}") from None
        serving = SERVING_ENGINES[self.serving_engine]
        if self.cpu_seq_s is not None:
            serving = replace(serving, cpu_seq_s=self.cpu_seq_s)
        try:
            return engine_for(
                self.model,
                card,
                self.tp,
                gpu_memory_utilization=gpu_memory_utilization,
                serving_engine=serving,
                attention_backend=self.attention_backend,
            )
        except ModelConfigError as err:
            raise ProfileError(f"{self.path}: key 'model': {err}") from None
        except ValueError as err:  # EngineFitError, EngineRangeError
            raise ProfileError(f"{self.path}: {err}") from None


def _table(name: str) -> dict[str, Any]:
    from .._files import read_json_object, read_profile_bytes
    from .linear import _load_toml

    if name.lower().endswith(".toml"):
        return _load_toml(name, read_profile_bytes(name, ProfileError))
    return read_json_object(name, ProfileError)


def is_roofline_profile(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a roofline profile (has ``kind = "roofline"``). A file that
    cannot be read is not (the linear profile reader reports why); a ``kind`` other than
    ``"roofline"`` raises :class:`ProfileError`."""
    name = os.fspath(path)
    try:
        table = _table(name)
    except ProfileError:
        return False
    return _is_roofline(name, table)


def _is_roofline(name: str, table: dict[str, Any]) -> bool:
    if "kind" not in table:
        return False
    if table["kind"] != "roofline" or isinstance(table["kind"], Number):
        raise ProfileError(
            f"{name}: key 'kind': expected \"roofline\" (a linear profile has no kind), got"
            f" {_kind(table['kind'])}"
        )
    return True


def _string(name: str, table: dict[str, Any], key: str, default: str | None) -> str:
    value = table.get(key, default)
    if value is None:
        raise ProfileError(f"{name}: key {key!r}: missing")
    if not isinstance(value, str) or isinstance(value, Number) or not value:
        raise ProfileError(f"{name}: key {key!r}: expected a string, got {_kind(value)}")
    return value


def _choice(name: str, table: dict[str, Any], key: str, default: str, known: list[str]) -> str:
    value = _string(name, table, key, default)
    if value not in known:
        raise ProfileError(
            f"{name}: key {key!r}: expected one of {', '.join(known)}, got {value!r}"
        )
    return value


def _tp(name: str, value: object) -> int:
    number: int | None = None
    if isinstance(value, Number):
        parsed = exact(value)
        if parsed is not None and abs(parsed[0]) <= MAX_TP:
            number = whole(*parsed)
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    if number is None or not 1 <= number <= MAX_TP:
        raise ProfileError(
            f"{name}: key 'tp': expected a whole number of GPUs in [1, {MAX_TP}], got"
            f" {_kind(value)}"
        )
    return number


def _gpu_field(name: str, key: str, value: object) -> float:
    if isinstance(value, Number):
        parsed = exact(value)
        if parsed is not None and abs(parsed[0]) < 10**30:
            return float(parsed[0])
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise ProfileError(f"{name}: key {key!r}: expected a number, got {_kind(value)}")


def load_roofline_profile(path: str | os.PathLike[str]) -> RooflineProfile:
    """Read a roofline profile (see the module docstring). An unknown key or a bad value
    raises :class:`ProfileError` naming the file and key."""
    name = os.fspath(path)
    table = _table(name)
    if not _is_roofline(name, table):
        raise ProfileError(
            f"{name}: key 'kind': missing (a roofline profile has kind = \"roofline\")"
        )
    gpu_fields: dict[str, Any] = {}
    for key, value in table.items():
        if key in _GPU_KEYS:
            gpu_fields[key] = _gpu_field(name, key, value)
        elif key not in _KEYS:
            raise ProfileError(
                f"{name}: unknown key {key!r}; known keys: {', '.join(_KEYS + _GPU_KEYS)}"
            )
    cpu = table.get("cpu_seq_s")
    return RooflineProfile(
        path=name,
        model=_string(name, table, "model", None),
        gpu=_string(name, table, "gpu", None),
        tp=_tp(name, table.get("tp", 1)),
        serving_engine=_choice(
            name, table, "serving_engine", DEFAULT_SERVING_ENGINE, list(SERVING_ENGINES)
        ),
        attention_backend=_choice(
            name, table, "attention_backend", DEFAULT_ATTENTION_BACKEND, list(ATTENTION_BACKENDS)
        ),
        cpu_seq_s=None if cpu is None else _seconds(name, "cpu_seq_s", cpu),
        gpu_fields=gpu_fields,
    )
