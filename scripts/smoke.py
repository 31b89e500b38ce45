"""Smoke test of an installed wheel: both backends import and plan the same steps."""

import sys

import chunked_prefill
import chunked_prefill._core as rust
import chunked_prefill.pure as pure


def plan(backend):  # type: ignore[no-untyped-def]
    config = backend.Config(chunk_size=512, token_budget=1024, max_prefills_per_step=2)
    s = backend.Scheduler(config)
    s.enqueue(1, 1500)
    s.enqueue(2, 700, cached_tokens=100)
    return [repr(s.next_step(8)) for _ in range(4)]


assert chunked_prefill.BACKEND == "rust"
assert plan(rust) == plan(pure), (plan(rust), plan(pure))
print(f"python {sys.version.split()[0]}: chunked_prefill {rust.__version__} ok")
