"""``python -m chunked_prefill.sim``: the ``simulate`` subcommand on its own."""

from __future__ import annotations

import sys

from .._process import run_process
from .cli.simulate import main

if __name__ == "__main__":
    sys.exit(run_process(main))
