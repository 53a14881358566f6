"""Test-only: a rehearsal whose controller leaks its environment into jobs (the broken twin of issue 19's check).

Run as ``python -m tests.rehearse_leak INSTANCE_TYPE`` (root, like ``hpq rehearse``); prints the
rehearsal's JSON and exits with its code. Just before the NCCL stage it lays a profile file on the
controller, as an earlier hpq (or an admin) did: ``NCCL_NET_PLUGIN=none`` for every login shell, and
tests/faults on PYTHONPATH with ``HPQ_TEST_FAULT_INHERIT_ENV=1``, which makes run-nccl-test's launcher
merge the inherited transport variables again as hpq did before issue 19. Real srun then carries the
variable into the ranks on the workers, and the rehearsal must fail. Nothing in lifecycle/, scripts/
or cli/ knows about it: it uses the rehearsal's own node API (``Node.write``) from here.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hpq.rehearsal import report
from hpq.rehearsal.run import Options, Rehearsal

FAULTS = Path(__file__).resolve().parent / "faults"
LEAK_PROFILE = "/etc/profile.d/zz-hpq-test-leak.sh"
LEAK = (f"export NCCL_NET_PLUGIN=none\nexport PYTHONPATH={FAULTS}\nexport HPQ_TEST_FAULT_INHERIT_ENV=1\n")


class ControllerLeaks(Rehearsal):
    def run_nccl(self) -> None:
        assert self.plan is not None and self.plan.controller is not None
        self.nodes[self.plan.controller.name].write(LEAK_PROFILE, LEAK)
        self.say("fault", f"controller: {LEAK_PROFILE} exports NCCL_NET_PLUGIN=none, launcher merges (tests/faults)")
        super().run_nccl()


def main(argv: list[str]) -> int:
    opts = Options(instance_type=argv[0] if argv else "ml.p5.48xlarge")
    result, code = ControllerLeaks(opts).execute()
    report.emit(result, "json")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
