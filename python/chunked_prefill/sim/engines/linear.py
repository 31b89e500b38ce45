"""The step-latency model of the engine: how long one forward pass takes.

One step runs ``P`` prompt (prefill) tokens in chunks and ``D`` decode tokens. Its modelled
duration is::

    t = max(t_min_s, c0_s + c_tok_s * (P + D))      # weights + token-proportional work
        + c_attn_s * sum over chunks of pairs(start, tokens)   # prefill attention
        + c_kv_s * sum over decoded requests of their context length  # decode attention
        + c_chunk_sq_s * sum over chunks of tokens**2                 # attention within a chunk

where ``pairs(start, n) = n * start + n * (n + 1) / 2`` is the exact number of causal
(query, key) pairs of a chunk of ``n`` prompt tokens that follows ``start`` tokens already
in the KV cache (prefix-cached ones included), and a decoded request's context length is
its prompt plus the tokens it has generated so far.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from .._json import Number, exact

__all__ = [
    "DEFAULT_ENGINE",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "ENGINE_PRESETS",
    "MAX_COEFFICIENT_S",
    "MEMORY_PRESETS",
    "EngineModel",
    "KVMemory",
    "ProfileError",
    "load_profile",
]


MAX_COEFFICIENT_S = 3600.0
"""The largest coefficient, in seconds (an hour per token or per step). Every simulated
time stays a finite float under it, so the table and ``--json`` always agree."""


@dataclass(frozen=True)
class EngineModel:
    """Coefficients of the step-latency model (all in seconds; see the module docstring).

    The defaults are :data:`DEFAULT_ENGINE` (Llama-2-7B in fp16 on one A100-80GB), except
    ``c_chunk_sq_s``.
    """

    name: str = "llama2-7b-a100"
    """A label for reports."""
    t_min_s: float = 9.8e-3
    """The floor of the token-proportional part: a step reads all weights once."""
    c0_s: float = 7.4e-3
    """Fixed cost per step (launches, sampling, scheduling)."""
    c_tok_s: float = 57.5e-6
    """Cost per token in the batch (linear layers), prefill and decode alike."""
    c_attn_s: float = 2.7e-9
    """Cost per causal (query, key) pair of prefill attention."""
    c_kv_s: float = 0.31e-6
    """Cost per context token of a decode request (reading its KV cache)."""
    c_chunk_sq_s: float = 0.0
    """Cost per squared token of each prefill chunk (``sum of tokens**2`` over the step's
    chunks): a chunk's attention among its own tokens, which Vidur's profiles show costs
    several times more per pair than attending to cached tokens (docs/engines.md). Unlike
    the other fields its default is 0, not the preset's, so a model written with the five
    original coefficients keeps its meaning; :data:`DEFAULT_ENGINE` sets it."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise TypeError(f"engine name must be a string, got {self.name!r}")
        for f in fields(self):
            if f.name == "name":
                continue
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ValueError(f"engine coefficient {f.name} must be a number, got {v!r}")
            if not 0 <= v <= MAX_COEFFICIENT_S:
                raise ValueError(
                    f"engine coefficient {f.name} must be in [0, {MAX_COEFFICIENT_S:g}] seconds,"
                    f" got {_shown(v)}"
                )
            object.__setattr__(self, f.name, float(v))
        if max(self.t_min_s, self.c0_s + self.c_tok_s) <= 0:
            raise ValueError(
                "engine model gives a step no duration: set t_min_s, c0_s or c_tok_s above 0"
            )

    def step_time(
        self,
        prefill_tokens: int,
        decode_tokens: int,
        attention_pairs: int,
        decode_context_tokens: int,
        prefill_chunk_sq: int = 0,
    ) -> float:
        """The modelled duration of one step, in seconds (``prefill_chunk_sq``: the squares
        of the step's prefill chunk lengths, summed)."""
        lin = self.c0_s + self.c_tok_s * (prefill_tokens + decode_tokens)
        if lin < self.t_min_s:
            lin = self.t_min_s
        return (
            lin
            + self.c_attn_s * attention_pairs
            + self.c_kv_s * decode_context_tokens
            + self.c_chunk_sq_s * prefill_chunk_sq
        )

    @staticmethod
    def chunk_pairs(start: int, tokens: int) -> int:
        """Causal (query, key) pairs of prompt tokens ``[start, start + tokens)``."""
        return tokens * start + tokens * (tokens + 1) // 2

    def with_overrides(self, **changes: Any) -> EngineModel:
        """A copy with the given coefficients replaced (``None`` values are ignored)."""
        kept: dict[str, Any] = {k: v for k, v in changes.items() if v is not None}
        unknown = set(kept) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"unknown engine coefficient(s): {', '.join(sorted(unknown))}")
        return replace(self, **kept)

    def to_dict(self) -> dict[str, Any]:
        """The coefficients as plain data."""
        return asdict(self)


