#!/usr/bin/env bash
# The GitHub Action (action.yml): installs loopcheck into a virtual environment of its own (never
# the job's Python packages, never torch) and runs `loopcheck lint` on the workspace.
#
#   INPUT_ARGS     paths and options, split on spaces (default: .)
#   INPUT_FORMAT   github (default), text, concise, json or sarif
#   INPUT_INSTALL  what pip installs (default: the checkout this script belongs to)
#   LOOPCHECK_PYTHON  the interpreter that creates the environment (default: python3)
#
# The exit code is loopcheck's: 0 clean, 1 findings, 2 a file could not be checked.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${LOOPCHECK_PYTHON:-python3}"
venv="${RUNNER_TEMP:-${TMPDIR:-/tmp}}/loopcheck-action-venv"
if [ ! -x "$venv/bin/loopcheck" ]; then
  echo "::group::Installing loopcheck" >&2
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${INPUT_INSTALL:-$here}" >&2
  echo "::endgroup::" >&2
fi
read -r -a args <<< "${INPUT_ARGS:-.}"
exec "$venv/bin/loopcheck" lint --format "${INPUT_FORMAT:-github}" "${args[@]}"
