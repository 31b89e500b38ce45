"""GPUs by their datasheet figures and the efficiency factors the roofline applies to
them: :class:`GpuSpec`, the presets of :data:`GPUS` with their aliases, GPU profile files
(:func:`load_gpu_profile`) and :func:`resolve_gpu`."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from .._check import path, show
from .._files import read_profile_bytes
from .._json import Number, exact
from .errors import ModelConfigError
from .gpu_factors import (
    FLASH_DECODE_MEASURED,
    H100_GEMM_HALF_TOKENS,
    HOPPER_GEMV_LATENCY_S,
    HOPPER_WEIGHT_READ_EFFICIENCY,
    MI300X_GEMM_CLOCK,
    MI300X_GEMM_HALF_TOKENS,
    NCCL_LINK_EFFICIENCY,
)
from .linear import GIB
from .names import _kind, _lookup, _read_json

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class GpuSpec:
    """One GPU type: datasheet figures and the efficiency factors the roofline applies.

    The efficiencies are fractions of the datasheet peak that real kernels reach (sources in
    ``docs/engines.md``); every field can be overridden (:func:`engine_for`'s keywords, a
    profile file, ``simulate``'s ``--gpu-*`` flags).
    """

    name: str
    peak_flops: float
    """Dense bf16/fp16 tensor-core FLOP/s (no sparsity)."""
    hbm_bandwidth: float
    """Memory bandwidth, bytes/s."""
    memory_bytes: int
    """Memory per GPU, bytes."""
    link_bandwidth: float
    """Tensor-parallel interconnect bandwidth per GPU and direction, bytes/s (NVLink, or
    PCIe where there is none)."""
    gemm_efficiency: float = 0.675
    """Achieved fraction of ``peak_flops`` in the linear layers at many tokens (their
    elementwise kernels included); at ``N`` tokens it is ``gemm_efficiency * N / (N +
    gemm_half_tokens)``."""
    gemm_half_tokens: float = 64.0
    """Tokens per GPU at which the linear layers reach half of ``gemm_efficiency`` (tiles
    padded at few tokens)."""
    expert_half_tokens: float = 64.0
    """The same for each expert's GEMMs in a MoE layer, which the fused-MoE kernel tiles
    itself (its own block sizes, not the dense GEMMs' library): the A100 fit's 64 tokens on
    every GPU, whatever ``gemm_half_tokens`` the dense GEMMs of the H100 or MI300X take."""
    attention_efficiency: float = 0.55
    """Achieved fraction of ``peak_flops`` in prefill attention (FlashAttention, causal)."""
    chunk_attention_efficiency: float = 0.26
    """The fraction of ``peak_flops`` at which a chunk's attention among its own tokens is
    charged again (a cost per squared chunk token, seen in Vidur's profiles; only with the
    ``vidur`` attention backend)."""
    hbm_efficiency: float = 0.85
    """Achieved fraction of ``hbm_bandwidth`` reading the KV cache in decode attention with
    the ``paged`` and ``vidur`` attention backends."""
    flash_decode_efficiency: float = 0.85
    """The same for FlashAttention's decode kernel (the ``flash`` backend) when the step
    has many (sequence, K/V head) pairs; measured on the GPUs of
    :data:`~.gpu_factors.FLASH_DECODE_MEASURED`, ``hbm_efficiency``'s 0.85 on the others."""
    flash_decode_half_heads: float = 0.0
    """The (sequence, K/V head) pairs of a step at which FlashAttention's decode reads run at
    half of ``flash_decode_efficiency``: with ``u`` pairs they run at ``efficiency * u / (u
    + half)`` (the kernel's thread blocks per pair, a few of which cannot keep the GPU's
    memory busy). 0: no such loss (the GPUs without a measurement)."""
    weight_read_efficiency: float = 0.80
    """Achieved fraction of ``hbm_bandwidth`` reading the weights at few tokens (the GEMVs
    of a decode step), beside each GEMV's fixed ``gemv_latency_s``."""
    link_efficiency: float = 0.80
    """Achieved fraction of ``link_bandwidth`` in the all-reduces of a step (NCCL bus
    bandwidth / link bandwidth at the messages a step sends): measured on the A100, H100
    SXM, H200, B200 and L40S (:data:`~.gpu_factors.NCCL_LINK_EFFICIENCY`); 0.80, large
    messages' figure, for the GPUs without a measurement."""
    allreduce_latency_s: float = 25e-6
    """Fixed cost of one all-reduce call inside a step (the kernel alone takes 5-26 us in
    microbenchmarks; see ``docs/engines.md``)."""
    layer_overhead_s: float = 26e-6
    """Fixed GPU time per decoder layer and step: its small kernels (norms, rotary
    embedding, activation, residual adds) at one token."""
    step_overhead_s: float = 0.0
    """Any other fixed GPU time per step."""
    activation_reserve_bytes: int = 2 * GIB
    """Memory kept back for activations (as the simulator's Llama-2-7B presets)."""
    source: str = ""
    """Where the figures come from."""
    fp8_peak_flops: float = 0.0
    """Dense FP8 tensor-core FLOP/s (no sparsity); 0: no FP8 tensor cores (A100, A10G)."""
    gemv_latency_s: float = 5.1e-6
    """Fixed time of one linear layer's kernel at few tokens (its launch, ramp and tail),
    beside reading its weights at ``weight_read_efficiency``: a step's weight reads take
    ``bytes / (hbm_bandwidth x weight_read_efficiency)`` plus this per GEMV kernel."""
    moe_layer_s: float = 25e-6
    """Fixed GPU time per MoE layer and step: the fused-MoE call's latency at one token
    (sorting tokens by expert, two grouped GEMMs, the activation and the top-k sum), which
    its experts' weight reads come on top of."""

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name in ("name", "source"):
                continue
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"GPU {self.name}: {f.name} must be a finite number, got {v!r}")
            if f.name.endswith("efficiency"):
                if not 0 < v <= 1:
                    raise ValueError(f"GPU {self.name}: {f.name} must be in (0, 1], got {v!r}")
            elif f.name in ("peak_flops", "hbm_bandwidth", "memory_bytes", "link_bandwidth"):
                if v <= 0:
                    raise ValueError(f"GPU {self.name}: {f.name} must be above 0, got {v!r}")
            elif v < 0:
                raise ValueError(f"GPU {self.name}: {f.name} must be at least 0, got {v!r}")
            if f.name.endswith("_bytes"):
                if v != int(v):
                    raise ValueError(f"GPU {self.name}: {f.name} must be whole bytes, got {v!r}")
                object.__setattr__(self, f.name, int(v))
            else:
                object.__setattr__(self, f.name, float(v))

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain data."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


_NVIDIA = "https://www.nvidia.com/en-us/data-center/{}/"


GPUS: dict[str, GpuSpec] = {
    "a100-80gb": GpuSpec(
        name="a100-80gb",
        flash_decode_efficiency=FLASH_DECODE_MEASURED["a100-80gb"][0],
        flash_decode_half_heads=FLASH_DECODE_MEASURED["a100-80gb"][1],
        link_efficiency=NCCL_LINK_EFFICIENCY["a100-80gb"],
        peak_flops=312e12,
        hbm_bandwidth=2.039e12,
        memory_bytes=80 * GIB,
        link_bandwidth=300e9,
        source=_NVIDIA.format("a100") + " (SXM: 312 TFLOP/s bf16 dense, 2 039 GB/s,"
        " NVLink 600 GB/s = 300 GB/s per direction; no FP8)",
    ),
    "a100-40gb": GpuSpec(
        name="a100-40gb",
        flash_decode_efficiency=FLASH_DECODE_MEASURED["a100-80gb"][0],
        flash_decode_half_heads=FLASH_DECODE_MEASURED["a100-80gb"][1],
        link_efficiency=NCCL_LINK_EFFICIENCY["a100-80gb"],
        peak_flops=312e12,
        hbm_bandwidth=1.555e12,
        memory_bytes=40 * GIB,
        link_bandwidth=300e9,
        source=_NVIDIA.format("a100") + " (SXM 40 GB: 312 TFLOP/s bf16 dense, 1 555 GB/s,"
        " NVLink 600 GB/s = 300 GB/s per direction; no FP8)",
    ),
    "h100-sxm": GpuSpec(
        name="h100-sxm",
        flash_decode_efficiency=FLASH_DECODE_MEASURED["h100-sxm"][0],
        flash_decode_half_heads=FLASH_DECODE_MEASURED["h100-sxm"][1],
        link_efficiency=NCCL_LINK_EFFICIENCY["h100-sxm"],
        peak_flops=989e12,
        fp8_peak_flops=1979e12,
        hbm_bandwidth=3.35e12,
        memory_bytes=80 * GIB,
        link_bandwidth=450e9,
        gemm_half_tokens=H100_GEMM_HALF_TOKENS,
        weight_read_efficiency=HOPPER_WEIGHT_READ_EFFICIENCY,
        gemv_latency_s=HOPPER_GEMV_LATENCY_S,
        source=_NVIDIA.format("h100") + " (SXM: 989 TFLOP/s bf16 and 1 979 fp8 dense,"
        " 3.35 TB/s, NVLink 900 GB/s = 450 GB/s per direction)",
    ),
    "h100-pcie": GpuSpec(
        name="h100-pcie",
        flash_decode_efficiency=FLASH_DECODE_MEASURED["h100-sxm"][0],
        flash_decode_half_heads=FLASH_DECODE_MEASURED["h100-sxm"][1],
        peak_flops=756.5e12,
        fp8_peak_flops=1513e12,
        hbm_bandwidth=2.0e12,
        memory_bytes=80 * GIB,
        link_bandwidth=64e9,
        weight_read_efficiency=HOPPER_WEIGHT_READ_EFFICIENCY,
        gemv_latency_s=HOPPER_GEMV_LATENCY_S,
        source=_NVIDIA.format("h100") + " (PCIe: 1 513 TFLOP/s bf16 and 3 026 fp8 with"
        " sparsity, half that dense; 80 GB at 2.0 TB/s; PCIe Gen5 x16, 128 GB/s = 64 GB/s"
        " per direction: the NVLink bridge joins pairs of cards only)",
    ),
    "h100-nvl": GpuSpec(
        name="h100-nvl",
        flash_decode_efficiency=FLASH_DECODE_MEASURED["h100-sxm"][0],
        flash_decode_half_heads=FLASH_DECODE_MEASURED["h100-sxm"][1],
        peak_flops=835.5e12,
        fp8_peak_flops=1670.5e12,
        hbm_bandwidth=3.9e12,
        memory_bytes=94_000_000_000,
        link_bandwidth=300e9,
        weight_read_efficiency=HOPPER_WEIGHT_READ_EFFICIENCY,
        gemv_latency_s=HOPPER_GEMV_LATENCY_S,
        source=_NVIDIA.format("h100") + " (NVL: 1 671 TFLOP/s bf16 and 3 341 fp8 with"
        " sparsity, half that dense; 94 GB at 3.9 TB/s; NVLink bridge 600 GB/s = 300 GB/s"
        " per direction)",
    ),
    "h200": GpuSpec(
        name="h200",
        flash_decode_efficiency=FLASH_DECODE_MEASURED["h200"][0],
        flash_decode_half_heads=FLASH_DECODE_MEASURED["h200"][1],
        link_efficiency=NCCL_LINK_EFFICIENCY["h200"],
        peak_flops=989e12,
        fp8_peak_flops=1979e12,
        hbm_bandwidth=4.8e12,
        memory_bytes=141_000_000_000,
        link_bandwidth=450e9,
        gemm_half_tokens=H100_GEMM_HALF_TOKENS,
        weight_read_efficiency=HOPPER_WEIGHT_READ_EFFICIENCY,
        gemv_latency_s=HOPPER_GEMV_LATENCY_S,
        source=_NVIDIA.format("h200") + " (SXM: 989 TFLOP/s bf16 and 1 979 fp8 dense, 141 GB"
        " at 4.8 TB/s, NVLink 900 GB/s = 450 GB/s per direction)",
    ),
    "h20": GpuSpec(
        name="h20",
        flash_decode_efficiency=FLASH_DECODE_MEASURED["h100-sxm"][0],
        flash_decode_half_heads=FLASH_DECODE_MEASURED["h100-sxm"][1],
        link_efficiency=NCCL_LINK_EFFICIENCY["h100-sxm"],
        peak_flops=148e12,
        fp8_peak_flops=296e12,
        hbm_bandwidth=4.0e12,
        memory_bytes=96_000_000_000,
        link_bandwidth=450e9,
        weight_read_efficiency=HOPPER_WEIGHT_READ_EFFICIENCY,
        gemv_latency_s=HOPPER_GEMV_LATENCY_S,
        source="https://willitrunai.com/es/gpus/h20-96gb (NVIDIA publishes no public"
        " datasheet: 148 TFLOP/s fp16 dense, 296 TOPS int8 = the fp8 rate on Hopper, 96 GB"
        " HBM3 at 4.0 TB/s, NVLink 900 GB/s = 450 GB/s per direction)",
    ),
    "b200": GpuSpec(
        name="b200",
        flash_decode_efficiency=FLASH_DECODE_MEASURED["b200"][0],
        flash_decode_half_heads=FLASH_DECODE_MEASURED["b200"][1],
        link_efficiency=NCCL_LINK_EFFICIENCY["b200"],
        peak_flops=2.25e15,
        fp8_peak_flops=4.5e15,
        hbm_bandwidth=8.0e12,
        memory_bytes=180_000_000_000,
        link_bandwidth=900e9,
        weight_read_efficiency=HOPPER_WEIGHT_READ_EFFICIENCY,
        gemv_latency_s=HOPPER_GEMV_LATENCY_S,
        source=_NVIDIA.format("hgx") + " (HGX B200, 8 GPUs: 36 PFLOP/s fp16/bf16 and 72"
        " fp8 with sparsity, 1.44 TB of HBM3e at 64 TB/s; per GPU, dense: 2.25 and 4.5"
        " PFLOP/s, 180 GB at 8 TB/s, NVLink 5 1.8 TB/s = 900 GB/s per direction)",
    ),
    "l40s": GpuSpec(
        name="l40s",
        flash_decode_efficiency=FLASH_DECODE_MEASURED["l40s"][0],
        flash_decode_half_heads=FLASH_DECODE_MEASURED["l40s"][1],
        link_efficiency=NCCL_LINK_EFFICIENCY["l40s"],
        peak_flops=362.05e12,
        fp8_peak_flops=733e12,
        hbm_bandwidth=864e9,
        memory_bytes=48_000_000_000,
        link_bandwidth=32e9,
        source=_NVIDIA.format("l40s") + " (362.05 TFLOP/s bf16 and 733 fp8 dense, 48 GB"
        " GDDR6 at 864 GB/s, no NVLink: PCIe Gen4 x16, 64 GB/s = 32 GB/s per direction)",
    ),
    "l4": GpuSpec(
        name="l4",
        peak_flops=121e12,
        fp8_peak_flops=242.5e12,
        hbm_bandwidth=300e9,
        memory_bytes=24_000_000_000,
        link_bandwidth=32e9,
        source=_NVIDIA.format("l4") + " (242 TFLOP/s bf16 and 485 fp8 with sparsity, half"
        " that dense; 24 GB GDDR6 at 300 GB/s; PCIe Gen4 x16, 64 GB/s = 32 GB/s per"
        " direction)",
    ),
    "a10g": GpuSpec(
        name="a10g",
        peak_flops=70e12,
        hbm_bandwidth=600e9,
        memory_bytes=24_000_000_000,
        link_bandwidth=32e9,
        source="https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/"
        " (AWS G5's A10G: 70 TFLOP/s bf16 dense against the A10's 125, 24 GB GDDR6 at"
        " 600 GB/s; PCIe Gen4 x16, 32 GB/s per direction; no FP8)",
    ),
    "mi300x": GpuSpec(
        name="mi300x",
        peak_flops=1307.4e12,
        fp8_peak_flops=2614.9e12,
        hbm_bandwidth=5.3e12,
        memory_bytes=192_000_000_000,
        link_bandwidth=448e9,
        gemm_efficiency=GpuSpec.gemm_efficiency * MI300X_GEMM_CLOCK,
        gemm_half_tokens=MI300X_GEMM_HALF_TOKENS,
        attention_efficiency=GpuSpec.attention_efficiency * MI300X_GEMM_CLOCK,
        source="https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html"
        " (1 307.4 TFLOP/s fp16/bf16 and 2 614.9 fp8 dense, 192 GB HBM3 at 5.3 TB/s,"
        " 7 Infinity Fabric links of 128 GB/s = 448 GB/s per direction to the 7 others)",
    ),
}
"""GPU presets (``--gpu NAME``): datasheet figures; the efficiency factors are the
:class:`GpuSpec` defaults (``step_overhead_s`` from Vidur's fitted intercepts, see
``docs/engines.md``: the Hopper and Blackwell parts take the H100's, the others the
A100's), but where a GPU's own measurements give one: the weight reads of the Hopper and
Blackwell parts, the GEMMs' half-efficiency point of the H100 SXM and H200 and of the
MI300X, the MI300X's GEMM clock, the all-reduces' link efficiency of the NVLink parts and
the L40S, and FlashAttention's decode reads of the NVIDIA data-center parts."""


GPU_ALIASES: dict[str, str] = {
    "a100": "a100-80gb",
    "a100-80g": "a100-80gb",
    "a100-sxm": "a100-80gb",
    "a100-sxm4-80gb": "a100-80gb",
    "a100-40g": "a100-40gb",
    "a100-sxm4-40gb": "a100-40gb",
    "h100": "h100-sxm",
    "h100-80gb": "h100-sxm",
    "h100-sxm5": "h100-sxm",
    "h100-80gb-hbm3": "h100-sxm",
    "h200-sxm": "h200",
    "h20-96gb": "h20",
    "b200-sxm": "b200",
    "mi300": "mi300x",
}
"""Short names users type, and the names ``nvidia-smi``/``rocm-smi`` print (``NVIDIA
H100 80GB HBM3``, ``NVIDIA A100-SXM4-40GB``, ``AMD Instinct MI300X``): matched without
case, spaces and underscores read as ``-``, a leading ``nvidia-``, ``amd-instinct-`` or
``amd-`` dropped (:func:`gpu_name`)."""


_GPU_KEYS = {f.name for f in fields(GpuSpec)} - {"name", "source"}


def _gpu_value(path: str, key: str, value: object) -> float:
    if isinstance(value, Number):
        parsed = exact(value)
        if parsed is not None and abs(parsed[0]) < 10**30:
            return float(parsed[0])
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise ModelConfigError(f"{path}: key {key!r}: expected a number, got {_kind(value)}")


def load_gpu_profile(path: str | os.PathLike[str]) -> GpuSpec:
    """A :class:`GpuSpec` from a TOML (``.toml``) or JSON file: ``preset = "NAME"`` (a
    :data:`GPUS` entry to start from; without it every datasheet key is required), ``name``
    and any :class:`GpuSpec` field in SI units (``peak_flops`` in FLOP/s, bandwidths in
    bytes/s, ``memory_bytes``, efficiencies as fractions, times in seconds). An unknown key
    or a bad value raises :class:`ModelConfigError` naming the file and key."""
    name = os.fspath(path)
    if name.lower().endswith(".toml"):
        from .linear import _load_toml

        try:
            table = _load_toml(name, read_profile_bytes(name, ModelConfigError))
        except ModelConfigError:
            raise
        except ValueError as err:
            raise ModelConfigError(str(err)) from None
    else:
        table = _read_json(name, ModelConfigError)
    base: dict[str, Any] = {}
    preset = table.get("preset")
    if preset is not None:
        canonical = (
            gpu_name(preset) if isinstance(preset, str) and not isinstance(preset, Number) else None
        )
        if canonical is None:
            raise ModelConfigError(
                f"{name}: key 'preset': expected one of {', '.join(GPUS)}, got {_kind(preset)}"
            )
        preset = canonical
        base = GPUS[preset].to_dict()
    values: dict[str, Any] = dict(base)
    values["source"] = name
    values["name"] = f"{preset} ({os.path.basename(name)})" if preset else os.path.basename(name)
    for key, value in table.items():
        if key == "preset":
            continue
        if key == "name":
            if not isinstance(value, str) or isinstance(value, Number):
                raise ModelConfigError(f"{name}: key 'name': expected a string, got {_kind(value)}")
            values["name"] = str(value)
        elif key in _GPU_KEYS:
            values[key] = _gpu_value(name, key, value)
        else:
            raise ModelConfigError(
                f"{name}: unknown key {key!r}; known keys: preset, name, "
                + ", ".join(sorted(_GPU_KEYS))
            )
    for key in ("peak_flops", "hbm_bandwidth", "memory_bytes", "link_bandwidth"):
        if key not in values:
            raise ModelConfigError(f"{name}: key {key!r}: missing (or give a preset)")
    try:
        return GpuSpec(**values)
    except ValueError as err:
        raise ModelConfigError(f"{name}: {err}") from None


def gpu_name(text: str) -> str | None:
    """The :data:`GPUS` preset ``text`` names (a preset or a :data:`GPU_ALIASES` entry,
    any case, ``nvidia-smi``'s spelling too), or ``None``."""
    key = _lookup(text)
    for prefix in ("nvidia-", "amd-instinct-", "amd-"):
        if key.startswith(prefix) and key not in GPUS:
            key = key[len(prefix) :]
            break
    if key in GPUS:
        return key
    return GPU_ALIASES.get(key)


def resolve_gpu(gpu: str | os.PathLike[str] | GpuSpec) -> GpuSpec:
    """A preset name of :data:`GPUS` or one of its :data:`GPU_ALIASES` (any case), a
    profile path, or a spec as is."""
    if isinstance(gpu, GpuSpec):
        return gpu
    if not isinstance(gpu, (str, os.PathLike)):
        raise TypeError(f"gpu must be a preset name, a profile path or a GpuSpec, got {show(gpu)}")
    text = path("gpu", gpu)
    preset = gpu_name(text) if isinstance(gpu, str) else None
    if preset is not None and not os.path.exists(text):
        return GPUS[preset]
    if not os.path.exists(text) and not text.lower().endswith((".json", ".toml")):
        aliases = ", ".join(f"{k} ({v})" for k, v in GPU_ALIASES.items())
        raise ModelConfigError(
            f"unknown GPU {text!r}: give a profile path (.toml or .json) or one of"
            f" {', '.join(GPUS)}; aliases: {aliases}"
        )
    return load_gpu_profile(text)
