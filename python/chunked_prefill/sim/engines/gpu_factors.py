"""The GPU factors measured on a GPU, where its own measurements replace the defaults of
:class:`~.gpus.GpuSpec` (fitted to the A100): each value with the data it was fitted to and
how (``docs/engines.md``, "The GPU's factors"; the data under ``examples/``, refitted by
``tests/test_catalog.py``). :data:`~.gpus.GPUS` builds its presets from them."""

from __future__ import annotations

HOPPER_WEIGHT_READ_EFFICIENCY = 0.898
"""Vidur's H100 profiles of 6 models at TP 1 to 8 (84 projections at one token) fit
4.4 us + bytes / (0.898 x 3.35 TB/s), median error 3.1 % (docs/engines.md)."""

HOPPER_GEMV_LATENCY_S = 4.4e-6
"""The same fit's fixed time per GEMV kernel."""

H100_GEMM_HALF_TOKENS = 172.0
"""Tokens at which the H100 SXM's linear layers reach half their efficiency: Vidur's H100
profile of Llama-2-7B's layers (``examples/vidur/h100_llama2_7b_mlp.csv``, 259 token counts
from 1 to 4 096; the A100's 64 comes from its A100 profile), fitted with the roofline's other
factors as they are (``gemm_efficiency`` 0.675, the weights read at 0.898 plus 4.4 us a
GEMV, 26 us of small kernels a layer): median error 3.5 %, where 64 tokens gives 7.0 % (over
the 20 model and TP profiles of Vidur's H100 set the best value has a median of 190, over
the A100 set's 28 of 68). The H200 has the same compute (989 TFLOP/s dense); the other
Hopper parts, with fewer SMs or clocks, were not measured and keep 64."""

MI300X_GEMM_CLOCK = 1207 / 2100
"""The MI300X's engine clock under dense GEMMs over the 2.1 GHz its datasheet peak assumes:
AMD measured its max-achievable BF16 GEMM, 708 TFLOP/s, at a median 1 207 MHz, 94 % of
that clock's 751 TFLOP/s (FP8 at 1.23-1.27 GHz; "Measuring Max-Achievable FLOPs - Part 2",
ROCm blogs, 2025). Its tensor-core-bound factors (``gemm_efficiency``,
``attention_efficiency``) are the NVIDIA-fitted ones at this clock."""

MI300X_GEMM_HALF_TOKENS = 174.0
"""Tokens at which the MI300X's linear layers reach half their efficiency: the value that fits
AMD's tuned GEMM times on it best (ROCm/aiter commit ``fbb52dd``, the 8-bit GEMMs of
Llama-3.1-70B and -405B at their tensor-parallel shapes, ``examples/aiter/``): median error
12 % over 331 shapes up to 2 048 tokens, where the A100's 64 tokens predicts them a quarter
short (median error -26 %)."""


NCCL_LINK_EFFICIENCY: dict[str, float] = {
    "a100-80gb": 0.51,
    "h100-sxm": 0.61,
    "h200": 0.62,
    "b200": 0.445,
    "l40s": 0.62,
}
"""The link efficiency of each GPU's all-reduces at the messages a step sends: nccl-tests'
``all_reduce_perf`` of 8 to 64 MiB (512 to 8 192 tokens of a 4 096- to 8 192-wide model),
bf16, at 2, 4 and 8 GPUs, as NVIDIA's AIConfigurator collected it (NCCL 2.27-2.29,
``examples/aiconfigurator/nccl_all_reduce.csv``): the median over sizes and GPU counts of
``2 (tp - 1) / tp x bytes / ((time - small) x link_bandwidth)``, ``small`` the time of a
message of at most 32 KiB. Large messages' 0.80 (nccl-tests at 512 MiB and above) is not
what an engine's messages reach: 0.31-0.72 on the A100 from 4 to 256 MiB. The L40S is the
2-GPU figure: through its PCIe host bridges 4 GPUs reach 0.16 and 8 reach 0.05, which a
single factor cannot follow. The A100 40 GB takes the 80 GB's (the same NVLink 3), the H20
the H100's (the same NVLink 4 switches)."""


FLASH_DECODE_MEASURED: dict[str, tuple[float, float]] = {
    "a100-80gb": (0.70, 1.75),
    "h100-sxm": (0.91, 4.25),
    "h200": (0.90, 12.75),
    "b200": (0.91, 2.25),
    "l40s": (0.82, 0.25),
}
"""``(flash_decode_efficiency, flash_decode_half_heads)`` of each GPU: vLLM's decode
attention kernel timed by NVIDIA's AIConfigurator (FlashAttention in vLLM 0.14, FlashInfer
in vLLM 0.19 on the B200; bf16 KV cache, head size 128, 1 to 2 048 sequences of 1 k to
128 k tokens, 1 to 8 K/V heads; ``examples/aiconfigurator/flash_decode_attention.csv``):
the pair that fits ``fixed + bytes x (u + half) / (u x efficiency x hbm_bandwidth)`` best
(least median error, 7-11 %), ``u`` the sequences times K/V heads, ``fixed`` the kernel's
time at one short sequence (7-13 us). The A100 40 GB takes the 80 GB's, the H100 PCIe and
NVL and the H20 the H100 SXM's (the same kernels; none measured)."""
