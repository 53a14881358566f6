#!/usr/bin/env bash
# Install everything (system + Python packages) and run the whole test suite with pytest.
# Idempotent; safe as root on a brand-new Debian machine with no standard input.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1

# Real daemons the tests start by hand: Slurm + MUNGE (lifecycle/configless), OpenSSH (hpq remote, MPIJob
# workers); Open MPI runs the rendered MPIJob launcher command against them; promtool (prometheus) checks and
# unit-tests the alert rules (tests/observability/test_observability_assets.py); node_exporter feeds the real Prometheus of
# tests/observability/test_observability_prometheus.py (named, not left to apt's Recommends); chromium renders `hpq report`'s
# page headless (tests/views/test_views_browser.py).
bash dev/system-packages.sh slurmctld slurmd slurm-client munge openssh-server openssh-client procps iproute2 \
    openmpi-bin prometheus prometheus-node-exporter chromium

PY=${PYTHON:-python3}
echo "== installing Python packages"
# Exact versions from dev/constraints.txt (coverage and pytest-cov among them), so a new machine tests what
# this one did. torch is pinned to the CPU wheel (anything looser pulls GBs of CUDA packages).
$PY -m pip install -q -c dev/constraints.txt "torch==2.13.0" -e ".[test]"

echo "== checkov (its own virtualenv: it pins boto3 exactly, the project's environment must not get that)"
HPQ_CHECKOV=$(bash dev/checkov-venv.sh "$PY")
export HPQ_CHECKOV  # tests/cfn/test_cfn_checkov.py runs it; it fails (never skips) without it

echo "== ruff"
$PY -m ruff check .
echo "== pytest (line coverage of hpq, subprocesses and node-side code included: [tool.coverage] in pyproject.toml)"
rm -f .coverage .coverage.*
exec $PY -m pytest --cov --cov-report=term "$@"
