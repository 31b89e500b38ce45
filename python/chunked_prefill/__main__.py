"""``python -m chunked_prefill``: the ``chunked-prefill`` command line."""

from __future__ import annotations

from .cli import entry

if __name__ == "__main__":
    entry()
