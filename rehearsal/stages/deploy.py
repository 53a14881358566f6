"""Stage ``aws``: embedded moto, then ``hpq deploy`` with the emulated rendition (the real deploy path)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hpq.rehearsal import aws
from hpq.rehearsal.plan import Plan
from hpq.rehearsal.stages import observe
from hpq.rehearsal.stages.base import Failure, Say
from hpq.rehearsal.teardown import TeardownStack


def start_moto(plan: Plan, stack: TeardownStack, say: Say) -> aws.EmbeddedMoto:
    """The emulated account on the bridge's gateway, and this process's AWS environment pointed at it."""
    moto = aws.EmbeddedMoto(plan.gateway).start()
    stack.push("embedded moto", moto.stop)  # kept: it stops with this process
    env = aws.environment(moto.url)
    env.__enter__()
    stack.push("AWS environment", lambda: env.__exit__(None, None, None))
    say("aws", f"embedded moto server on {moto.url} (the nodes reach it at {moto.node_url})")
    return moto


@dataclass
class DeployInput:
    plan: Plan
    without_fsx: bool
    observability: Any = None  # stages/observe.Observability: EnableObservability=true, its workspace realized
    prolog: bool = False  # EnableNodeProlog=true: slurm.conf's Prolog runs hpq's quick node checks


def deploy(inp: DeployInput, say: Say) -> aws.Deployed:
    p = inp.plan
    say("aws", f"hpq deploy {p.variant} with the EMULATED rendition (moto): FSx, SageMaker::Cluster, Lambda "
               "and custom resources are stand-ins that the rehearsal then creates from the real templates")
    params = {"WorkerCount": str(p.workers), "WorkerInstanceType": p.worker_type}
    if p.orchestrator == "slurm":
        params["EnableLoginGroup"] = "true" if p.login else "false"
    if inp.prolog:
        params["EnableNodeProlog"] = "true"
    realizers = {}
    if inp.observability is not None:
        params["EnableObservability"] = "true"
        realizers["AWS::APS::Workspace"] = observe.realize_workspace(inp.observability)
    bucket = f"hpq-rehearse-{p.run_id}-artifacts"
    try:
        d = aws.deploy(aws.session(), p.variant, p.cluster_name, bucket, params, on_note=lambda m: say("aws", m),
                       realizers=realizers)
    except aws.cfn_eval.EvalError as exc:
        raise Failure("aws", f"realizing the templates' stand-ins: {exc}") from None
    out = d.outputs
    say("aws", f"stack {d.stack_name} CREATE_COMPLETE (release {d.release_version}); FSx "
               f"{out.get('FsxFileSystemId')} {out.get('FsxDnsName')} mount name {out.get('FsxMountName')}; "
               f"lifecycle {out.get('LifecycleS3Uri')}")
    if inp.without_fsx:
        aws.delete_filesystems(aws.session(), d)
    for note in d.notes:
        say("aws", note)
    return d
