#!/usr/bin/env bash
# vLLM 0.33.0's own scheduler tests (tests/v1/core/test_scheduler.py from its sdist) against
# chunked_prefill.vllm.Scheduler, offline, in a venv of their own (~9.5 GB, deleted at the
# end). tests/vllm_scheduler/ holds the plugin that points the tests at the adapter and the
# lists of applicable and not-applicable tests. Usage: test-vllm-scheduler.sh WHEEL
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WHEEL=$(realpath "${1:?usage: test-vllm-scheduler.sh path/to/chunked_prefill-*.whl}")
PY=${PYTHON:-python3}
VERSION=0.33.0
VENV="$ROOT/.venv-vllm33"
WORK=$(mktemp -d)
trap 'rm -rf "$VENV" "$WORK"' EXIT
rm -rf "$VENV"
"$PY" -m venv "$VENV"
VPY="$VENV/bin/python"
"$VPY" -m pip install -q --upgrade pip
# The test pins are vLLM's requirements/test/cpu.txt; setuptools-rust and -scm build the
# sdist's metadata when pip fetches it.
"$VPY" -m pip install -q "vllm==$VERSION" pytest pytest-asyncio pytest-mock pytest-timeout \
    tblib setuptools-rust setuptools-scm
"$VPY" -m pip install -q --no-deps "$WHEEL"
# The wheel has no tests; the sdist of the same release has them. Without the override the
# version becomes 0.33.0+empty, which pip refuses.
(cd "$WORK" && VLLM_TARGET_DEVICE=empty VLLM_VERSION_OVERRIDE=$VERSION "$VPY" -m pip download -q \
    --no-deps --no-binary :all: --no-build-isolation -d . "vllm==$VERSION")
SRC="vllm-$VERSION"
tar -xzf "$WORK/$SRC.tar.gz" -C "$WORK" "$SRC/pyproject.toml" "$SRC/tests/__init__.py" \
    "$SRC/tests/v1/__init__.py" "$SRC/tests/v1/core/__init__.py" "$SRC/tests/v1/core/utils.py" \
    "$SRC/tests/v1/core/test_scheduler.py" "$SRC/tests/v1/kv_connector/__init__.py" \
    "$SRC/tests/v1/kv_connector/unit/__init__.py" "$SRC/tests/v1/kv_connector/unit/utils.py"
"$VPY" scripts/vllm_hub_configs.py "$WORK/hf"
# The plugin checks that the lists cover the file exactly and deselects the not-applicable
# tests; pytest fails if an applicable one fails.
(cd "$WORK/$SRC" && HF_HOME="$WORK/hf" HF_HUB_OFFLINE=1 VLLM_TARGET_DEVICE=cpu \
    PYTHONPATH="$ROOT/tests/vllm_scheduler" "$VPY" -m pytest -q -p no:cacheprovider \
    -p adapter_plugin --timeout=300 tests/v1/core/test_scheduler.py)

# In the same venv: the adapter against vLLM's scheduler on the fake runner (tests/), and the
# benchmark against vLLM's scheduler, one round (figures: python benches/bench_vllm.py).
"$VPY" -m pip install -q "numpy>=1.22" "rich>=13" "hypothesis>=6.100" "pytest-benchmark>=4"
(cd tests && CHUNKED_PREFILL_REQUIRE_VLLM=1 VLLM_TARGET_DEVICE=cpu HYPOTHESIS_PROFILE=ci \
    "$VPY" -m pytest -q -p no:cacheprovider --rootdir "$ROOT" "$ROOT/tests/test_vllm_adapter.py")
(cd benches && VLLM_TARGET_DEVICE=cpu "$VPY" -m pytest -q -p no:cacheprovider --rootdir "$ROOT" \
    "$ROOT/benches/bench_vllm.py" --benchmark-disable)
