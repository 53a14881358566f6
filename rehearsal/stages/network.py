"""Stage ``network``: claim a run id in the host's state, then the run's bridge and subnet."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass

from hpq.lifecycle import catalog
from hpq.rehearsal import netns, procs, state
from hpq.rehearsal.plan import Plan, new_plan, new_run_id
from hpq.rehearsal.stages.base import Say
from hpq.rehearsal.state import RunState
from hpq.rehearsal.teardown import TeardownStack


@dataclass
class NetworkInput:
    run_id: str
    variant: str
    workers: int
    worker_type: str  # as the user named it or default_worker_type chose it
    login: bool
    keep: bool
    log_base: str


@dataclass
class Network:
    run_id: str  # may differ from the input's: another rehearsal on this host had claimed that one
    state: RunState
    plan: Plan


def setup_network(inp: NetworkInput, stack: TeardownStack, say: Say) -> Network:
    itype = catalog.normalize(inp.worker_type)
    me = procs.identify(os.getpid())
    run_id = inp.run_id
    while True:  # a run id no other rehearsal on this host has recorded (they run side by side)
        workdir = tempfile.mkdtemp(prefix=f"hpq-rehearse-{run_id}-")
        logdir = os.path.join(inp.log_base, run_id)
        st = RunState(run_id, inp.variant, os.getpid(), time.time(), workdir, logdir, keep=inp.keep,
                                pid_start=me.start if me else None)
        if st.claim():
            break
        os.rmdir(workdir)
        run_id = new_run_id()
    push_teardown(stack, st, say, inp.log_base)
    os.makedirs(logdir, exist_ok=True)
    with netns.host_lock():
        subnet = netns.pick_subnet(run_id)
        plan = new_plan(run_id, inp.variant, inp.workers, itype, inp.login, subnet)
        st.bridge, st.subnet = plan.bridge, subnet
        st.cluster_name, st.worker_type = plan.cluster_name, plan.worker_type
        st.save()
        netns.create_bridge(plan.bridge, plan.gateway, plan.prefix_len)
    say("network", f"bridge {plan.bridge}, {subnet} (run {run_id}, work dir {workdir})")
    return Network(run_id, st, plan)


def push_teardown(stack: TeardownStack, st: RunState, say: Say, log_base: str) -> None:
    """The undos of a claimed run: everything its state file records (state.teardown, the same code
    ``hpq rehearse down`` runs), then a passing run's logs, then the log and state folders once empty.
    A kept run is only marked finished (``hpq rehearse down`` removes it later)."""

    def parents() -> None:
        for d in (log_base, str(state.STATE_DIR)):  # the parents, once nothing is left in them
            try:
                os.rmdir(d)
            except OSError:
                pass

    def kept() -> None:
        st.finished = True
        st.save()
        say("keep", f"rehearsal {st.run_id} kept: hpq rehearse shell [NODE] to enter a node, "
                    f"hpq rehearse down to remove it (the emulated AWS stops with this command)")

    stack.push("log folders", parents)
    if st.logdir:
        stack.push("logs of a passing run", lambda: shutil.rmtree(st.logdir, ignore_errors=True), only_if_passed=True)
    stack.push("rehearsal state", lambda: state.teardown(st, own_children=True), when_kept=kept)
