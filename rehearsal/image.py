"""The node "image": what a HyperPod AMI has that this host's Debian lacks, laid on each node at boot.

Stand-in for the AMI (and for systemd's boot-time work, since there is no systemd here):

- ``systemctl`` first on the node's PATH (``/usr/local/sbin``): hpq's systemctl stand-in
  (standins/systemctl.py), which the lifecycle's service manager calls as it calls systemd's on a node;

- Slurm where HyperPod keeps it: ``/opt/slurm/{bin,sbin,etc}`` (links to Debian's 22.05 binaries;
  ``/etc/slurm`` points at ``/opt/slurm/etc`` so Debian's binaries read HyperPod's config path);
- the runtime directories systemd would create (``RuntimeDirectory=``: /run/munge, /run/sshd,
  /run/slurm) and Slurm's spool and log directories;
- the default user ``ubuntu`` with the rehearsal's public key (what a user adds to reach the
  controller), a per-node SSH host key, and sshd running: the AMI's ssh.service, started at boot by
  ``systemctl start ssh.service`` (the stand-in, as systemd starts the enabled unit at boot), so a later
  reload of it (the host-certs step) reaches the running sshd;
- one MUNGE key, the same on every node (HyperPod gives every node of a cluster the same key);
- a PyTorch environment at /opt/conda/envs/pytorch (the DLAMI path ``run-nccl-test`` looks in),
  running the Python that runs hpq when it has torch; the AWS CLI from hpq's environment;
- /etc/hosts for every node and the FSx DNS name (the VPC's DNS), /etc/resolv.conf pointing at
  systemd-resolved's stub address, as on a HyperPod node (nothing answers there: names outside
  /etc/hosts fail fast instead of waiting for the host's resolver);
- /sbin/mount.lustre: the FSx client stand-in (``fsx.MOUNT_LUSTRE``), so the lifecycle's plain
  ``mount -t lustre`` goes through mount(8) as on a node with the Lustre client.
"""

from __future__ import annotations

import shlex
import sys

from hpq.rehearsal.node import Node, host_aws_cli
from hpq.standins import systemctl

SLURM_CLIENTS = ("sinfo", "squeue", "srun", "sbatch", "salloc", "scontrol", "scancel", "sacct", "sstat", "sattach",
                 "sbcast", "sprio", "sshare", "sdiag")
SLURM_DAEMONS = ("slurmd", "slurmctld", "slurmstepd")
TORCH_ENV = "/opt/conda/envs/pytorch"
DEFAULT_USER = "ubuntu"
SYSTEMCTL = "/usr/local/sbin/systemctl"  # first on node.NODE_PATH, before Debian's /usr/bin/systemctl

BOOT = r"""set -eu
rm -rf /etc/slurm
mkdir -p /opt/slurm/bin /opt/slurm/sbin /opt/slurm/etc /opt/ml/config
ln -sfn /opt/slurm/etc /etc/slurm
for b in {clients}; do if [ -x /usr/bin/$b ]; then ln -sfn /usr/bin/$b /opt/slurm/bin/$b; fi; done
for b in {daemons}; do if [ -x /usr/sbin/$b ]; then ln -sfn /usr/sbin/$b /opt/slurm/sbin/$b; fi; done
mkdir -p /run/munge /run/slurm /run/sshd /var/spool/slurmd /var/spool/slurmctld /var/log/slurm \
    /var/log/munge /var/lib/munge
chmod 755 /run/munge /run/sshd /run/slurm
id {user} >/dev/null 2>&1 || useradd --create-home --user-group --shell /bin/bash {user}
usermod --password '*' {user}
rm -f /etc/ssh/ssh_host_*
ssh-keygen -q -t ed25519 -N '' -C "$(hostname)" -f /etc/ssh/ssh_host_ed25519_key
""".format(clients=" ".join(SLURM_CLIENTS), daemons=" ".join(SLURM_DAEMONS), user=DEFAULT_USER)

SSHD_CONFIG = """# hpq rehearse: the node image's sshd settings (the Debian defaults otherwise)
HostKey /etc/ssh/ssh_host_ed25519_key
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
UseDNS no
"""


def wrapper(target: str) -> str:
    return f"#!/bin/sh\nexec {shlex.quote(target)} \"$@\"\n"


def hosts_file(entries: list[tuple[str, str]]) -> str:
    lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback",
             "# hpq rehearse: the VPC's DNS for this cluster"]
    lines += [f"{addr} {name}" for addr, name in entries]
    return "\n".join(lines) + "\n"


def boot(node: Node, hosts: list[tuple[str, str]], munge_key: bytes, user_public_key: str,
         torch_python: str | None, mount_lustre: str, seed_mounts: str) -> None:
    """Lay the image on a freshly created node and start what the AMI starts (sshd)."""
    node.sh(BOOT)
    node.write("/etc/hostname", node.spec.hostname + "\n")
    node.write("/etc/hosts", hosts_file(hosts))
    node.write("/etc/resolv.conf", "nameserver 127.0.0.53\noptions edns0 trust-ad timeout:1 attempts:1\n")
    node.write("/etc/munge/munge.key", munge_key, 0o400, "munge:munge")
    node.write("/etc/ssh/sshd_config.d/hpq-rehearse.conf", SSHD_CONFIG)
    node.write(f"/home/{DEFAULT_USER}/.ssh/authorized_keys", user_public_key.strip() + "\n", 0o600,
               f"{DEFAULT_USER}:{DEFAULT_USER}")
    node.sh(f"chmod 700 /home/{DEFAULT_USER}/.ssh && chown {DEFAULT_USER}: /home/{DEFAULT_USER}/.ssh")
    aws = host_aws_cli()  # node.host_tmp_dirs keeps it visible when it lives under /tmp
    if aws:
        node.write("/usr/local/bin/aws", wrapper(aws), 0o755)
    if torch_python:
        node.write(f"{TORCH_ENV}/bin/python3", wrapper(torch_python), 0o755)
        node.sh(f"ln -sfn python3 {TORCH_ENV}/bin/python")
    node.write("/usr/sbin/mount.lustre", mount_lustre, 0o755)
    node.sh(seed_mounts)
    # No systemd here: the systemctl stand-in, first on the node's PATH (node.NODE_PATH), answers the lifecycle's
    # systemctl calls; it starts ssh.service as systemd starts the AMI's enabled unit at boot.
    node.write(SYSTEMCTL, systemctl.shim_text("/", sys.executable), 0o755)
    node.run(["systemctl", "start", "ssh.service"], timeout=60)
