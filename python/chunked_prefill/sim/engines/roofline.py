"""The roofline step-time model: a step's duration from the model's architecture, the GPU's
datasheet and the serving software (issues 13 and 23).

A step computes ``P`` prefill tokens in ``C`` chunks and ``D`` decode tokens, ``N = P + D``.
On one GPU of a tensor-parallel group of ``tp``::

    gpu = overhead                                              # each layer's small kernels
        + max(token_s * N + gemm_fixed_s + head_row_s * (D + C),  # linear layers: FLOPs
              dense_read_s + expert_read_s * touched(N))          #   or weight reads
        + pair_s * attention_pairs                              # prefill attention FLOPs
        + window_pair_s * min(attention_pairs, W * P)           #   (windowed layers)
        + chunk_sq_s * sum over chunks of tokens**2             # (the "vidur" backend only)
        + kv_token_s * decode_context_tokens                    # decode attention: KV reads
        + window_kv_token_s * min(decode_context_tokens, W * D) #   (windowed layers)
          (both times 1 + kv_half_seqs / D when D > 0)          #   few sequences: slower
        + allreduce_call_s + allreduce_token_s * N              # TP all-reduces
    t = max(gpu, launch_s)                                      # eager kernel launches
      + cpu_step_s + seq_s * (D + C)                            # the serving engine's CPU

``touched(N) = E * (1 - (1 - k/E)**N)`` is the expected number of distinct experts ``N``
tokens route to when each picks ``k`` of ``E`` uniformly (0 for a dense model);
``gemm_fixed_s = token_s * gemm_half_tokens`` makes the GEMMs' efficiency
``e * N / (N + half)``, lower at few tokens. The layers that attend within a sliding
window of ``W = window_tokens`` tokens (Mistral-7B-v0.1, Gemma 2 and 3, Llama 4's chunks)
have their own attention terms, each query's keys capped at ``W``: ``min(sum, W * count)``
is that cap applied to the step's sums (``sum of min(c, W)`` is at most it, equal when every
sequence's context is on one side of ``W``: a batch of one, or equal lengths); a mix of
both sides is charged more, the short ones' room below ``W`` going to the long ones (the
decode group keeps only the sum). FlashAttention's decode reads run at ``D / (D +
kv_half_seqs)`` of their full rate: a step of few sequences has too few (sequence, K/V
head) thread blocks to keep the GPU's memory busy. The coefficients come from a
:class:`~.models.ModelSpec`, a :class:`~.gpus.GpuSpec` and the software
(:mod:`.software`) in :meth:`RooflineModel.build`; ``docs/engines.md`` derives each term and
cites its figures. ``rust/core/src/sim/roofline.rs`` computes the same formula with the same
float operations in the same order, so the Rust and pure loops agree to the bit.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Union

from .linear import EngineModel
from .software import (
    DEFAULT_ATTENTION_BACKEND,
    DEFAULT_SERVING_ENGINE,
    AttentionBackend,
    ServingEngine,
    resolve_attention_backend,
    resolve_serving_engine,
)

if TYPE_CHECKING:
    from .gpus import GpuSpec
    from .models import ModelSpec

__all__ = ["COEFFICIENTS", "RooflineModel", "StepTimeModel", "pow_int", "roofline_line"]


def pow_int(base: float, n: int) -> float:
    """``base ** n`` by repeated squaring: the same multiplications as the Rust loop (a
    libm ``pow`` could differ between the two by an ulp)."""
    result = 1.0
    b = base
    while n:
        if n & 1:
            result *= b
        b *= b
        n >>= 1
    return result


COEFFICIENTS = (
    "overhead_s",
    "token_s",
    "gemm_fixed_s",
    "expert_fixed_s",
    "head_row_s",
    "dense_read_s",
    "expert_read_s",
    "experts",
    "expert_miss",
    "pair_s",
    "chunk_sq_s",
    "kv_token_s",
    "allreduce_call_s",
    "allreduce_token_s",
    "launch_s",
    "cpu_step_s",
    "seq_s",
    "window_tokens",
    "window_pair_s",
    "window_kv_token_s",
    "kv_half_seqs",
)
"""The coefficients in the order ``_core.simulate_serving(roofline=...)`` takes them."""


@dataclass(frozen=True)
class RooflineModel:
    """The roofline of one model on ``tp`` GPUs (see the module docstring for the formula)."""

    name: str
    model: str
    gpu: str
    tp: int
    overhead_s: float
    """The GPU's fixed time per step (each layer's small kernels)."""
    token_s: float
    """Linear-layer GEMM time per token (its FLOPs at the GEMMs' full efficiency)."""
    gemm_fixed_s: float
    """What the GEMMs' lower efficiency at few tokens adds: the time of
    ``gemm_half_tokens`` tokens through the dense layers."""
    expert_fixed_s: float
    """The same for each expert a MoE step touches (its own GEMMs pad their tokens)."""
    head_row_s: float
    """LM-head GEMM time per sampled row (one per decode token and per prefill chunk)."""
    dense_read_s: float
    """Time to read the weights every step reads (all but the experts)."""
    expert_read_s: float
    """Time to read one expert's weights in every layer (MoE)."""
    experts: float
    """Experts per layer, ``E`` (0 for a dense model)."""
    expert_miss: float
    """``1 - k/E``: the chance a token's routing misses a given expert."""
    pair_s: float
    """Prefill attention time per causal (query, key) pair."""
    chunk_sq_s: float
    """Extra cost per squared token of each chunk: its attention among its own tokens
    (``pair_s``'s FLOPs at the GPU's ``chunk_attention_efficiency``)."""
    kv_token_s: float
    """Decode attention time per context token (reading its K and V)."""
    allreduce_call_s: float
    """All-reduce latency per step (2 calls per layer when ``tp > 1``)."""
    allreduce_token_s: float
    """All-reduce transfer time per token in the step."""
    launch_s: float = 0.0
    """CPU time to launch a step's kernels one by one (eager mode; 0 with CUDA graphs)."""
    cpu_step_s: float = 0.0
    """The serving engine's CPU time per step that the GPU waits for."""
    seq_s: float = 0.0
    """The serving engine's CPU time per sequence of the step."""
    window_tokens: float = 0.0
    """The sliding window of the windowed layers, ``W`` (0: none); ``pair_s`` and
    ``kv_token_s`` are then the other layers'."""
    window_pair_s: float = 0.0
    """Prefill attention time per (query, key) pair of the windowed layers, up to ``W``
    keys a query."""
    window_kv_token_s: float = 0.0
    """Decode attention time per context token of the windowed layers, up to ``W`` tokens a
    sequence."""
    kv_half_seqs: float = 0.0
    """The decode sequences at which the KV reads (``kv_token_s`` and ``window_kv_token_s``)
    run at half their rate: ``D`` sequences take ``1 + kv_half_seqs / D`` times their
    full-rate time (the GPU's ``flash_decode_half_heads`` over the K/V heads a GPU holds;
    0: no such loss)."""
    serving_engine: str = "none"
    """The :data:`~.software.SERVING_ENGINES` entry the CPU terms come from."""
    attention_backend: str = "flash"
    """The :data:`~.software.ATTENTION_BACKENDS` entry prefill attention follows."""
    gemv_fixed_s: float = 0.0
    """The part of ``dense_read_s`` that is the GEMV kernels' fixed latency (not a
    coefficient of its own: ``fit`` keeps it as it is while it scales the reads)."""

    @classmethod
    def build(
        cls,
        model: ModelSpec,
        gpu: GpuSpec,
        tp: int,
        serving_engine: str | ServingEngine = DEFAULT_SERVING_ENGINE,
        attention_backend: str | AttentionBackend = DEFAULT_ATTENTION_BACKEND,
    ) -> RooflineModel:
        """The coefficients of ``model`` on ``tp`` GPUs of type ``gpu``, served by
        ``serving_engine`` with ``attention_backend`` (names of :mod:`.software`)."""
        serving = resolve_serving_engine(serving_engine)
        backend = resolve_attention_backend(attention_backend)
        layers, hidden = model.num_hidden_layers, model.hidden_size
        moe = model.moe_layers  # the other layers' MLP is dense
        attention = model.attention_params_per_gpu(tp)
        mlp = model.mlp_params // tp
        dense = (layers - moe) * (model.dense_mlp_params // tp)  # every dense layer's MLP
        shared = model.shared_mlp_params // tp  # every token's, as a dense MLP
        router = model.router_params
        per_tok = model.num_experts_per_tok
        head = model.vocab_size * hidden // tp
        flops = _gemm_flops(model, gpu) * gpu.gemm_efficiency
        reads = gpu.hbm_bandwidth * gpu.weight_read_efficiency
        wide, layer_bytes = model.dtype_bytes, model.weight_dtype_bytes
        if model.weight_only:  # Marlin reads its packed weights slower than a 16-bit GEMV
            layer_bytes /= MARLIN_READ_FACTOR
        # Decoder-layer matrices at the weights' dtype; router and LM head stay wide.
        dense_bytes = (layers * attention + dense + moe * shared) * layer_bytes
        dense_bytes += (moe * router + head) * wide
        calls = 2 * layers if tp > 1 else 0
        link = gpu.link_bandwidth * gpu.link_efficiency
        experts = model.num_local_experts
        gemv_fixed = gpu.gemv_latency_s * _gemv_kernels(model)
        token_s = 2 * (layers * attention + dense + moe * (per_tok * mlp + shared + router)) / flops
        # Every GEMM pays for padding its few tokens: each touched expert's GEMMs too.
        dense_flops = 2 * (layers * attention + dense + moe * (router + shared))
        return cls(
            name=f"{model.name} on {gpu.name}" + (f" x TP {tp}" if tp > 1 else ""),
            model=model.name,
            gpu=gpu.name,
            tp=tp,
            overhead_s=gpu.step_overhead_s + layers * gpu.layer_overhead_s + moe * gpu.moe_layer_s,
            token_s=token_s,
            gemm_fixed_s=dense_flops / flops * gpu.gemm_half_tokens,
            expert_fixed_s=2 * moe * mlp / flops * gpu.expert_half_tokens if experts else 0.0,
            head_row_s=2 * head / (gpu.peak_flops * gpu.gemm_efficiency),
            dense_read_s=dense_bytes / reads + gemv_fixed,
            expert_read_s=moe * mlp * layer_bytes / reads if experts else 0.0,
            experts=float(experts),
            expert_miss=1.0 - per_tok / experts if experts else 0.0,
            allreduce_call_s=calls * gpu.allreduce_latency_s,
            allreduce_token_s=calls * (2 * (tp - 1) / tp) * hidden * wide / link,
            launch_s=layers * serving.launch_layer_s,
            cpu_step_s=serving.cpu_step_s,
            seq_s=serving.cpu_seq_s,
            serving_engine=serving.name,
            attention_backend=backend.name,
            gemv_fixed_s=gemv_fixed,
            **_attention(model, gpu, tp, backend),
        )

    def experts_touched(self, tokens: int) -> float:
        """Expected distinct experts ``tokens`` tokens route to (uniform routing)."""
        return self.experts * (1.0 - pow_int(self.expert_miss, tokens))

    def step_time(
        self,
        prefill_tokens: int,
        decode_tokens: int,
        attention_pairs: int,
        decode_context_tokens: int,
        prefill_chunk_sq: int = 0,
        prefill_chunks: int = 0,
    ) -> float:
        """The modelled duration of one step, in seconds (the operations of
        ``Roofline::step_time`` in Rust, in the same order). ``prefill_chunk_sq`` is the
        sum of the squares of the step's chunk lengths, ``prefill_chunks`` their number."""
        n = prefill_tokens + decode_tokens
        rows = decode_tokens + prefill_chunks
        compute = self.token_s * n + self.gemm_fixed_s + self.head_row_s * rows
        memory = self.dense_read_s
        if self.experts > 0:
            touched = self.experts_touched(n)
            compute += self.expert_fixed_s * touched
            memory += self.expert_read_s * touched
        gpu = self.overhead_s + (compute if compute > memory else memory)
        gpu += self.pair_s * attention_pairs
        gpu += self.window_pair_s * self._capped(attention_pairs, prefill_tokens)
        gpu += self.chunk_sq_s * prefill_chunk_sq
        reads = self.kv_token_s * decode_context_tokens
        window_reads = self.window_kv_token_s * self._capped(decode_context_tokens, decode_tokens)
        gpu += reads
        gpu += window_reads
        if self.kv_half_seqs > 0 and decode_tokens > 0:
            gpu += (reads + window_reads) * (self.kv_half_seqs / decode_tokens)
        gpu += self.allreduce_call_s + self.allreduce_token_s * n
        t = gpu if gpu > self.launch_s else self.launch_s
        t += self.cpu_step_s + self.seq_s * rows
        return t

    def terms(
        self,
        prefill_tokens: int,
        decode_tokens: int,
        attention_pairs: int,
        decode_context_tokens: int,
        prefill_chunk_sq: int = 0,
        prefill_chunks: int = 0,
    ) -> dict[str, float]:
        """Each term of :meth:`step_time` for one step, in seconds (for reports). The step
        lasts ``max(GPU terms, launches) + cpu``, the linear layers counting the larger of
        ``linear_compute`` and ``linear_memory``."""
        n = prefill_tokens + decode_tokens
        rows = decode_tokens + prefill_chunks
        compute = self.token_s * n + self.gemm_fixed_s + self.head_row_s * rows
        memory = self.dense_read_s
        if self.experts > 0:
            touched = self.experts_touched(n)
            compute += self.expert_fixed_s * touched
            memory += self.expert_read_s * touched
        return {
            "cpu": self.cpu_step_s + self.seq_s * rows,
            "launches": self.launch_s,
            "overhead": self.overhead_s,
            "linear_compute": compute,
            "linear_memory": memory,
            "prefill_attention": self.pair_s * attention_pairs
            + self.window_pair_s * self._capped(attention_pairs, prefill_tokens),
            "chunk_attention": self.chunk_sq_s * prefill_chunk_sq,
            "decode_attention": (
                self.kv_token_s * decode_context_tokens
                + self.window_kv_token_s * self._capped(decode_context_tokens, decode_tokens)
            )
            * self.decode_slowdown(decode_tokens),
            "allreduce": self.allreduce_call_s + self.allreduce_token_s * n,
        }

    def decode_slowdown(self, decode_tokens: int) -> float:
        """``1 + kv_half_seqs / D``: how much longer ``D`` sequences' KV reads take than at
        their full rate (1 without decodes or without the loss)."""
        if self.kv_half_seqs > 0 and decode_tokens > 0:
            return 1.0 + self.kv_half_seqs / decode_tokens
        return 1.0

    def _capped(self, total: int, count: int) -> float:
        """``min(total, W * count)``: a sum of ``count`` sequences' keys (or a step's
        queries' keys) with each capped at the window ``W`` at most (``total`` when there is
        no window), as floats in the order of Rust's ``Roofline::capped``."""
        if not self.window_tokens:
            return float(total)
        cap = self.window_tokens * count
        value = float(total)
        return value if value < cap else cap

    def coefficients(self) -> list[float]:
        """The coefficients in :data:`COEFFICIENTS` order (the binding's argument)."""
        return [float(getattr(self, key)) for key in COEFFICIENTS]

    def to_dict(self) -> dict[str, Any]:
        """The model as plain data (the ``engine`` of ``--json``)."""
        out = asdict(self)
        out["kind"] = "roofline"
        return out


MARLIN_READ_FACTOR = 3.12 / 4
"""How fast vLLM's Marlin kernels (GPTQ and AWQ checkpoints, weight-only int4/int8 with
16-bit activations) read their weights, as a fraction of a 16-bit GEMV's rate: Marlin's own
benchmark (``bench.py``) at one token ran 3.12 times faster than PyTorch's fp16 matmul on
weights four times smaller (vLLM PR #2497, 2024-01-24, an A100-class GPU: 1 159 GB/s against
the fp16 kernel's 1 485), so its bytes move at 0.78 of the rate. The same factor is taken
for its 8-bit weights (not measured)."""


def _gemm_flops(model: ModelSpec, gpu: GpuSpec) -> float:
    """The GEMMs' peak FLOP/s: the GPU's FP8 peak when the weights are FP8 and it has FP8
    tensor cores (vLLM runs W8A8 there), else its bf16/fp16 peak (weight-only FP8 on older
    GPUs and weight-only integers, which Marlin dequantises, multiply in 16 bits)."""
    if model.weight_dtype == "fp8" and gpu.fp8_peak_flops > 0:
        return gpu.fp8_peak_flops
    return gpu.peak_flops


def _gemv_kernels(model: ModelSpec) -> int:
    """The linear layers' kernels of one step at few tokens, each with its fixed latency:
    per layer the attention's (Q/K/V and O; MLA's five: the fused down-projections, the
    query's up-projection, the two absorbed K/V up-projections of its decode, O), a dense
    MLP's two (gate/up, down) or a MoE layer's router (its experts' GEMMs are the fused-MoE
    call of ``moe_layer_s``) with a shared expert's two and its gate; and the LM head."""
    layers, moe = model.num_hidden_layers, model.moe_layers
    attention = 5 if model.is_mla else 2
    shared = (3 if model.shared_expert_gate else 2) if model.shared_expert_intermediate_size else 0
    return layers * attention + (layers - moe) * 2 + moe * (1 + shared) + 1


def _attention(
    model: ModelSpec, gpu: GpuSpec, tp: int, backend: AttentionBackend
) -> dict[str, float]:
    """The attention coefficients on one GPU: prefill's per (query, key) pair and decode's
    per context token, of the layers that attend to the whole context and of the windowed
    ones (each layer's cost times its count), and the "vidur" backend's per squared chunk
    token (every layer's). Integers are multiplied before the one division, as before
    windows were modelled, so a model without one keeps its coefficients to the bit."""
    layers = model.num_hidden_layers
    pair_flops = model.pair_flops_per_head * (model.num_attention_heads // tp)
    pair_rate = gpu.peak_flops * (backend.pair_efficiency or gpu.attention_efficiency)
    kv_layer = _kv_read_bytes(model, tp, backend) // layers  # every layer holds the same
    # FlashAttention's decode kernel, as measured; MLA's (FlashMLA) was not: the GPU's
    # hbm_efficiency and no loss at few sequences, as the other backends.
    flash = backend.name == "flash" and not model.is_mla
    kv_rate = gpu.hbm_bandwidth * (gpu.flash_decode_efficiency if flash else gpu.hbm_efficiency)
    chunk_rate = gpu.peak_flops * gpu.chunk_attention_efficiency
    full, windowed = model.full_attention_layers, model.window_layers
    return {
        "pair_s": full * pair_flops / pair_rate,
        "chunk_sq_s": layers * pair_flops / chunk_rate if backend.chunk_square else 0.0,
        "kv_token_s": full * kv_layer / kv_rate,
        "window_tokens": float(model.sliding_window),
        "window_pair_s": windowed * pair_flops / pair_rate,
        "window_kv_token_s": windowed * kv_layer / kv_rate,
        "kv_half_seqs": gpu.flash_decode_half_heads / model.kv_heads_per_gpu(tp) if flash else 0.0,
    }


def _kv_read_bytes(model: ModelSpec, tp: int, backend: AttentionBackend) -> int:
    """Bytes decode attention reads per context token on one GPU: its K and V in every
    layer, once per K/V head, or once per query head for a backend that reads a K/V head's
    cache in every query head's thread block (vLLM's PagedAttention kernel: with grouped-query
    attention, query heads per K/V head times the bytes); MLA's latent once."""
    if not backend.kv_read_per_query_head or model.is_mla:
        return model.kv_bytes_per_token(tp)
    per_head = model.kv_bytes_per_token(tp) // model.kv_heads_per_gpu(tp)
    return per_head * (model.num_attention_heads // tp)


StepTimeModel = Union[EngineModel, RooflineModel]
"""Either step-time model: the fitted linear one or the roofline."""


def roofline_line(engine: RooflineModel, blocks: str | None = None) -> str:
    """One line for ``simulate``'s setup: model, GPU, TP (``engine.name``), the pool, the
    main coefficients and the software."""
    moe = f" + {engine.expert_read_s * 1e3:.3g} ms per expert touched" if engine.experts else ""
    comm = (
        f" + all-reduces {engine.allreduce_call_s * 1e3:.3g} ms +"
        f" {engine.allreduce_token_s * 1e6:.3g} us/token"
        if engine.allreduce_call_s or engine.allreduce_token_s
        else ""
    )
    chunk = f" + {engine.chunk_sq_s * 1e9:.3g} ns/chunk token²" if engine.chunk_sq_s else ""
    launches = f", at least {engine.launch_s * 1e3:.3g} ms of launches" if engine.launch_s else ""
    window = (
        f" (+ {engine.window_pair_s * 1e9:.3g} ns/pair and {engine.window_kv_token_s * 1e6:.3g}"
        f" us/context token within a {engine.window_tokens:g}-token window)"
        if engine.window_tokens
        else ""
    )
    pool = f"; {blocks}" if blocks else ""
    return (
        f"{engine.name} (roofline{pool}): {engine.overhead_s * 1e3:.3g} ms +"
        f" max({engine.token_s * 1e6:.3g} us/token + {engine.gemm_fixed_s * 1e3:.3g} ms,"
        f" {engine.dense_read_s * 1e3:.3g} ms weight reads{moe}) +"
        f" {engine.pair_s * 1e9:.3g} ns/(q,k) pair{chunk} + {engine.kv_token_s * 1e6:.3g}"
        f" us/context token{window}{comm}{launches}; CPU ({engine.serving_engine})"
        f" {engine.cpu_step_s * 1e3:.3g} ms + {engine.seq_s * 1e6:.3g} us/sequence;"
        f" {engine.attention_backend} attention"
    )
