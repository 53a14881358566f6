"""The options that say how to reach a node over SSH (through SSM by default): `hpq remote` and `hpq test`."""

from __future__ import annotations

from typing import Any

import click

from hpq.cli import inputs
from hpq.validation.pick import Reach


def ssh_options(func: Any) -> Any:
    func = click.option("--proxy-command", default=None, metavar="CMD", type=inputs.ShellWords("proxy command", False),
                        help="Use this ProxyCommand instead of SSM (e.g. 'ssh -W %h:%p bastion'); %h/%p expand "
                             "to --host/--port.")(func)
    func = click.option("--host", default=None, type=inputs.HOST, help="Host name for --proxy-command (default: the SSM target).")(func)
    func = click.option("--port", default=22, show_default=True, type=inputs.PORT, help="sshd port on the node.")(func)
    func = click.option("--known-hosts", default="~/.ssh/hpq_known_hosts", show_default=True,
                        type=inputs.WritableFile("known hosts"),
                        help="Host keys, pinned on first use.")(func)
    func = click.option("--key", "key", default=None, metavar="PATH", type=inputs.InputFile(what="key"),
                        help="Private key (default: ssh-agent, then ~/.ssh/id_*).")(func)
    func = click.option("--user", default="ubuntu", show_default=True, type=inputs.USER, help="Remote user.")(func)
    func = click.option("--node", default=None, metavar="INSTANCE_ID|INDEX", type=inputs.NODE, help="Node in the group (default: first).")(func)
    func = click.option("--group", default=None, type=inputs.INSTANCE_GROUP, help="Instance group (default: the Slurm controller group).")(func)
    return func


def reach(region: str | None, profile: str | None, group: str | None, node: str | None, user: str, key: str | None,
          known_hosts: str, port: int, host: str | None, proxy_command: str | None, **eks: Any) -> Reach:
    """The parsed options as the validation library's Reach."""
    return Reach(region, profile, user, key, known_hosts, port, proxy_command, host, group, node, dict(eks))
