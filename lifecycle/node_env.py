"""Write the EFA/NCCL environment once, from transport.node_environment and this node's probe.

Two managed places, both replaced (never appended) on re-run: ``/etc/profile.d/hpq-nccl.sh``
for login shells (with the PATH additions, e.g. the Neuron tools) and one marked block
in ``/etc/environment`` for everything PAM starts (sshd, su), plus a JSON copy that
node commands read.
"""

from __future__ import annotations

import json

from . import catalog, files, identity, transport
from .context import Degraded

PROFILE = "/etc/profile.d/hpq-nccl.sh"
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
        catalog.lookup(node.instance_type or "")
    except catalog.UnknownInstanceType:
        ctx.log.warning("instance type %r is not in the catalog: no NCCL environment written", node.instance_type)
        return Degraded("skipped (unknown instance type %s)" % node.instance_type)
    probe = transport.probe_node(ctx.s.root)
    env = transport.node_environment(node.instance_type, probe, ctx.s.nccl_profile)
    for note in env.notes:
        ctx.log.warning("transport: %s", note)
    header = ("# Written by the hpq lifecycle for %s (transport %s, torch backend %s); replaced on every run.\n"
              % (env.instance_type, env.transport, env.torch_backend))
    changed = files.write_file(ctx.path(PROFILE), header + env.as_shell())
    changed |= files.set_block(ctx.path(ENVIRONMENT), "nccl", environment_lines(env))
    doc = {"instance_type": env.instance_type, "transport": env.transport, "torch_backend": env.torch_backend,
           "variables": env.variables, "path_prepend": list(env.path_prepend), "notes": list(env.notes)}
    changed |= files.write_file(ctx.path(JSON), json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return "%s: %s (%d variables)%s" % (env.instance_type, env.transport, len(env.variables),
                                        "" if changed else ", files unchanged")
