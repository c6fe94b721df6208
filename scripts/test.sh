#!/usr/bin/env bash
# Fresh machine -> the test suite: set up the virtualenv, lint, then run every test (slow integration tests included).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow"` for the fast subset.
set -euo pipefail
# The suite starts hundreds of Python processes: each may write the bytecode of what it imports, once, for the next
# (with PYTHONDONTWRITEBYTECODE every one compiles torch, transformers and pandas from source: the main pass took
# 16 minutes instead of 12 on 2 cores)
unset PYTHONDONTWRITEBYTECODE
source "$(dirname "${BASH_SOURCE[0]}")/setup-env.sh"
cd "$ROOT"
ruff check .
python experiments/report.py --check  # docs/results.md is generated from experiments/*/results.json
# tests/ and one smoke test per study, one pytest-xdist worker per core (at most 4; a test file stays on one worker, so
# its module fixtures are built once; files in collection order, which tests/conftest.py makes longest first); the
# slowest listed (budget: 15 min for all of this script on 2 cores)
python -m pytest -q -ra --durations=15 -n auto --maxprocesses 4 --dist loadfile --no-loadscope-reorder "$@"
if [ $# -eq 0 ]; then
  # The numerics once more as a CPU without AVX-512 computes them (AVX2 kernels in ATen, MKL and oneDNN): tolerances
  # must follow from dtype and magnitude, never from the machine the tests were written on.
  echo "[test] numerics again with AVX2 kernels only"
  ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 python -m pytest -q -p no:cacheprovider \
    -n auto --maxprocesses 4 --dist loadfile -m "not slow" tests/test_tite_model.py tests/test_tite_parity.py tests/test_sparse_ce_model.py \
    tests/test_sparse_ce_parity.py tests/test_celi.py tests/test_pooling.py tests/test_window_attention.py tests/test_hub.py \
    tests/test_passage_speed_paths.py tests/test_int8_linear.py
fi
