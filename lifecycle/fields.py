"""Values that end up inside line-based node files (fstab, ssh config, known_hosts, drop-ins), checked first.

Whatever the source (hpq-cluster.json, provisioning_parameters.json, resource_config.json, an FSx API
answer), a value is checked against the shape AWS documents for it before any file is built from it, so a
name with a space or a newline is refused with FieldError naming the field, never spliced into a line:
- FSx DNS names: a host name (RFC 1123 labels: letters, digits, hyphens; at most 253 characters). botocore's
  FSx model (``DNSName``: ``^((fs|fc)i?-[0-9a-f]{8,}\\..{4,253})$``, at most 275) leaves the tail open; a
  Lustre NID host (``<dns>@tcp``) must be a host name, so the tail is held to RFC 1123 here.
- Lustre mount names: ``^([A-Za-z0-9_-]{1,8})$`` (botocore FSx model, ``LustreFileSystemMountName``).
- Instance group and cluster names: HyperPod's rule, hpq.lifecycle.names.valid_hyperpod_name.
- Host-like names (InstanceName, InstanceId) and Slurm partition names: one token of letters, digits and
  ``._-`` (no blank, no comma, no pattern character: they go into ssh_config/known_hosts host lists).
- Addresses: dotted IPv4.
- AMP remote-write URLs: ``https://aps-workspaces.<region>.amazonaws.com[.cn]/workspaces/ws-<id>/api/v1/remote_write``
  (the Observability stack's output, cfn/observability.py; it goes into the Prometheus agent's configuration).
"""

from __future__ import annotations

import ipaddress
import re

from .names import HYPERPOD_NAME_RULE, valid_hyperpod_name

# fullmatch, never match with "$": "$" also matches before a trailing newline.
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
MOUNT_NAME = re.compile(r"[A-Za-z0-9_-]{1,8}")
TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")
AMP_REMOTE_WRITE_URL = re.compile(r"https://aps-workspaces\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?/workspaces/"
                                  r"ws-[a-zA-Z0-9-]+/api/v1/remote_write")


class FieldError(ValueError):
    pass


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def dns_name(value, what: str) -> str:
    if isinstance(value, str) and 0 < len(value) <= 253 and all(_LABEL.fullmatch(p) for p in value.split(".")):
        return value
    raise FieldError("%s %s is not a DNS name (letters, digits, hyphens and dots, at most 253 characters)"
                     % (what, _shown(value)))


def mount_name(value, what: str) -> str:
    if isinstance(value, str) and MOUNT_NAME.fullmatch(value):
        return value
    raise FieldError("%s %s is not an FSx for Lustre mount name (1 to 8 of A-Z a-z 0-9 _ -)" % (what, _shown(value)))


def group_name(value, what: str) -> str:
    if valid_hyperpod_name(value):
        return value
    raise FieldError("%s %s is not a HyperPod name (%s)" % (what, _shown(value), HYPERPOD_NAME_RULE))


def token(value, what: str) -> str:
    if isinstance(value, str) and TOKEN.fullmatch(value):
        return value
    raise FieldError("%s %s is not one name (letters, digits, '.', '_', '-'; no blanks)" % (what, _shown(value)))


def ipv4(value, what: str) -> str:
    try:
        if isinstance(value, str) and str(ipaddress.IPv4Address(value)) == value:
            return value
    except ValueError:
        pass
    raise FieldError("%s %s is not an IPv4 address" % (what, _shown(value)))


def amp_remote_write_url(value, what: str) -> str:
    if isinstance(value, str) and AMP_REMOTE_WRITE_URL.fullmatch(value):
        return value
    raise FieldError("%s %s is not an AMP remote-write URL (https://aps-workspaces.<region>.amazonaws.com/"
                     "workspaces/ws-<id>/api/v1/remote_write)" % (what, _shown(value)))
