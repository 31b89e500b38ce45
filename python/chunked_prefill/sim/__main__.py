"""``python -m chunked_prefill.sim``: the ``simulate`` subcommand on its own."""

from __future__ import annotations

from .._process import run_process
from .cli.simulate import main

if __name__ == "__main__":
    run_process(main)
