"""``hpq nccl-env``: show what the transport function gives a node of a type."""

from __future__ import annotations

import json

import click

from hpq.cli import inputs
from hpq.cli.common_options import deprecated_spelling
from hpq.errors import UsageError
from hpq.lifecycle import catalog, transport
from hpq.manifests import yamlsafe


def render_environment(env: transport.NodeEnvironment, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(env.variables, indent=2, sort_keys=True) + "\n"
    if fmt == "k8s":  # through the manifests' YAML emitter, as hpq eks render writes the same env
        lines = ["env:"]
        for item in env.k8s_env():
            lines.append(f"  - name: {item['name']}")  # NAME: [A-Z0-9_] from hpq.lifecycle.transport
            lines.append(f"    value: {yamlsafe.scalar(item['value'], 'an environment value')}")
        return "\n".join(lines) + "\n"
    out = [f"# hpq nccl-env {env.instance_type}: transport {env.transport}, torch backend {env.torch_backend}"]
    out += [f"# note: {n}" for n in env.notes]
    return "\n".join(out) + "\n" + env.as_shell()


@click.command("nccl-env")
@click.argument("instance_type", type=inputs.INSTANCE_TYPE)
@click.option("--efa/--no-efa", default=None,
              help="Pretend the node probe found (or did not find) EFA devices. Default: trust the catalog.")
@deprecated_spelling("--profile", canonical="profile", new_flag="--nccl-profile", type=click.Choice(transport.PROFILES))
@click.option("--nccl-profile", "profile", type=click.Choice(transport.PROFILES), default="default", show_default=True,
              help="'legacy' adds NCCL_BUFFSIZE/NCCL_P2P_NET_CHUNKSIZE (AWS dropped them as neutral).")
@click.option("--iface", default=None, type=inputs.IFACE, help="Default-route interface for the TCP path (else ^docker,lo,veth).")
@deprecated_spelling("--format", canonical="fmt", new_flag="--output", type=click.Choice(["sh", "json", "k8s"]))
@click.option("--output", "fmt", type=click.Choice(["sh", "json", "k8s"]), default="sh", show_default=True,
              help="sh: export lines; json: an object; k8s: a container env: list.")
def nccl_env(instance_type: str, efa: bool | None, profile: str, iface: str | None, fmt: str) -> None:
    """Print the EFA transport and NCCL environment a node of INSTANCE_TYPE gets.

    \b
    Examples:
      hpq nccl-env ml.p5.48xlarge
      hpq nccl-env g5.16xlarge --output json
      hpq nccl-env ml.g5.48xlarge --no-efa --iface ens5
      eval "$(hpq nccl-env ml.p4d.24xlarge)"    # apply for a manual mpirun
    """
    try:
        entry = catalog.lookup(instance_type)
    except catalog.UnknownInstanceType as exc:
        raise UsageError(str(exc)) from None
    probe = transport.NodeProbe(
        efa_devices=None if efa is None else (max(entry.efa_interfaces, 1) if efa else 0),
        default_iface=iface,
    )
    env = transport.node_environment(entry.name, probe, profile)
    click.echo(render_environment(env, fmt), nl=False)
