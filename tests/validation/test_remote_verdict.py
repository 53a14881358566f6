"""``hpq remote-nccl-test``'s verdict (validation/judges.bandwidth): the run-nccl-test output captured over SSH,
judged here by the same checks, combined with the node's own exit status (PASS 0, FAIL 1, INCONCLUSIVE 3)."""

from __future__ import annotations

import json

from hpq.scripts import outcome
from hpq.validation.judges import bandwidth
from tests.nccl_logs import allreduce_log, efa_info, socket_info

P5 = "ml.p5.48xlarge"
HOSTS = ["p5-a", "p5-b"]
HEALTHY = allreduce_log(HOSTS, 8, 480.0, nccl_info=efa_info("p5-a"))


def test_healthy_output_and_the_remote_status():
    data, code, message = bandwidth(HEALTHY, P5, 0)
    assert code == 0 and message.startswith("PASS: ") and data["outcome"] == "PASS"
    json.loads(outcome.dumps(data))
    _, code, message = bandwidth(HEALTHY, P5, 3)  # the node said INCONCLUSIVE: never a local PASS
    assert code == 3 and message.startswith("INCONCLUSIVE: ")
    data, code, message = bandwidth(HEALTHY, P5, 1)  # the run failed on the cluster
    assert code == 1 and message.startswith("FAIL: ") and data["verdict"]["outcome"] == "FAIL"


def test_no_rows():
    data, code, message = bandwidth("salloc: error: no nodes\n", P5, 1)
    assert code == 1 and message.startswith("FAIL: ") and data["outcome"] == "FAIL"
    data, code, message = bandwidth("nothing\n", P5, 0)
    assert code == 3 and message.startswith("INCONCLUSIVE: ")
    assert bandwidth("nothing\n", P5, 130)[1] == 130


def test_stand_in_network_waives_the_transport_only():
    """The rehearsal's veth bridge is no EFA: with stand_in_network the transport is not judged (and the node's
    FAIL for that reason alone is set aside); any other failure still fails."""
    sock = allreduce_log(HOSTS, 8, 3.0, nccl_info=socket_info("p5-a"))
    assert bandwidth(sock, P5, 1, 2, "none")[1] == 1
    data, code, message = bandwidth(sock, P5, 1, 2, "none", stand_in_network=True)
    assert code == 0, message
    assert data["verdict"]["checks"]["transport"]["outcome"] == outcome.NOT_JUDGED
    wrong = allreduce_log(HOSTS, 8, 3.0, nccl_info=socket_info("p5-a"), wrong=2)
    assert bandwidth(wrong, P5, 1, 2, "none", stand_in_network=True)[1] == 1
    crashed = sock + "\n  exit: FAIL: nccl-tests exited with status 3 (see the log)\n"
    assert bandwidth(crashed, P5, 1, 2, "none", stand_in_network=True)[1] == 1
    leaked = sock + ("FAIL: 1 environment difference(s) vs the worker type's transport environment: the job's "
                     "transport environment is not the worker type's: NCCL_NET_PLUGIN=none is set in the job\n")
    assert bandwidth(leaked, P5, 1, 2, "none", stand_in_network=True)[1] == 1  # a leak still fails
