#!/usr/bin/env bash
# HyperPod OnCreate entry: find the bundle this script sits in, run the Python lifecycle.
# Bundle layout: <bundle>/hpq/lifecycle/on_create.sh, <bundle>/hpq/__init__.py, ...
# Everything below HPQ_ROOT (default /); see lifecycle/context.py for the HPQ_* knobs.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bundle="$(cd "$here/../.." && pwd)"
root="${HPQ_ROOT:-/}"
log_dir="${root%/}/var/log/hpq"
mkdir -p "$log_dir"
log="$log_dir/on_create.log"
py="${HPQ_PYTHON:-python3}"
if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 8))'; then
    echo "hpq on_create: $py is older than 3.8 or missing" | tee -a "$log" >&2
    exit 1
fi
echo "hpq on_create: bundle $bundle, log $log ($(date -u +%FT%TZ))" | tee -a "$log"
cd "$bundle"  # -m puts the cwd first on sys.path: make it the bundle
export PYTHONPATH="$bundle${PYTHONPATH:+:$PYTHONPATH}" HPQ_BUNDLE_ROOT="$bundle"
"$py" -u -m hpq.lifecycle.main "$@" 2>&1 | tee -a "$log"
exit "${PIPESTATUS[0]}"
