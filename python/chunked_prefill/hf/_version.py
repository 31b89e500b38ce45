"""Which transformers releases the continuous-batching scheduler supports."""

from __future__ import annotations

import re
from importlib import metadata

SUPPORTED_TRANSFORMERS = ">=5.18,<5.25"
"""The transformers releases :func:`chunked_prefill.hf.register` accepts, as a specifier."""

VERIFIED_TRANSFORMERS = ("5.18.0", "5.19.0", "5.20.2", "5.21.1", "5.22.2", "5.23.0", "5.24.0")
"""The releases the test suite has been run against."""

_LOWEST = (5, 18)
_BEYOND = (5, 25)


class UnsupportedTransformersError(ImportError):
    """The installed transformers is missing or not a release the scheduler supports."""


def _release(version: str) -> tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        raise UnsupportedTransformersError(f"cannot parse the transformers version {version!r}")
    return int(match.group(1)), int(match.group(2))


def check_transformers_version(version: str | None = None) -> str:
    """Return the installed transformers version, or raise if it is not supported.

    ``version`` overrides the installed one (for tests). The error names
    :data:`SUPPORTED_TRANSFORMERS` and the verified releases.
    """
    if version is not None and not isinstance(version, str):
        raise TypeError(f"version must be None or a str, got {type(version).__name__}: {version!r}")
    if version is None:
        try:
            version = metadata.version("transformers")
        except metadata.PackageNotFoundError:
            raise UnsupportedTransformersError(
                "transformers is not installed: pip install '.[hf]' in the checkout "
                f"(supported: transformers{SUPPORTED_TRANSFORMERS})"
            ) from None
    if not _LOWEST <= _release(version) < _BEYOND:
        raise UnsupportedTransformersError(
            f"transformers {version} is not supported by chunked_prefill.hf.register(): it needs "
            f"transformers{SUPPORTED_TRANSFORMERS} (verified: {', '.join(VERIFIED_TRANSFORMERS)}); "
            "the continuous-batching scheduler interface changed between 4.57 and 5.x"
        )
    return version
