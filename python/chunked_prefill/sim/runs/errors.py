"""The errors of a run that code must recognise: a configuration the scheduler refuses, and
one that needs more engine steps than the limit (the command line names the flags that
make either)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .planner import SimConfig


class ConfigError(ValueError):
    """The scheduler refuses a configuration: ``config`` is it, ``problem`` the
    scheduler's message (the message is both)."""

    def __init__(self, config: SimConfig, problem: str) -> None:
        self.config = config
        self.problem = problem
        super().__init__(f"configuration {config.label()}: {problem}")


class StepLimitError(ValueError):
    """A configuration needs more engine steps than the ``max_steps`` of :func:`simulate`.

    ``config`` is the configuration, ``steps`` the steps it needs (a lower bound when
    ``estimated``, found before running; else the steps run when it was stopped), ``limit``
    the limit and ``reason`` what makes the steps (which requests, which cap).
    """

    def __init__(
        self, config: Any, steps: int, limit: int, reason: str, *, estimated: bool
    ) -> None:
        self.config = config
        self.steps = steps
        self.limit = limit
        self.reason = reason
        self.estimated = estimated
        if estimated:
            text = f"needs at least {steps} steps ({reason}), above the limit of {limit} steps"
        else:
            text = f"reached the limit of {limit} steps with {reason}"
        super().__init__(f"configuration {config.label()} {text}")
