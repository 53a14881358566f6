"""Network plumbing: one Linux bridge per rehearsal, one named network namespace per node.

Each node gets a veth pair: the host end is a port of the bridge, the other end moves into the
node's namespace and is renamed ``ens5``. The bridge holds the subnet's first address (the
"VPC router": where the emulated AWS endpoint listens). 169.254.169.254/32 sits on the node's
loopback so its IMDS answers at the address every AWS SDK uses. Nothing is routed off the
bridge: the nodes reach each other and the emulated AWS, nothing else.

Per-node link settings (``shape``) are ``tc`` qdiscs on the node's own ``ens5``, applied inside
its namespace, so a later stage can slow one node's link without touching the others.
"""

from __future__ import annotations

import fcntl
import hashlib
import ipaddress
import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from hpq.errors import OperationFailed

LOCK_PATH = "/run/lock/hpq-rehearse.lock"
# Candidate /24s: 10.100.0.0 - 10.250.255.0. A real VPC default (10.0.0.0/16, 10.1.0.0/16) stays free.
FIRST_SECOND_OCTET, LAST_SECOND_OCTET = 100, 250


class NetError(OperationFailed):
    pass


def ip(*args: str, check: bool = True, netns: str | None = None) -> subprocess.CompletedProcess:
    argv = ["ip"] + (["-n", netns] if netns else []) + list(args)
    res = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and res.returncode != 0:
        raise NetError(f"`{' '.join(argv)}` failed: {res.stderr.strip() or res.stdout.strip()}")
    return res


@contextmanager
def host_lock() -> Iterator[None]:
    """Serialize subnet choice and bridge creation between concurrent rehearsals."""
    os.makedirs(os.path.dirname(LOCK_PATH), exist_ok=True)
    with open(LOCK_PATH, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def used_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network the host has an address in or a route to (all tables)."""
    nets: list[ipaddress.IPv4Network] = []
    for args in (["-4", "-j", "addr", "show"], ["-4", "-j", "route", "show", "table", "all"]):
        res = ip(*args, check=False)
        try:
            entries = json.loads(res.stdout or "[]")
        except ValueError:
            continue
        for e in entries:
            for a in e.get("addr_info", []):
                nets.append(ipaddress.ip_network(f"{a['local']}/{a['prefixlen']}", strict=False))
            dst = e.get("dst")
            if dst and dst != "default":
                try:
                    nets.append(ipaddress.ip_network(dst if "/" in dst else dst + "/32", strict=False))
                except ValueError:
                    pass
    return nets


def pick_subnet(run_id: str, used: list[ipaddress.IPv4Network] | None = None) -> str:
    """A 10.x.y.0/24 derived from the run id that overlaps nothing the host uses."""
    used = used_networks() if used is None else used
    span = LAST_SECOND_OCTET - FIRST_SECOND_OCTET + 1
    start = int(hashlib.sha256(run_id.encode()).hexdigest(), 16) % (span * 256)
    for step in range(span * 256):
        k = (start + step) % (span * 256)
        net = ipaddress.ip_network(f"10.{FIRST_SECOND_OCTET + k // 256}.{k % 256}.0/24")
        if not any(net.overlaps(u) for u in used):
            return str(net)
    raise NetError("no free 10.x.y.0/24 left on this host for a rehearsal network")


def create_bridge(name: str, gateway: str, prefix_len: int) -> None:
    ip("link", "add", name, "type", "bridge")
    ip("addr", "add", f"{gateway}/{prefix_len}", "dev", name)
    ip("link", "set", name, "up")


def create_node_link(netns: str, host_iface: str, bridge: str, address: str, prefix_len: int, gateway: str,
                     node_iface: str) -> None:
    """Namespace, veth pair on the bridge, the node's address, default route, IMDS address on lo."""
    ip("netns", "add", netns)
    peer = host_iface + "p"
    ip("link", "add", host_iface, "type", "veth", "peer", "name", peer)
    ip("link", "set", peer, "netns", netns)
    ip("link", "set", host_iface, "master", bridge)
    ip("link", "set", host_iface, "up")
    ip("link", "set", peer, "name", node_iface, netns=netns)
    ip("addr", "add", f"{address}/{prefix_len}", "dev", node_iface, netns=netns)
    ip("link", "set", node_iface, "up", netns=netns)
    ip("link", "set", "lo", "up", netns=netns)
    ip("addr", "add", "169.254.169.254/32", "dev", "lo", netns=netns)
    ip("route", "add", "default", "via", gateway, netns=netns)


def shape(netns: str, dev: str, rate: str) -> None:
    """Limit the node's egress on ``dev`` to ``rate`` (tc's notation, e.g. 30mbit) with a token bucket."""
    res = subprocess.run(["ip", "netns", "exec", netns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf",
                          "rate", rate, "burst", "64kb", "latency", "50ms"], capture_output=True, text=True,
                         timeout=30)
    if res.returncode != 0:
        raise NetError(f"tc in {netns} refused rate {rate!r}: {res.stderr.strip()}")


def egress_rate(netns: str, dev: str) -> int | None:
    """The root tbf qdisc's rate on ``dev`` in bytes per second, as ``tc -j`` reports it (None: no tbf)."""
    res = subprocess.run(["ip", "netns", "exec", netns, "tc", "-j", "qdisc", "show", "dev", dev],
                         capture_output=True, text=True, timeout=30)
    try:
        for q in json.loads(res.stdout or "[]"):
            if q.get("kind") == "tbf" and q.get("root"):
                return int(q.get("options", {}).get("rate"))
    except (ValueError, TypeError, AttributeError):
        pass
    return None


def netns_exists(name: str) -> bool:
    return os.path.exists(f"/run/netns/{name}")


def delete_netns(name: str) -> None:
    if netns_exists(name):
        ip("netns", "del", name, check=False)


def link_exists(name: str) -> bool:
    return os.path.exists(f"/sys/class/net/{name}")


def delete_link(name: str) -> None:
    if link_exists(name):
        ip("link", "del", name, check=False)
