#!/usr/bin/env bash
# Regenerate vitbench/requirements.lock: the exact versions a fresh `pip install -e '.[all]'` resolves today.
#   scripts/lock.sh            (Linux x86_64, CPython 3.11: the platform CI and the lock are for)
# Review the diff, run the tests through the new lock (.ci/run), commit both together.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$(command -v python3.11 || command -v python3)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PY" -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q -e '.[all]'
{
  echo "# Exact versions of vitbench[all] and everything it pulls in, as resolved on $(date -u +%Y-%m-%d)"
  echo "# for $("$tmp/venv/bin/python" -c 'import platform; print(platform.system(), platform.machine(), "CPython", platform.python_version())')."
  echo "# Install through it:  pip install -c vitbench/requirements.lock -e '.[all]'"
  echo "# Regenerate:          scripts/lock.sh   (then run .ci/run and commit the new lock with the change)"
  "$tmp/venv/bin/pip" freeze --all --exclude-editable | grep -viE '^(pip|vitbench)=='
} > vitbench/requirements.lock
echo "wrote vitbench/requirements.lock ($(grep -vc '^#' vitbench/requirements.lock) packages)"
