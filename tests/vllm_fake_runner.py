"""A model runner for vLLM's scheduler tests without a model: it keeps what vLLM's V1 (or V2)
runner keeps of each request, and a KV pool that records what each slot holds.

Each slot holds the fingerprint of the token sequence up to and including its position (what a
real KV entry depends on). Before computing positions ``[s, s + n)`` of a request the runner
checks every earlier position's slot, reached through the request's block table, holds that
request's fingerprint: a wrong block table, a prefix-cache hit on other content, a block
handed out while another request still uses it, or vLLM's null block in a table all show up
as a wrong slot. The sampled token is a function of the sequence (so every correct scheduler
generates the same tokens); the sampler never picks a stop token before ``min_tokens``, as
vLLM's does.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from vllm.v1.outputs import ModelRunnerOutput


def fingerprint(previous: int, token: int) -> int:
    digest = hashlib.blake2b(f"{previous}:{token}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


@dataclass
class _State:
    tokens: list[int]  # prompt + the outputs this runner sampled
    table: list[int]
    computed: int
    params: Any
    num_prompt: int
    chain: list[int] = field(default_factory=list)  # fingerprints of tokens[: i + 1]

    def fingerprint_at(self, position: int) -> int:
        while len(self.chain) <= position:
            previous = self.chain[-1] if self.chain else 0
            self.chain.append(fingerprint(previous, self.tokens[len(self.chain)]))
        return self.chain[position]


class FakeRunner:
    """Run a ``SchedulerOutput``: check and write the KV slots, sample the completed requests."""

    def __init__(self, block_size: int, num_blocks: int, vocab: int, *, v2: bool = False):
        self.block_size, self.num_blocks, self.vocab, self.v2 = block_size, num_blocks, vocab, v2
        self.slots: dict[tuple[int, int], int] = {}
        self.requests: dict[str, _State] = {}
        self.num_steps = self.num_busy_steps = 0
        self.max_prefills_in_a_step = 0

    def execute(self, output: Any) -> ModelRunnerOutput:
        self._update_states(output)
        ids = list(output.num_scheduled_tokens)
        sampled = [self._run(rid, output.num_scheduled_tokens[rid]) for rid in ids]
        self.num_steps += 1
        self.num_busy_steps += bool(ids)
        return ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={rid: i for i, rid in enumerate(ids)},
            sampled_token_ids=sampled,
            logprobs=None,
            prompt_logprobs_dict={},
            pooler_output=[],
        )

    def _update_states(self, output: Any) -> None:
        for rid in output.finished_req_ids:
            self.requests.pop(rid, None)
        if self.v2:  # the V2 runner drops a preempted request and gets it back as new
            for rid in output.preempted_req_ids or ():
                self.requests.pop(rid, None)
        for new in output.scheduled_new_reqs:
            tokens = new.prefill_token_ids if self.v2 else new.prompt_token_ids
            self.requests[new.req_id] = _State(
                tokens=list(tokens),
                table=list(new.block_ids[0]),
                computed=new.num_computed_tokens,
                params=new.sampling_params,
                num_prompt=len(new.prompt_token_ids),
            )
        cached = output.scheduled_cached_reqs
        for i, rid in enumerate(cached.req_ids):
            state = self.requests[rid]
            blocks = cached.new_block_ids[i]
            if rid in cached.resumed_req_ids:
                state.table = list(blocks[0])
            elif blocks is not None:
                state.table.extend(blocks[0])
            assert cached.num_output_tokens[i] == len(state.tokens) - state.num_prompt, rid
            state.computed = cached.num_computed_tokens[i]
        prefills = sum(
            1
            for rid, n in output.num_scheduled_tokens.items()
            if self.requests[rid].computed + n < len(self.requests[rid].tokens) or n > 1
        )
        self.max_prefills_in_a_step = max(self.max_prefills_in_a_step, prefills)

    def _run(self, rid: str, n: int) -> list[int]:
        state = self.requests[rid]
        start, bs = state.computed, self.block_size
        assert start + n <= len(state.tokens), (rid, start, n, len(state.tokens))
        assert len(state.table) * bs >= start + n, (rid, state.table, start, n)
        assert all(0 < b < self.num_blocks for b in state.table), (rid, state.table)
        for q in range(start):
            slot = (state.table[q // bs], q % bs)
            assert self.slots.get(slot) == state.fingerprint_at(q), (rid, q, slot)
        for q in range(start, start + n):
            self.slots[(state.table[q // bs], q % bs)] = state.fingerprint_at(q)
        state.computed = start + n
        if start + n < len(state.tokens):
            return []  # a prefill chunk that does not reach the end samples nothing
        token = self._sample(state, state.fingerprint_at(start + n - 1))
        state.tokens.append(token)
        return [token]

    def _sample(self, state: _State, seed: int) -> int:
        token = seed % self.vocab
        params = state.params
        if len(state.tokens) - state.num_prompt < params.min_tokens:
            while token in params.all_stop_token_ids:
                token = (token + 1) % self.vocab
        return token


def reference(prompt: list[int], params: Any, vocab: int, max_model_len: int) -> list[int]:
    """The tokens any correct scheduler generates for ``prompt`` (stop rules applied)."""
    state = _State(tokens=list(prompt), table=[], computed=0, params=params, num_prompt=len(prompt))
    runner = FakeRunner(1, 1, vocab)
    out: list[int] = []
    while True:
        token = runner._sample(state, state.fingerprint_at(len(state.tokens) - 1))
        state.tokens.append(token)
        out.append(token)
        # The sampler never picks a stop token before min_tokens, so none needs a check here.
        if token == params.eos_token_id or token in (params.stop_token_ids or ()):
            return out
        if len(out) >= params.max_tokens or len(state.tokens) >= max_model_len:
            return out