DEFAULT_ENGINE = EngineModel(c_chunk_sq_s=6.5e-9)
"""Llama-2-7B (fp16) on one A100-80GB, fitted to Vidur's profiles (docs/engines.md,
"Cross-check against Vidur"; ``python scripts/vidur_crosscheck.py --fit``). Until the
cross-check the preset was the estimate below; the fit moved ``t_min_s`` 9.5 -> 9.8 ms,
``c0_s`` 2.2 -> 7.4 ms, ``c_tok_s`` 65 -> 57.5 us, ``c_attn_s`` 2.5 -> 2.7 ns, ``c_kv_s``
0.30 -> 0.31 us and added ``c_chunk_sq_s`` = 6.5 ns (the old estimate's reasoning:

* ``max(9.5 ms, 2.2 ms + 65 us x tokens)`` is the fit quoted from Vidur's public profiling
  data (Agrawal et al., "Vidur: A Large-Scale Simulation Framework For LLM Inference",
  MLSys 2024; ``data/profiling/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv`` in the Vidur
  repository). Cross-check: that file's per-layer medians at 4 096 tokens (QKV, output,
  up/gate and down projections, norms, activation) add up to about 8.2 ms, x 32 layers =
  263 ms, i.e. 64 us per token, about 215 TFLOP/s on 14 GFLOP per token. 9.5 ms is about
  the time to stream 13.5 GB of weights at the A100's ~1.5-2 TB/s.
* ``c_kv = 0.3 us`` per context token: each token's K and V are 2 x 32 layers x 4 096 x
  2 bytes = 512 KiB, read at ~1.7 TB/s.
* ``c_attn = 2.5 ns`` per (query, key) pair: 4 x 4 096 x 32 = 0.5 MFLOP per pair at
  ~200 TFLOP/s (the issue quotes 2-3 ns from Vidur's attention profiles).)
"""

ENGINE_PRESETS: dict[str, EngineModel] = {
    "llama2-7b-a100": DEFAULT_ENGINE,
    # Vidur's H100 fit for the linear part; attention terms scaled from the A100 ones by
    # the H100's ~2x bandwidth (3.35 TB/s) and ~2.5x dense fp16 FLOP/s: rough estimates.
    "llama2-7b-h100": EngineModel(
        name="llama2-7b-h100",
        t_min_s=5.7e-3,
        c0_s=2.9e-3,
        c_tok_s=20e-6,
        c_attn_s=1.0e-9,
        c_kv_s=0.15e-6,
        c_chunk_sq_s=2.6e-9,
    ),
}
"""Named engine models (``--engine NAME``)."""


