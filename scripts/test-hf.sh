#!/usr/bin/env bash
# The transformers integration tests, in their own venv with the `hf` extra (torch is a
# ~3 GB CUDA build from the default registry; it runs on the CPU). Usage: test-hf.sh WHEEL
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WHEEL=${1:?usage: test-hf.sh path/to/chunked_prefill-*.whl}
PY=${PYTHON:-python3}
rm -rf .venv-hf
"$PY" -m venv .venv-hf
HPY="$ROOT/.venv-hf/bin/python"
"$HPY" -m pip install -q --upgrade pip
# 5.18.0 is the release CI pins; the extra allows every verified 5.x (>=5.18,<5.25).
"$HPY" -m pip install -q "${WHEEL}[hf,test]" "transformers==5.18.0"
# Fail here, not by skipping, if the extra did not install.
"$HPY" -c "import torch, transformers, psutil; print('torch', torch.__version__, 'transformers', transformers.__version__)"
"$HPY" -m mypy
(cd tests && "$HPY" -m pytest -q -p no:cacheprovider --rootdir "$ROOT" \
    "$ROOT/tests/test_hf.py" "$ROOT/tests/test_hf_paged.py" "$ROOT/tests/test_hf_validate.py")
# The simulator against the engine it models, at a small size (it checks that the loop runs
# and prints its table; the agreement is a measurement, not a test). test_hf_validate.py
# runs the README's own lines, from the checkout without PYTHONPATH.
(cd benches && "$HPY" validate_simulator.py --requests 30 --rate 10)
