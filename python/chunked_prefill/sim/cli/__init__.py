"""The simulator's command line, one module per subcommand (:mod:`.simulate`,
:mod:`.search`, :mod:`.engines`, :mod:`.fit`) over shared flag groups (:mod:`.flags`):
thin argument plumbing, each subcommand importing what it runs only when it runs.

``add_parser``, ``build_parser``, ``main`` and ``run`` are the ``simulate`` subcommand's, as
the former ``chunked_prefill.sim.cli`` module's were.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .simulate import add_parser, build_parser, main, run
else:
    from .._lazy import lazy_exports

    __getattr__ = lazy_exports(
        __name__, {".simulate": ("add_parser", "build_parser", "main", "run")}
    )

__all__ = ["add_parser", "build_parser", "main", "run"]
