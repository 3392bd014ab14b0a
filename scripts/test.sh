#!/usr/bin/env bash
# The whole test suite: sets up .venv when needed, then runs pytest on all cores.
# Extra arguments go to pytest (e.g. scripts/test.sh -k lint -x).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/setup.sh"
cd "$root"
exec .venv/bin/python -m pytest -n auto -q "$@"
