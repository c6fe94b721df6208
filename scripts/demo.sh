#!/usr/bin/env bash
# Fresh machine -> the main job: set up the virtualenv, then run `pyterrier-tite demo` (arguments are passed on).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup-env.sh"
exec pyterrier-tite demo "$@"
