"""Write ``examples/steps.csv``: the steps of a small simulated run of the default workload
(chunk size 512, the default engine), for ``docs/engines.md``'s ``chunked-prefill fit``
example. Run from the repository's top directory."""

from __future__ import annotations

import sys

from chunked_prefill.sim import SimConfig, default_workload, simulate
from chunked_prefill.sim.fit import write_steps_csv


def main() -> int:
    (result,) = simulate(default_workload(5), SimConfig(chunk_size=512), record_steps=True)
    assert result.step_log is not None
    rows = write_steps_csv(result.step_log, "examples/steps.csv")
    print(f"examples/steps.csv: {rows} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
