"""Write the EFA/NCCL environment once, from transport.node_environment and this node's probe.

On accelerated workers, two managed places, both replaced (never appended) on re-run:
``/etc/profile.d/hpq-nccl.sh`` for login shells (with the PATH additions, e.g. the Neuron tools)
and one marked block in ``/etc/environment`` for everything PAM starts (sshd, su).

Controllers, login nodes and CPU instances get neither (``transport.exports_to_shells``): users
submit from them and Slurm carries the submitter's environment into the job, so their TCP settings
(``NCCL_NET_PLUGIN=none``) would reach every GPU rank. A re-run there removes what an earlier hpq
wrote (its own block and its own file, nothing else). Every node keeps its JSON copy in hpq's own
``/etc/hpq/nccl-env.json``, which no shell reads.
"""

from __future__ import annotations

import json
import os

from . import catalog, files, identity, transport
from .context import Degraded

PROFILE = "/etc/profile.d/hpq-nccl.sh"
PROFILE_HEADER = "# Written by the hpq lifecycle"
ENVIRONMENT = "/etc/environment"
JSON = "/etc/hpq/nccl-env.json"


def environment_lines(env: transport.NodeEnvironment):
    # pam_env reads KEY=VALUE; quote anything that is not plain.
    out = []
    for key, value in sorted(env.variables.items()):
        out.append("%s=%s" % (key, value if transport.is_plain(value) else '"%s"' % value.replace('"', '\\"')))
    return out


def run(ctx) -> str:
    node = identity.load_node(ctx)
    try:
        entry = catalog.lookup(node.instance_type or "")
    except catalog.UnknownInstanceType:
        ctx.log.warning("instance type %r is not in the catalog: no NCCL environment written", node.instance_type)
        return Degraded("skipped (unknown instance type %s)" % node.instance_type)
    probe = transport.probe_node(ctx.s.root)
    env = transport.node_environment(node.instance_type, probe, ctx.s.nccl_profile)
    for note in env.notes:
        ctx.log.warning("transport: %s", note)
    exported = transport.exports_to_shells(entry, node.role)
    if exported:
        header = ("%s for %s (transport %s, torch backend %s); replaced on every run.\n"
                  % (PROFILE_HEADER, env.instance_type, env.transport, env.torch_backend))
        changed = files.write_file(ctx.path(PROFILE), header + env.as_shell())
        changed |= files.set_block(ctx.path(ENVIRONMENT), "nccl", environment_lines(env))
    else:
        changed = remove_shell_exports(ctx)
    doc = {"instance_type": env.instance_type, "transport": env.transport, "torch_backend": env.torch_backend,
           "variables": env.variables, "path_prepend": list(env.path_prepend), "notes": list(env.notes),
           "exported_to_shells": exported}
    changed |= files.write_file(ctx.path(JSON), json.dumps(doc, indent=2, sort_keys=True) + "\n")
    where = "" if exported else "; %s node: none exported to shells or jobs (hpq's own %s only)" % (
        node.role if node.role in ("controller", "login") else "CPU", JSON)
    return "%s: %s (%d variables)%s%s" % (env.instance_type, env.transport, len(env.variables), where,
                                          "" if changed else ", files unchanged")


def remove_shell_exports(ctx) -> bool:
    """Drop what an earlier hpq wrote for shells: its /etc/environment block and its own profile.d file.

    The profile file goes only when it carries hpq's header (a file of that name someone else wrote
    stays); nothing outside the marked block of /etc/environment is touched. True when anything changed.
    """
    changed = False
    env_path = ctx.path(ENVIRONMENT)
    if files.BEGIN % "nccl" in (files.read_text(env_path) or ""):
        changed |= files.set_block(env_path, "nccl", [])
    profile = ctx.path(PROFILE)
    text = files.read_text(profile)
    if text is not None and text.startswith(PROFILE_HEADER):
        os.unlink(profile)
        changed = True
    elif text is not None:
        ctx.log.warning("%s was not written by hpq: left as it is (check it exports no NCCL/FI/GLOO variable)",
                        PROFILE)
    return changed
