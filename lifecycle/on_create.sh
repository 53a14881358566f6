#!/usr/bin/env bash
# The bundle's OnCreate script. HyperPod runs the root on_create.sh of the lifecycle prefix
# (names.ON_CREATE_ENTRY; lifecycle/oncreate_entry.sh), which runs this one with the same arguments.
# Bundle layout: <bundle>/on_create.sh, <bundle>/hpq/lifecycle/on_create.sh, <bundle>/hpq/__init__.py, ...
# Everything below HPQ_ROOT (default /); docs/lifecycle.md lists the HPQ_* settings.
#
# On failure it waits HPQ_FAIL_LOG_WAIT_S seconds (default 60) before exiting, so that HyperPod's agent
# ships the last lines to CloudWatch before the node is marked failed: AWS's EKS lifecycle does the same
# (awsome-distributed-ai 1.architectures/7.sagemaker-hyperpod-eks/LifecycleScripts/base-config/on_create.sh:
# "[error] on_create_main.sh failed, waiting 60 seconds before exit, to make sure logs are uploaded", sync,
# sleep 60, exit 1). A run that succeeds is never delayed.
set -euo pipefail
fail_wait="${HPQ_FAIL_LOG_WAIT_S:-60}"  # unset or empty: 60
# A number of seconds from 0 to 3600 (decimals allowed); anything else is one line and exit 2.
if ! [[ "$fail_wait" =~ ^[0-9]{1,4}(\.[0-9]{1,3})?$ ]] || (( 10#${fail_wait%%.*} > 3600 )); then
    echo "hpq on_create: bad setting: HPQ_FAIL_LOG_WAIT_S must be a number of seconds from 0 to 3600, got '$fail_wait'" >&2
    exit 2
fi
if [[ -n "${HPQ_ROOT+x}" && -z "${HPQ_ROOT// /}" ]]; then
    echo "hpq on_create: bad setting: HPQ_ROOT is set but empty; unset it for /" >&2
    exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bundle="$(cd "$here/../.." && pwd)"
root="${HPQ_ROOT:-/}"
log_dir="${root%/}/var/log/hpq"
mkdir -p "$log_dir"
log="$(cd "$log_dir" && pwd)/on_create.log"  # absolute: the script moves into the bundle below

# Exit with $1 after the CloudWatch wait when it is a failure.
finish() {
    local rc="$1"
    if [ "$rc" -ne 0 ] && [ "$fail_wait" != 0 ]; then
        echo "hpq on_create: failed (exit $rc); waiting ${fail_wait}s before exiting so the log reaches CloudWatch (HPQ_FAIL_LOG_WAIT_S)" | tee -a "$log" >&2
        sync "$log" 2>/dev/null || sync
        sleep "$fail_wait"
    fi
    exit "$rc"
}

py="${HPQ_PYTHON:-python3}"
# Python 3.7 is enough: Amazon Linux 2's python3 is 3.7, and HyperPod's EKS AMIs were AL2 up to Kubernetes 1.32
# (tests/lifecycle/test_lifecycle_python37.py keeps every lifecycle module to 3.7). Older or none: one line naming the AMIs.
if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 7))' >/dev/null 2>&1; then
    have="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo none)"
    os="$( (. "${root%/}/etc/os-release" && echo "${PRETTY_NAME:-$ID $VERSION_ID}") 2>/dev/null || echo 'unknown OS')"
    echo "hpq on_create: needs python3 3.7 or newer but $py is ${have} on ${os}: use HyperPod's own AMIs (Amazon Linux 2023 or Amazon Linux 2 for EKS nodes, Ubuntu for Slurm nodes)" | tee -a "$log" >&2
    finish 1
fi
export HPQ_START_DIR="${HPQ_START_DIR:-$PWD}"
echo "hpq on_create: bundle $bundle, started in $HPQ_START_DIR, log $log ($(date -u +%FT%TZ))" | tee -a "$log"
cd "$bundle"  # -m puts the cwd first on sys.path: make it the bundle
export PYTHONPATH="$bundle${PYTHONPATH:+:$PYTHONPATH}" HPQ_BUNDLE_ROOT="$bundle"
set +e
"$py" -u -m hpq.lifecycle.main "$@" 2>&1 | tee -a "$log"
rc="${PIPESTATUS[0]}"
set -e
finish "$rc"
