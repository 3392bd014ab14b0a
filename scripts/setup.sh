#!/usr/bin/env bash
# Creates .venv (once) and installs loopcheck with its test extras and the CPU build of torch.
# Sourced by scripts/demo.sh and scripts/test.sh; re-running it is cheap when nothing changed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "Creating .venv ..." >&2
  "$python" -m venv .venv
fi
stamp=.venv/.loopcheck-installed
want="$(cat pyproject.toml constraints/test.txt | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "Installing loopcheck, its test tools and torch (CPU) into .venv ..." >&2
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
  .venv/bin/python -m pip install --quiet --disable-pip-version-check \
    -c constraints/test.txt -e ".[test,torch]" >&2
  echo "$want" > "$stamp"
fi
