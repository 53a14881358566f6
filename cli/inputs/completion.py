"""Shell completion for names hpq knows: variants and sizes (hpq's lists), and cluster and stack names.

Cluster names come from kept rehearsals (hpq rehearse --keep) and from the hpq stacks CloudFormation
lists in the region and profile given so far on the line (hpq.aws.inventory.completion_names: short
timeouts, nothing on failure). See docs/cli.md.
"""

from __future__ import annotations

from collections.abc import Iterable

import click
from click.shell_completion import CompletionItem

from hpq.aws.inventory import completion_names
from hpq.rehearsal import state


def items(names: Iterable[str], incomplete: str) -> list[CompletionItem]:
    return [CompletionItem(n) for n in sorted(set(names)) if n.startswith(incomplete)]


def aws_names(kind: str, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
    """``kind``: "cluster" or "stack"; rehearsal clusters first need no AWS at all."""
    local = [st.cluster_name for st in state.all_states() if st.cluster_name] if kind == "cluster" else []
    params = ctx.params if ctx is not None else {}
    remote = completion_names(kind, params.get("region"), params.get("profile"))
    return items([*local, *remote], incomplete)
