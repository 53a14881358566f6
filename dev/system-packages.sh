#!/usr/bin/env bash
# Install the Debian packages named as arguments that are missing (apt-get update first, once). Idempotent;
# as root or through sudo; no standard input needed. Used by dev/test.sh and dev/demo.sh.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
missing=""
for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
[ -z "$missing" ] && exit 0
echo "== installing system packages:$missing"
$SUDO apt-get update -q
# shellcheck disable=SC2086
$SUDO apt-get install -y -q $missing
