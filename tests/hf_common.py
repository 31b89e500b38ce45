"""What the transformers tests share: one torch thread, the tiny seeded Llama and the
prompts. Imported by ``test_hf.py`` and ``test_hf_paged.py`` after they skip themselves
without the ``hf`` extra, so it may import torch at once."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

# Mixed lengths in one run: 1-token prompts, prompts shorter and longer than the chunks.
LENGTHS = (1, 2, 5, 9, 17, 33)
CHUNK_SIZES = (1, 2, 3, 5, 8, 16, 34)  # 34 is longer than every prompt


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread() -> Iterator[None]:
    """The tiny model runs fastest on one thread, and CI machines are small."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny_llama(seed: int = 0) -> Any:
    """A seeded, randomly initialised 2-layer Llama: no download, no eos, fp32."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    model = LlamaForCausalLM(config).eval()  # type: ignore[no-untyped-call]
    assert model.dtype == torch.float32
    return model


def make_prompts(lengths: tuple[int, ...], seed: int = 1, prefix: int = 0) -> list[list[int]]:
    """Seeded random prompts of `lengths` tokens, after a shared `prefix` of random ones."""
    gen = torch.Generator().manual_seed(seed)
    shared = torch.randint(0, 128, (prefix,), generator=gen).tolist()
    return [shared + torch.randint(0, 128, (n,), generator=gen).tolist() for n in lengths]


@contextmanager
def refused(exc_type: type[BaseException], text: str) -> Iterator[None]:
    """The block raises exactly ``exc_type`` (not a subclass) with exactly ``text``."""
    with pytest.raises(exc_type) as info:
        yield
    assert type(info.value) is exc_type, repr(info.value)
    assert str(info.value) == text, f"{info.value}\n!= {text}"
