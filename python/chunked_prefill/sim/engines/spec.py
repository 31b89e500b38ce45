"""An engine as the runs and the search take it: its step-time model, its KV memory and the
GPUs one replica uses (:class:`EngineSpec`), from a preset name or a model."""

from __future__ import annotations

from dataclasses import dataclass

from .._check import check_engine, count, kind, show
from .linear import DEFAULT_ENGINE, ENGINE_PRESETS, MEMORY_PRESETS, EngineModel, KVMemory
from .roofline import RooflineModel, StepTimeModel

MAX_GPUS = 2**20
"""The most GPUs one replica of an :class:`EngineSpec` uses (a GPU count, not memory)."""


@dataclass(frozen=True)
class EngineSpec:
    """One engine of the grid: its step-time model, its KV memory, the GPUs one replica
    uses, and the ``simulate`` flags that select it (for the reproducing command line)."""

    model: StepTimeModel
    """The linear model of a preset or profile, or a roofline (:func:`~.engine_for`)."""
    memory: KVMemory
    gpus: int = 1
    flags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_engine(self.model, "model")
        kind("memory", self.memory, (KVMemory,), "a KVMemory")
        object.__setattr__(self, "gpus", count("gpus", self.gpus, 1, MAX_GPUS))
        if not isinstance(self.flags, (tuple, list)) or not all(
            isinstance(f, str) for f in self.flags
        ):
            raise TypeError(f"flags must be a tuple of strings, got {show(self.flags)}")
        object.__setattr__(self, "flags", tuple(self.flags))

    @property
    def name(self) -> str:
        """The engine model's name."""
        return self.model.name


def engine_spec(engine: EngineSpec | EngineModel | str) -> EngineSpec:
    """An :class:`EngineSpec` from a preset name, an :class:`EngineModel` (with its
    preset's memory, see :func:`memory_of`) or a spec."""
    if isinstance(engine, EngineSpec):
        return engine
    if isinstance(engine, str):
        if engine not in ENGINE_PRESETS:
            raise ValueError(
                f"unknown engine preset {engine!r}; known: {', '.join(sorted(ENGINE_PRESETS))}"
            )
        return EngineSpec(ENGINE_PRESETS[engine], MEMORY_PRESETS[engine], 1, ("--engine", engine))
    if isinstance(engine, EngineModel):
        return EngineSpec(engine, memory_of(engine), 1, ())
    raise TypeError(f"an engine must be a preset name, EngineModel or EngineSpec, got {engine!r}")


def memory_of(engine: StepTimeModel | str) -> KVMemory:
    """The KV memory of an engine preset (by name, or the model's ``name``); the default
    preset's for a linear model of another name. A roofline engine has none (its
    ``KVMemory`` comes from :func:`~.catalog.engine_for`): ``ValueError``."""
    if isinstance(engine, RooflineModel):
        raise ValueError(
            f"the roofline engine {engine.name!r} has no KV-memory preset: pass memory= (the"
            " KVMemory engine_for returns with it) or num_blocks="
        )
    name = engine if isinstance(engine, str) else engine.name
    return MEMORY_PRESETS.get(name) or MEMORY_PRESETS[DEFAULT_ENGINE.name]
