"""vLLM's requests in the core's terms: integer ids, 64-bit cache salts, the token cap, and the
per-request features the adapter refuses.
"""

from __future__ import annotations

import hashlib
from typing import Any


def salt_of(cache_salt: str | None) -> int:
    """The core's salt of vLLM's string ``cache_salt``: 0 for none, else the first 8 bytes of
    its blake2b digest (equal strings share a cache, different ones do not)."""
    if cache_salt is None:
        return 0
    digest = hashlib.blake2b(cache_salt.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def max_new_tokens(request: Any, max_model_len: int) -> int:
    """The core's ``max_new_tokens``: vLLM stops at ``max_tokens`` generated tokens or at
    ``max_model_len`` tokens in all, whichever comes first (vLLM's ``check_stop``)."""
    return max(1, min(int(request.max_tokens), max_model_len - int(request.num_prompt_tokens)))


def unsupported(request: Any) -> str | None:
    """Why the adapter cannot serve ``request``, or ``None``."""
    if request.prompt_token_ids is None:
        return "prompt embeddings (the core schedules token ids)"
    if request.pooling_params is not None:
        return "pooling requests (only text generation is scheduled)"
    if request.sampling_params is None:
        return "a request without sampling parameters"
    if request.use_structured_output:
        return "structured output (the core computes no grammar bitmask)"
    if request.mm_features:
        return "multimodal inputs (the core schedules no encoder inputs)"
    if request.lora_request is not None:
        return "LoRA requests (the core does not batch by adapter)"
    if getattr(request, "resumable", False):
        return "streaming-input sessions (resumable requests)"
    return None
