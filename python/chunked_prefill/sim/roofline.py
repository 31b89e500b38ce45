"""The roofline step-time model: a step's duration from the model's architecture and the
GPU's datasheet (issue 13).

A step computes ``P`` prefill tokens in ``C`` chunks and ``D`` decode tokens, ``N = P + D``.
On one GPU of a tensor-parallel group of ``tp``::

    t = overhead
      + max(token_s * N + head_row_s * (D + C),                 # linear layers: FLOPs
            dense_read_s + expert_read_s * touched(N))          #   or weight reads
      + pair_s * attention_pairs                                # prefill attention FLOPs
      + chunk_sq_s * sum over chunks of tokens**2               # attention within a chunk
      + kv_token_s * decode_context_tokens                      # decode attention: KV reads
      + allreduce_call_s + allreduce_token_s * N                # TP all-reduces

``touched(N) = E * (1 - (1 - k/E)**N)`` is the expected number of distinct experts ``N``
tokens route to when each picks ``k`` of ``E`` uniformly (0 for a dense model). The
coefficients come from a :class:`~.catalog.ModelSpec` and a :class:`~.catalog.GpuSpec` in
:meth:`RooflineModel.build`; ``docs/engines.md`` derives each term and cites its efficiency
factor. ``rust/core/src/sim/roofline.rs`` computes the same formula with the same float
operations in the same order, so the Rust and pure loops agree to the bit.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Union

from .engine import EngineModel

if TYPE_CHECKING:
    from .catalog import GpuSpec, ModelSpec

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
    """Fixed cost per step."""
    token_s: float
    """Linear-layer GEMM time per token (its FLOPs at the achieved FLOP/s)."""
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

    @classmethod
    def build(cls, model: ModelSpec, gpu: GpuSpec, tp: int) -> RooflineModel:
        """The coefficients of ``model`` on ``tp`` GPUs of type ``gpu``."""
        layers, hidden, dt = model.num_hidden_layers, model.hidden_size, model.dtype_bytes
        attention = model.attention_params(model.kv_heads_per_gpu(tp) * tp) // tp
        mlp = model.mlp_params // tp
        router = model.router_params
        per_tok = model.num_experts_per_tok if model.is_moe else 1
        head = model.vocab_size * hidden // tp
        flops = gpu.peak_flops * gpu.gemm_efficiency
        bandwidth = gpu.hbm_bandwidth * gpu.hbm_efficiency
        dense_params = layers * (attention + router + (0 if model.is_moe else mlp)) + head
        pair_flops = 4 * model.head_dim * (model.num_attention_heads // tp) * layers
        calls = 2 * layers if tp > 1 else 0
        link = gpu.link_bandwidth * gpu.link_efficiency
        experts = model.num_local_experts
        return cls(
            name=f"{model.name} on {gpu.name}" + (f" x TP {tp}" if tp > 1 else ""),
            model=model.name,
            gpu=gpu.name,
            tp=tp,
            overhead_s=gpu.step_overhead_s,
            token_s=2 * layers * (attention + per_tok * mlp + router) / flops,
            head_row_s=2 * head / flops,
            dense_read_s=dense_params * dt / bandwidth,
            expert_read_s=layers * mlp * dt / bandwidth if experts else 0.0,
            experts=float(experts),
            expert_miss=1.0 - per_tok / experts if experts else 0.0,
            pair_s=pair_flops / (gpu.peak_flops * gpu.attention_efficiency),
            chunk_sq_s=pair_flops / (gpu.peak_flops * gpu.chunk_attention_efficiency),
            kv_token_s=model.kv_bytes_per_token(tp) / bandwidth,
            allreduce_call_s=calls * gpu.allreduce_latency_s,
            allreduce_token_s=calls * (2 * (tp - 1) / tp) * hidden * dt / link,
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
        compute = self.token_s * n + self.head_row_s * (decode_tokens + prefill_chunks)
        memory = self.dense_read_s
        if self.experts > 0:
            memory += self.expert_read_s * self.experts_touched(n)
        t = self.overhead_s + (compute if compute > memory else memory)
        t += self.pair_s * attention_pairs
        t += self.chunk_sq_s * prefill_chunk_sq
        t += self.kv_token_s * decode_context_tokens
        t += self.allreduce_call_s + self.allreduce_token_s * n
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
        """Each term of :meth:`step_time` for one step, in seconds (for reports)."""
        n = prefill_tokens + decode_tokens
        compute = self.token_s * n + self.head_row_s * (decode_tokens + prefill_chunks)
        memory = self.dense_read_s
        if self.experts > 0:
            memory += self.expert_read_s * self.experts_touched(n)
        return {
            "overhead": self.overhead_s,
            "linear_compute": compute,
            "linear_memory": memory,
            "prefill_attention": self.pair_s * attention_pairs,
            "chunk_attention": self.chunk_sq_s * prefill_chunk_sq,
            "decode_attention": self.kv_token_s * decode_context_tokens,
            "allreduce": self.allreduce_call_s + self.allreduce_token_s * n,
        }

    def coefficients(self) -> list[float]:
        """The coefficients in :data:`COEFFICIENTS` order (the binding's argument)."""
        return [float(getattr(self, key)) for key in COEFFICIENTS]

    def to_dict(self) -> dict[str, Any]:
        """The model as plain data (the ``engine`` of ``--json``)."""
        out = asdict(self)
        out["kind"] = "roofline"
        return out


StepTimeModel = Union[EngineModel, RooflineModel]
"""Either step-time model: the fitted linear one or the roofline."""


def roofline_line(engine: RooflineModel, blocks: str | None = None) -> str:
    """One line for ``simulate``'s setup: model, GPU, TP (``engine.name``), the pool, and
    the main coefficients."""
    moe = f" + {engine.expert_read_s * 1e3:.3g} ms per expert touched" if engine.experts else ""
    comm = (
        f" + all-reduces {engine.allreduce_call_s * 1e3:.3g} ms +"
        f" {engine.allreduce_token_s * 1e6:.3g} us/token"
        if engine.allreduce_call_s or engine.allreduce_token_s
        else ""
    )
    pool = f"; {blocks}" if blocks else ""
    return (
        f"{engine.name} (roofline{pool}): {engine.overhead_s * 1e3:.3g} ms +"
        f" max({engine.token_s * 1e6:.3g} us/token, {engine.dense_read_s * 1e3:.3g} ms"
        f" weight reads{moe}) + {engine.pair_s * 1e9:.3g} ns/(q,k) pair +"
        f" {engine.chunk_sq_s * 1e9:.3g} ns/chunk token² + {engine.kv_token_s * 1e6:.3g}"
        f" us/context token{comm}"
    )
