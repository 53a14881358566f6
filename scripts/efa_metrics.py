"""EFA device counters under AWS's EFA exporter's names: ``python3 -m hpq.scripts.efa_metrics [--every 30]``.

The counters that show a sick EFA link (retransmit timeouts, unresponsive remotes, impaired connections) are in
the EFA kernel driver's ``hw_counters``, which the stock node_exporter does not read (its infiniband collector
reads only the InfiniBand counters). AWS's EFA exporter adds an ``amazonefa`` collector for them
(awslabs/awsome-distributed-ai 4.validation_and_observability/3.efa-node-exporter/amazon_efa_linux.go and
class_amazon_efa.go), which AWS's Slurm observability runs as an image that exists only in HyperPod's ECR
registry (install_efa_exporter.sh, ``hyperpod/efa_exporter:1.0.0``; no public digest). hpq writes the same
series itself into node_exporter's textfile directory, read the same way:
- every device under ``/sys/class/infiniband``, every numbered port under ``<device>/ports``, each counter file
  in ``<port>/hw_counters`` of the 35 the collector names (a file that is absent or not a number is left out, as
  the collector leaves out a nil counter);
- ``node_amazonefa_<counter>{device, port}``, type counter, with the collector's help texts, and
  ``node_amazonefa_info{device}`` 1 per device.
One difference: hpq reads only devices bound to the ``efa`` driver (``<device>/device/driver``), the way
scripts/node_checks.py finds them, where the collector reads every RDMA device. ``hpq_efa_metrics_up`` is 1 when
at least one EFA device was read. Standard library only (the node's python3).
"""

from __future__ import annotations

import os
import sys
from typing import Optional, Sequence, Tuple

from hpq.scripts import metric_writer, node_checks
from hpq.scripts.metric_writer import Families

OUTPUT_NAME = "hpq_efa.prom"
SYS_ROOT = "/sys/class/infiniband"

# counter -> help text, as amazon_efa_linux.go describes each (its spelling kept, so the series read the same).
COUNTERS = {
    "alloc_pd_err": "Number of allocations PD errors",
    "alloc_ucontext_err": "Number of allocations UContext errors",
    "cmds_err": "Number of commands errors",
    "completed_cmds": "Number of completed commands",
    "create_ah_err": "Number of create AH errors",
    "create_cq_err": "Number of create CQ errors",
    "create_qp_err": "Number of create qp errors",
    "impaired_remote_conn_events": "Number of EFA SRD connections entered an impaired state, resulting in a "
                                   "reduced throughput rate limit.",
    "keep_alive_rcvd": "Number of keep-alive packets received",
    "lifespan": "Lifespan of the port",
    "mmap_err": "Number of mmap errors",
    "no_completion_cmds": "Number of commands with no completion",
    "rdma_read_bytes": "Number of bytes read with RDMA",
    "rdma_read_resp_bytes": "Number of read reponses bytes with RDMA",
    "rdma_read_wr_err": "Number of read write errors with RDMA",
    "rdma_read_wrs": "Number of read rs with RDMA",
    "rdma_write_bytes": "Number of bytes wrote with RDMA",
    "rdma_write_recv_bytes": "Number of bytes wrote and received with RDMA",
    "rdma_write_wr_err": "Number of bytes wrote wr with error RDMA",
    "rdma_write_wrs": "Number of bytes wrote wrs RDMA",
    "recv_bytes": "Number of bytes recv bytes",
    "recv_wrs": "Number of bytes recv wrs",
    "reg_mr_err": "Number of reg_mr errors",
    "retrans_bytes": "Number of efa_srd bytes retransmitted",
    "retrans_pkts": "Number of efa_srd packets retransmitted",
    "retrans_timeout_events": "Number of times SRD traffic reached timeout and required network path change",
    "rx_bytes": "Number of bytes received",
    "rx_drops": "Number of packets droped",
    "rx_pkts": "Number of packets received",
    "send_bytes": "Number of bytes send",
    "send_wrs": "Number of wrs send",
    "submitted_cmds": "Number of submitted commands",
    "tx_bytes": "Number of bytes transmitted",
    "tx_pkts": "Number of packets transmitted",
    "unresponsive_remote_events": "Number of times SRD connection remote was unresponsive",
}
INFO_HELP = "Non-numeric data from /sys/class/infiniband/<device>, value is always 1."
UP_HELP = "1 when hpq's EFA writer read at least one EFA device's counters, else 0."


def collect(sys_root: str = SYS_ROOT) -> Tuple[str, bool]:
    """(exposition text, whether any EFA device was read)."""
    fam = Families()
    devices = node_checks.efa_devices(sys_root)
    for device in devices:
        fam.add("node_amazonefa_info", INFO_HELP, {"device": device}, 1.0)
        ports_dir = os.path.join(sys_root, device, "ports")
        try:
            ports = sorted((p for p in os.listdir(ports_dir) if p.isascii() and p.isdigit()), key=int)
        except OSError:
            ports = []
        for port in ports:
            folder = os.path.join(ports_dir, port, "hw_counters")
            for counter, help_text in sorted(COUNTERS.items()):
                value = node_checks.read_counter(os.path.join(folder, counter))
                if value is not None:
                    fam.add("node_amazonefa_" + counter, help_text, {"device": device, "port": port},
                            float(value), kind="counter")
    if not devices:
        print("efa_metrics: no device under %s is bound to the efa driver" % sys_root, file=sys.stderr)
    fam.add("hpq_efa_metrics_up", UP_HELP, {}, 1.0 if devices else 0.0)
    return fam.render(), bool(devices)


def main(argv: Optional[Sequence[str]] = None) -> int:
    return metric_writer.main_loop("efa_metrics", "Write the EFA devices' hw_counters as Prometheus metrics.",
                                   OUTPUT_NAME, collect, argv)


if __name__ == "__main__":
    sys.exit(main())
