#!/usr/bin/env bash
# Fresh machine -> the test suite: set up the virtualenv, lint, then run every test (slow integration tests included).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow"` for the fast subset.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup-env.sh"
cd "$ROOT"
ruff check .
python -m pytest -q -ra "$@"
