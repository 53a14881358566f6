#!/usr/bin/env bash
# Create checkov's own virtualenv (once; reused while it holds the pinned version) and print the checkov path.
# checkov pins boto3==1.35.49 exactly: in the project's environment it would downgrade boto3 for everything,
# so it lives apart, in the ignored build/tools/checkov-venv, installed from dev/checkov-constraints.txt.
# Usage: bash dev/checkov-venv.sh [PYTHON]      (dev/test.sh runs it and exports HPQ_CHECKOV)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-${PYTHON:-python3}}
VENV=build/tools/checkov-venv
WANT=$(sed -n 's/^checkov==//p' dev/checkov-constraints.txt)
if [ "$("$VENV/bin/checkov" --version 2>/dev/null || true)" != "$WANT" ]; then
    echo "== creating $VENV (checkov $WANT)" >&2
    rm -rf "$VENV"
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -c dev/checkov-constraints.txt \
        "checkov==$WANT" >&2
fi
echo "$PWD/$VENV/bin/checkov"
