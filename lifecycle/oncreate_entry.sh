#!/bin/sh
# Shipped as on_create.sh at the root of the lifecycle prefix: LifeCycleConfig.OnCreate names this file.
# HyperPod downloads the prefix to /tmp/<bucket>/<prefix>/ and runs it from there as root, with no
# arguments (awsome-distributed-ai 1.architectures/5.sagemaker-hyperpod/tools/devops-agent/docs/
# hyperpod-mental-model.md, "LCS bundle staging"). It hands over to the bundle's hpq/lifecycle/on_create.sh
# with the arguments it got (e.g. --steps identify), found next to this file or in the working directory.
here=$(CDPATH='' cd -- "$(dirname -- "$0")" 2>/dev/null && pwd) || here=$PWD
script="$here/hpq/lifecycle/on_create.sh"
[ -f "$script" ] || script="$PWD/hpq/lifecycle/on_create.sh"
if [ ! -f "$script" ]; then
    echo "hpq on_create: hpq/lifecycle/on_create.sh is neither next to $0 nor in $PWD (incomplete upload?)" >&2
    exit 1
fi
exec bash "$script" "$@"