def _shown(value: object) -> str:
    """A value for a message, a huge int shortened to its digit count."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return f"a {len(str(abs(value))) if abs(value) < 10**4000 else 'many'}-digit number"
    return repr(value)


class ProfileError(ValueError):
    """An engine profile file that cannot be used; the message names the file and key."""


_PROFILE_KEYS = {f.name for f in fields(EngineModel)}


def _load_toml(path: str, data: bytes) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on Python < 3.11 only
        try:
            import tomli as tomllib
        except ImportError:
            raise ProfileError(
                f"{path}: reading TOML on Python < 3.11 needs the 'tomli' package"
                " (pip install tomli), or write the profile as JSON"
            ) from None
    try:
        parsed: dict[str, Any] = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise ProfileError(f"{path}: not UTF-8 text: {err}") from None
    except ValueError as err:  # TOMLDecodeError, or an integer of over 4 300 digits
        raise ProfileError(f"{path}: not valid TOML: {err}") from None
    except RecursionError:
        raise ProfileError(f"{path}: not valid TOML: nested too deeply") from None
    return parsed


def _kind(value: object) -> str:
    """What a profile value is, for a message: a number as written, else its kind."""
    if isinstance(value, Number):
        return value if len(value) <= 40 else f"a {len(value)}-character number"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return _shown(value)
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else "a long string"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def _seconds(path: str, key: str, value: object) -> float:
    """A coefficient read from a profile: a number of seconds in [0, MAX_COEFFICIENT_S]."""
    rule = f"expected seconds in [0, {MAX_COEFFICIENT_S:g}]"
    number: float | None = None
    if isinstance(value, Number):
        parsed = exact(value)
        if parsed is not None and 0 <= parsed[0] <= MAX_COEFFICIENT_S:
            number = float(parsed[0])
    elif (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and 0 <= value <= MAX_COEFFICIENT_S
    ):
        number = float(value)
    if number is None:
        raise ProfileError(f"{path}: key {key!r}: {rule}, got {_kind(value)}")
    return number


def load_profile(path: str | os.PathLike[str], base: EngineModel = DEFAULT_ENGINE) -> EngineModel:
    """An engine model read from a TOML (``.toml``) or JSON file.

    The file holds any of the keys ``name``, ``t_min_s``, ``c0_s``, ``c_tok_s``,
    ``c_attn_s``, ``c_kv_s`` and ``c_chunk_sq_s``, at the top level or in an ``[engine]``
    table (a JSON ``"engine"`` object); ``preset = "NAME"`` starts from an
    :data:`ENGINE_PRESETS` entry instead of ``base``. Keys left out keep ``base``'s value
    (a profile written before ``c_chunk_sq_s`` existed keeps the base's). An unknown key or a
    bad value raises :class:`ProfileError` naming the file and key.
    """
    from .._check import kind
    from .._check import path as check_path
    from .._files import read_json_object, read_profile_bytes

    name = check_path("path", path)
    kind("base", base, (EngineModel,), "an EngineModel")
    if name.lower().endswith(".toml"):
        table = _load_toml(name, read_profile_bytes(name, ProfileError))
    else:
        table = read_json_object(name, ProfileError)
    if "engine" in table:
        inner = table["engine"]
        extra = sorted(set(table) - {"engine"})
        if not isinstance(inner, dict) or extra:
            raise ProfileError(
                f"{name}: 'engine' must be the only top-level table, holding the coefficients"
            )
        table = inner
    model = base
    if "preset" in table:
        preset = table["preset"]
        if not isinstance(preset, str) or isinstance(preset, Number):
            raise ProfileError(
                f"{name}: key 'preset': expected the name of an engine preset (a string), got"
                f" {_kind(preset)}; known: {', '.join(sorted(ENGINE_PRESETS))}"
            )
        if preset not in ENGINE_PRESETS:
            raise ProfileError(
                f"{name}: key 'preset': unknown engine {preset!r};"
                f" known: {', '.join(sorted(ENGINE_PRESETS))}"
            )
        model = ENGINE_PRESETS[preset]
    changes: dict[str, Any] = {}
    for key, value in table.items():
        if key == "preset":
            continue
        if key not in _PROFILE_KEYS:
            raise ProfileError(
                f"{name}: unknown key {key!r}; known keys: preset, "
                + ", ".join(sorted(_PROFILE_KEYS))
            )
        if key == "name":
            if not isinstance(value, str) or isinstance(value, Number):
                raise ProfileError(f"{name}: key 'name': expected a string, got {_kind(value)}")
            changes[key] = str(value)
            continue
        changes[key] = _seconds(name, key, value)
    if "name" not in changes and changes:
        changes["name"] = f"{model.name} ({os.path.basename(name)})"
    elif "name" not in changes:
        changes["name"] = model.name
    try:
        return replace(model, **changes)
    except ValueError as err:  # a rule across keys, e.g. a step with no duration
        raise ProfileError(f"{name}: {err}") from None


# --------------------------------------------------------------------------- KV memory

GIB = 2**30
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
"""The fraction of GPU memory the engine may use (vLLM's ``gpu_memory_utilization``)."""


@dataclass(frozen=True)
class KVMemory:
    """The model and GPU figures that size the KV cache, as vLLM sizes it.

    ``kv_bytes = gpu_memory_bytes * utilization - weight_bytes - activation_bytes``, and
    each token's K and V take ``2 * layers * kv_heads * head_dim * dtype_bytes`` bytes, so
    the pool holds ``kv_bytes // bytes_per_token // block_size`` blocks. A catalog of other
    models and GPUs plugs in here (one entry per engine preset).
    """

    model: str
    gpu: str
    gpu_memory_bytes: int
    weight_bytes: int
    """The fp16 weights (2 bytes per parameter)."""
    activation_bytes: int
    """Kept back for activations of the largest step (vLLM measures it with a profile run;
    this is an estimate)."""
    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int = 2
    latent_dim: int = 0
    """Multi-head latent attention's cache per token and layer, in elements (the compressed
    K/V and the rotary key, one for all heads); 0: K and V per K/V head."""

    @property
    def bytes_per_token(self) -> int:
        """K and V of one token in every layer (MLA: its latent)."""
        if self.latent_dim:
            return self.layers * self.latent_dim * self.dtype_bytes
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    def kv_bytes(self, utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION) -> int:
        """Bytes left for the KV cache (0 when the weights do not fit)."""
        usable = math.floor(self.gpu_memory_bytes * utilization)
        return max(0, usable - self.weight_bytes - self.activation_bytes)

    def num_blocks(
        self, block_size: int, utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    ) -> int:
        """KV-cache blocks of ``block_size`` tokens that fit."""
        return self.kv_bytes(utilization) // self.bytes_per_token // block_size

    def describe(self, block_size: int, utilization: float) -> str:
        """One line: how the pool size follows from the memory."""
        blocks = self.num_blocks(block_size, utilization)
        return (
            f"{self.gpu}: {self.gpu_memory_bytes / GIB:g} GiB x {utilization:g}"
            f" - {self.weight_bytes / 1e9:.2f} GB weights - {self.activation_bytes / GIB:g} GiB"
            f" activations = {self.kv_bytes(utilization) / GIB:.1f} GiB KV cache at"
            f" {self.bytes_per_token // 1024} KiB/token = {blocks} blocks of {block_size}"
            f" tokens ({blocks * block_size} tokens)"
        )


def _llama2_7b(gpu: str, gpu_memory_bytes: int) -> KVMemory:
    return KVMemory(
        model="Llama-2-7B",
        gpu=gpu,
        gpu_memory_bytes=gpu_memory_bytes,
        weight_bytes=13_476_839_424,  # 6.74e9 parameters in fp16
        activation_bytes=2 * GIB,
        layers=32,
        kv_heads=32,
        head_dim=128,
    )


MEMORY_PRESETS: dict[str, KVMemory] = {
    "llama2-7b-a100": _llama2_7b("A100-80GB", 80 * GIB),
    "llama2-7b-h100": _llama2_7b("H100-80GB", 80 * GIB),
}
"""The KV memory of each engine preset (same keys as :data:`ENGINE_PRESETS`)."""
