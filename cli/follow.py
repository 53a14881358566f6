"""Follow a stack operation live: root and every nested stack, resources done/total, elapsed, current step.

HyperPod stacks take 20-40 minutes with ten nested stacks; a plain spinner hides where time goes
and which stack failed. Ctrl-C stops following, never the stack.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Any

from hpq.aws.events import operation_start
from hpq.aws.stacks import NESTED_TYPE, describe, is_terminal, stack_tree, template_resource_count
from hpq.errors import HpqError

DONE = {
    "create": {"CREATE_COMPLETE", "UPDATE_COMPLETE", "IMPORT_COMPLETE"},
    "update": {"CREATE_COMPLETE", "UPDATE_COMPLETE", "IMPORT_COMPLETE", "DELETE_COMPLETE"},
    "delete": {"DELETE_COMPLETE", "DELETE_SKIPPED"},
}


class Interrupted(HpqError):
    """Ctrl-C while following: the stack operation goes on (exit 130)."""

    exit_code = 130


@dataclass
class Snapshot:
    status: str
    done: int
    total: int
    elapsed: float
    current: str
    new_events: list[dict[str, Any]] = field(default_factory=list)

    def line(self, stack: str) -> str:
        mins, secs = divmod(int(self.elapsed), 60)
        step = f" · {self.current}" if self.current else ""
        return f"{stack} {self.status} · {self.done}/{self.total} resources · {mins:02d}:{secs:02d}{step}"


def event_line(e: dict[str, Any], path: str) -> str:
    ts = e["Timestamp"]
    stamp = ts.strftime("%H:%M:%S") if isinstance(ts, dt.datetime) else str(ts)
    reason = " ".join(str(e.get("ResourceStatusReason") or "").split())
    where = path if e.get("LogicalResourceId") in ("", None) else f"{path}/{e['LogicalResourceId']}"
    if e.get("PhysicalResourceId") == e.get("StackId"):
        where = path
    return f"{stamp} {where} {e.get('ResourceStatus', '')}" + (f": {reason}" if reason else "")


class Follower:
    """Polls the stack tree; ``poll()`` returns a Snapshot, ``run()`` loops until the root is terminal."""

    def __init__(self, cfn: Any, stack: str, operation: str = "create", poll_seconds: float = 5.0,
                 started: float | None = None, expected_total: int | None = None, name: str | None = None) -> None:
        self.cfn = cfn
        self.stack = stack  # the stack id (ARN) stays valid after deletion; the name does not
        self.name = name or stack
        self.operation = operation if operation in DONE else "create"
        self.poll_seconds = poll_seconds
        self.started = started or time.time()
        self.since: dt.datetime | None = None  # set from the root's own events on the first poll
        self.expected_total = expected_total
        self._seen: set[str] = set()
        self._totals: dict[str, int | None] = {}

    def _total_for(self, stack_id: str, listed: int) -> int:
        if stack_id not in self._totals:
            self._totals[stack_id] = template_resource_count(self.cfn, stack_id)
        known = self._totals[stack_id]
        return max(known or 0, listed)

    def _operation_start(self) -> dt.datetime:
        """When the operation began by AWS's clock (a laptop clock may be off); else our start minus a minute."""
        try:
            page = self.cfn.describe_stack_events(StackName=self.stack).get("StackEvents", [])
            start = operation_start(sorted(page, key=lambda e: e["Timestamp"]))
        except Exception:  # noqa: BLE001 - best effort
            start = None
        return start or dt.datetime.fromtimestamp(self.started - 60, tz=dt.timezone.utc)

    def poll(self) -> Snapshot:
        if self.since is None:
            self.since = self._operation_start()
        info = describe(self.cfn, self.stack)
        tree = stack_tree(self.cfn, info.stack_id, label=self.name)
        done_states = DONE[self.operation]
        done = total = 0
        current = ""
        latest: Any = None
        new: list[dict[str, Any]] = []
        for node in tree:
            total += self._total_for(node.stack_id, len(node.resources))
            for res in node.resources:
                status = res.get("ResourceStatus", "")
                if status in done_states:
                    done += 1
                elif status.endswith("_IN_PROGRESS") and res.get("ResourceType") != NESTED_TYPE:
                    stamp = res.get("LastUpdatedTimestamp")
                    if latest is None or (stamp and stamp > latest):
                        latest = stamp
                        current = f"{node.path}/{res['LogicalResourceId']} {status}"
            new.extend(self._new_events(node.stack_id, node.path))
        if self.expected_total and self.operation == "create":
            total = max(total, self.expected_total)
        if self.operation == "delete" or is_terminal(info.status):
            # conditional resources that were never created must not leave a finished bar at 42/48
            total = max(done, sum(len(n.resources) for n in tree)) if is_terminal(info.status) else max(total, done)
        new.sort(key=lambda e: e["Timestamp"])
        return Snapshot(info.status, done, total, time.time() - self.started, current, new)

    def _new_events(self, stack_id: str, path: str) -> list[dict[str, Any]]:
        try:
            page = self.cfn.describe_stack_events(StackName=stack_id).get("StackEvents", [])
        except Exception:  # noqa: BLE001 - events are best effort while following
            return []
        out = []
        for e in page:
            if e["EventId"] in self._seen or (self.since and e["Timestamp"] < self.since):
                continue
            self._seen.add(e["EventId"])
            e = dict(e, _path=path)
            out.append(e)
        return out

    def run(self, console: Any = None, verbose: bool | None = None) -> Snapshot:
        """Follow until the root stack is terminal; print events above a live status line."""
        from rich.console import Console
        from rich.live import Live
        from rich.spinner import Spinner

        console = console or Console(stderr=True, soft_wrap=True)
        if verbose is None:
            verbose = not console.is_terminal
        try:
            snap = self.poll()  # the first poll reads every nested template: Ctrl-C may well land here
            with Live(Spinner("dots", snap.line(self.name)), console=console, transient=True,
                      refresh_per_second=4) as live:
                while True:
                    for e in snap.new_events:
                        failed = str(e.get("ResourceStatus", "")).endswith("_FAILED")
                        nested_done = e.get("ResourceType") == NESTED_TYPE and is_terminal(e.get("ResourceStatus", ""))
                        if verbose or failed or nested_done:
                            style = "red" if failed else None
                            console.print(event_line(e, e["_path"]), style=style, highlight=False, markup=False)
                    live.update(Spinner("dots", snap.line(self.name)))
                    if is_terminal(snap.status):
                        break
                    time.sleep(self.poll_seconds)
                    snap = self.poll()
        except KeyboardInterrupt:
            region = getattr(getattr(self.cfn, "meta", None), "region_name", None)
            resume = f"hpq status {self.name} --follow" + (f" --region {region}" if region else "")
            raise Interrupted(f"stopped following; the stack operation continues. Resume with: {resume}") from None
        console.print(snap.line(self.name), highlight=False, markup=False)
        return snap
