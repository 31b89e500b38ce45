"""``chunked_prefill.sim.catalog``, as documented: the catalog now lives in
:mod:`.engines` (models, GPUs, ``config.json`` reading, lookup), re-exported here."""

from __future__ import annotations

from .engines.catalog import (
    MAX_TP,
    TP_DEGREES,
    engine_for,
    fits,
    kv_memory,
    with_dtypes,
)
from .engines.errors import (
    EngineFitError,
    EngineRangeError,
    ModelConfigError,
)
from .engines.gpu_factors import HOPPER_WEIGHT_READ_EFFICIENCY
from .engines.gpus import (
    GPU_ALIASES,
    GPUS,
    GpuSpec,
    gpu_name,
    load_gpu_profile,
    resolve_gpu,
)
from .engines.models import (
    KV_CACHE_DTYPES,
    QUANTIZATIONS,
    ModelSpec,
)
from .engines.models.aliases import MODEL_ALIASES
from .engines.models.config import (
    load_model_config,
    model_name,
    resolve_model,
)
from .engines.models.presets import MODELS
from .engines.models.quantization import FP8_QUANT_METHODS, INT_QUANT_METHODS
from .engines.models.values import MAX_MODEL_COUNT

__all__ = [
    "FP8_QUANT_METHODS",
    "GPUS",
    "GPU_ALIASES",
    "HOPPER_WEIGHT_READ_EFFICIENCY",
    "INT_QUANT_METHODS",
    "KV_CACHE_DTYPES",
    "MAX_MODEL_COUNT",
    "MAX_TP",
    "MODELS",
    "MODEL_ALIASES",
    "QUANTIZATIONS",
    "TP_DEGREES",
    "EngineFitError",
    "EngineRangeError",
    "GpuSpec",
    "ModelConfigError",
    "ModelSpec",
    "engine_for",
    "fits",
    "gpu_name",
    "kv_memory",
    "load_gpu_profile",
    "load_model_config",
    "model_name",
    "resolve_gpu",
    "resolve_model",
    "with_dtypes",
]
