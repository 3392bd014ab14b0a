#!/usr/bin/env bash
# The main job on the bundled examples: lint finds the bugs in the example scripts.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/setup.sh"
cd "$root"
exec .venv/bin/python -m loopcheck.demo "$@"
