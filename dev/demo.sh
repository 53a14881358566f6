#!/usr/bin/env bash
# The main job, offline: render every variant and size, cfn-lint them, say where they are.
# Needs nothing but this machine (no AWS account, no credentials). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-out/templates}
PY=${PYTHON:-python3}
$PY -c "import hpq.cli.main" 2>/dev/null || $PY -m pip install -q -c dev/constraints.txt -e .
rm -rf "$OUT"
for size in small medium large; do
    $PY -m hpq synth --all --size "$size" -o "$OUT/$size"
done
$PY -m hpq lint "$OUT"
echo "templates: $(cd "$OUT" && pwd)  (one folder per size, then per variant: root.json + nested stacks)"
