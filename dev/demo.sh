#!/usr/bin/env bash
# The main job, offline: render and cfn-lint every variant, then rehearse a whole slurm-gpu cluster
# on this machine (emulated AWS, namespaced nodes, real Slurm, validation over SSH) with a verdict.
# Needs no AWS account and no credentials. Idempotent; safe as root on a brand-new Debian machine.
#   bash dev/demo.sh [TEMPLATES_OUT]        (HPQ_DEMO_REHEARSE=0 skips the rehearsal)
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1
OUT=${1:-out/templates}
PY=${PYTHON:-python3}
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"

# 1. Templates: every variant x size, linted.
$PY -c "import hpq.cli.main, moto, kubernetes_validate, awscli, numpy" 2>/dev/null \
    || $PY -m pip install -q -c dev/constraints.txt -e ".[rehearse]"
rm -rf "$OUT"
for size in small medium large; do
    $PY -m hpq synth --all --size "$size" -o "$OUT/$size"
done
$PY -m hpq lint "$OUT"
echo "templates: $(cd "$OUT" && pwd)  (one folder per size, then per variant: root.json + nested stacks)"

[ "${HPQ_DEMO_REHEARSE:-1}" = 0 ] && exit 0

# 2. The rehearsal: Slurm, MUNGE and OpenSSH from Debian, torch's CPU wheel for the validation runs.
bash dev/system-packages.sh slurmctld slurmd slurm-client munge openssh-server openssh-client procps iproute2
$PY -c "import torch" 2>/dev/null || $PY -m pip install -q -c dev/constraints.txt "torch==2.13.0"
echo "== hpq rehearse slurm-gpu --nodes 2 (docs/rehearse.md)"
exec $SUDO "$(command -v "$PY" || echo "$PY")" -m hpq rehearse slurm-gpu --nodes 2
