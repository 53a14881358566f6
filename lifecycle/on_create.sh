#!/usr/bin/env bash
# The bundle's OnCreate script. HyperPod runs the root on_create.sh of the lifecycle prefix
# (names.ON_CREATE_ENTRY; lifecycle/oncreate_entry.sh), which runs this one with the same arguments.
# Bundle layout: <bundle>/on_create.sh, <bundle>/hpq/lifecycle/on_create.sh, <bundle>/hpq/__init__.py, ...
# Everything below HPQ_ROOT (default /); docs/lifecycle.md lists the HPQ_* settings.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bundle="$(cd "$here/../.." && pwd)"
root="${HPQ_ROOT:-/}"
log_dir="${root%/}/var/log/hpq"
mkdir -p "$log_dir"
log="$(cd "$log_dir" && pwd)/on_create.log"  # absolute: the script moves into the bundle below
py="${HPQ_PYTHON:-python3}"
# Python 3.7 is enough: Amazon Linux 2's python3 is 3.7, and HyperPod's EKS AMIs were AL2 up to Kubernetes 1.32
# (tests/test_lifecycle_python37.py keeps every lifecycle module to 3.7). Older or none: one line naming the AMIs.
if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 7))' >/dev/null 2>&1; then
    have="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo none)"
    os="$( (. "${root%/}/etc/os-release" && echo "${PRETTY_NAME:-$ID $VERSION_ID}") 2>/dev/null || echo 'unknown OS')"
    echo "hpq on_create: needs python3 3.7 or newer but $py is ${have} on ${os}: use HyperPod's own AMIs (Amazon Linux 2023 or Amazon Linux 2 for EKS nodes, Ubuntu for Slurm nodes)" | tee -a "$log" >&2
    exit 1
fi
export HPQ_START_DIR="${HPQ_START_DIR:-$PWD}"
echo "hpq on_create: bundle $bundle, started in $HPQ_START_DIR, log $log ($(date -u +%FT%TZ))" | tee -a "$log"
cd "$bundle"  # -m puts the cwd first on sys.path: make it the bundle
export PYTHONPATH="$bundle${PYTHONPATH:+:$PYTHONPATH}" HPQ_BUNDLE_ROOT="$bundle"
"$py" -u -m hpq.lifecycle.main "$@" 2>&1 | tee -a "$log"
exit "${PIPESTATUS[0]}"
