"""Models described by architecture: :class:`ModelSpec` (:mod:`.spec`), the presets
(:mod:`.presets`) and their Hugging Face ids (:mod:`.aliases`), and reading a
``config.json`` (:mod:`.config`: its families, :mod:`.families`; its experts, latent
attention and sliding windows, :mod:`.layers`; its quantization, :mod:`.quantization`;
its values, :mod:`.values`)."""

from __future__ import annotations

from .spec import KV_CACHE_DTYPES, QUANTIZATIONS, ModelSpec

__all__ = ["KV_CACHE_DTYPES", "QUANTIZATIONS", "ModelSpec"]
