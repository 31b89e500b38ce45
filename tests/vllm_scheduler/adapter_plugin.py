"""pytest plugin: run vLLM's own scheduler tests (tests/v1/core/test_scheduler.py of its
sdist) against ``chunked_prefill.vllm.Scheduler``.

``scripts/test-vllm-scheduler.sh`` loads it with ``-p adapter_plugin``. It
- makes vLLM's ``create_scheduler`` (and ``create_scheduler_with_priority``, which builds
  vLLM's ``Scheduler`` itself) build the class named by ``--scheduler-cls`` (default the
  adapter; ``vllm`` keeps vLLM's own, to check the harness);
- checks that every collected test is in exactly one of ``applicable.txt`` and
  ``not_applicable.txt`` (beside this file) and every listed test is collected, so a renamed
  or new test cannot go unnoticed;
- deselects the not-applicable ones, and fails the session unless every applicable test
  that was selected passed (a skip counts as a failure).
"""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
MODULE = "tests.v1.core.test_scheduler"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--scheduler-cls",
        default="chunked_prefill.vllm.Scheduler",
        help="import path of the scheduler class under test; 'vllm' for vLLM's own",
    )


def read_ids(name: str) -> dict[str, str]:
    """Test id -> the rest of its line (the reason, in not_applicable.txt)."""
    ids: dict[str, str] = {}
    for line in (HERE / name).read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            test_id, _, rest = line.partition(" ")
            if test_id in ids:
                raise pytest.UsageError(f"{name}: {test_id} is listed twice")
            ids[test_id] = rest.strip()
    return ids


def scheduler_class(path: str) -> Any:
    if path == "vllm":
        return None  # create_scheduler's own default
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def redirect(cls: Any) -> None:
    """Point both of the test file's ways of building a scheduler at ``cls``."""
    utils = sys.modules["tests.v1.core.utils"]
    func = utils.create_scheduler
    names = func.__code__.co_varnames[: func.__code__.co_argcount]
    defaults = list(func.__defaults__)
    defaults[names.index("scheduler_cls") - (len(names) - len(defaults))] = cls
    func.__defaults__ = tuple(defaults)
    # create_scheduler_with_priority calls vLLM's Scheduler by its global name: give the
    # function a namespace where that name is the class under test.
    tests = sys.modules[MODULE]
    old = tests.create_scheduler_with_priority
    namespace = {**old.__globals__, "Scheduler": cls}
    tests.create_scheduler_with_priority = types.FunctionType(
        old.__code__, namespace, old.__name__, old.__defaults__
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    applicable, skipped = read_ids("applicable.txt"), read_ids("not_applicable.txt")
    collected = {item.nodeid.split("::", 1)[1] for item in items}
    problems = [f"in both lists: {i}" for i in sorted(applicable.keys() & skipped.keys())]
    problems += [f"in no list: {i}" for i in sorted(collected - applicable.keys() - skipped.keys())]
    problems += [
        f"listed, not collected: {i}" for i in sorted((applicable | skipped).keys() - collected)
    ]
    problems += [f"no reason given: {i}" for i, why in sorted(skipped.items()) if not why]
    if problems:
        raise pytest.UsageError("vLLM test lists out of date:\n  " + "\n  ".join(problems))
    cls = scheduler_class(config.getoption("--scheduler-cls"))
    if cls is not None:
        redirect(cls)
    deselected = [item for item in items if item.nodeid.split("::", 1)[1] in skipped]
    items[:] = [item for item in items if item.nodeid.split("::", 1)[1] not in skipped]
    config.hook.pytest_deselected(items=deselected)


EXPECTED: set[str] = set()
PASSED: set[str] = set()


def pytest_collection_finish(session: pytest.Session) -> None:
    EXPECTED.update(item.nodeid for item in session.items)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and report.passed:
        PASSED.add(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    missing = sorted(EXPECTED - PASSED)
    if missing and exitstatus == 0:
        print("\napplicable vLLM tests that did not pass:\n  " + "\n  ".join(missing))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
