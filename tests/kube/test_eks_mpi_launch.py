"""The rendered MPIJob launcher commands, run as the launcher pod runs them, against real sshd workers.

Real: Open MPI 4.1 (Debian's openmpi-bin), OpenSSH sshd and ssh, /bin/sh, getent. Stand-ins (said per
test): the "image" tree (Open MPI under a prefix as in AWS's images; tests/kube/mpi_world.py), the benchmark
binaries (a script that prints what each rank received), and the hostfile mpi-operator would mount
(in mpi-operator's format; the service names resolve through an /etc/hosts in the launcher's mount
namespace). The worker sshd has sshd's PATH and no Open MPI on it, which is what makes a bare
``mpirun`` fail in a real worker pod.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from hpq.manifests import render
from hpq.manifests.render import RenderRequest, render_objects
from tests.kube.mpi_world import MpiWorld

pytestmark = pytest.mark.slow


def launcher(obj: dict) -> dict:
    return obj["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]


def operator_env(hostfile: Path, world: MpiWorld) -> dict[str, str]:
    """The variables mpi-operator v0.5.0 adds to an OpenMPI launcher (pkg/controller/mpi_job_controller.go
    ompiEnvVars), with the workers' port and key added to the ssh arguments."""
    return {"OMPI_MCA_orte_keep_fqdn_hostnames": "true", "OMPI_MCA_orte_default_hostfile": str(hostfile),
            "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10 " + world.rsh_args(), "K_MPI_JOB_ROLE": "launcher"}


def gpu_launch(world: MpiWorld, tmp_path: Path, bare_mpirun: bool = False) -> subprocess.CompletedProcess:
    """Render nccl-test for 2 x g5.48xlarge (2 GPUs each), map the image's paths to the test tree, run it."""
    mpi = render_objects(RenderRequest("nccl-test", "ml.g5.48xlarge", nodes=2, gpus=2))[0]
    c = launcher(mpi)
    bench = tmp_path / "opt/nccl-tests/build/all_reduce_perf"
    bench.parent.mkdir(parents=True, exist_ok=True)
    bench.write_text('#!/bin/sh\necho "hpq-rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE on '
                     '$(cat /proc/sys/kernel/hostname) FI_PROVIDER=$FI_PROVIDER NCCL_DEBUG=$NCCL_DEBUG args $*"\n')
    bench.chmod(0o755)
    hostfile = tmp_path / "hostfile"  # mpi-operator's OpenMPI format
    hostfile.write_text("".join(f"{h} slots=2\n" for h in world.worker_names(mpi["metadata"]["name"])))
    paths = {render.MPIRUN: str(world.prefix / "bin/mpirun"), render.NCCL_TESTS_BINARY: str(bench)}
    cmd = [paths.get(a, a) for a in c["command"]]
    if bare_mpirun:
        cmd[3] = "mpirun"
    env = {e["name"]: e["value"] for e in c["env"]}
    env.update(operator_env(hostfile, world))
    # the image's ENV: its Open MPI first on PATH, libraries on LD_LIBRARY_PATH
    env["PATH"] = f"{world.prefix / 'bin'}:/usr/local/bin:/usr/bin:/bin"
    env["LD_LIBRARY_PATH"] = str(world.prefix / "lib")
    env["HOME"] = os.environ.get("HOME", "/root")
    return subprocess.run(world.launcher_command(cmd, mpi["metadata"]["name"], tmp_path), env=env,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)


def test_launcher_mpirun_starts_ranks_on_sshd_workers(mpi_world, tmp_path):
    """The launcher command as rendered: the DNS wait, then mpirun by absolute path; orted starts on both
    workers, four ranks run, and every forwarded variable (-x) reaches them."""
    res = gpu_launch(mpi_world, tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    ranks = sorted(ln for ln in res.stdout.splitlines() if ln.startswith("hpq-rank"))
    assert [ln.split()[1] for ln in ranks] == ["0", "1", "2", "3"], res.stdout
    assert all("of 4" in ln and "FI_PROVIDER=efa" in ln and "NCCL_DEBUG=INFO" in ln for ln in ranks), ranks
    assert all("args -b 8 -e 2G -f 2 -g 1 -c 1 -n 20" in ln for ln in ranks)


def test_bare_mpirun_fails_as_in_a_worker_pod(mpi_world, tmp_path):
    """The old manifest's bare "mpirun" (found on the image PATH): Open MPI starts "orted" by name over ssh,
    and sshd's PATH does not have it. This is the failure the absolute path avoids."""
    res = gpu_launch(mpi_world, tmp_path, bare_mpirun=True)
    assert res.returncode != 0
    assert "orted: command not found" in res.stdout + res.stderr


def test_trainium_launcher_runs_nccom_on_the_first_worker(mpi_world, tmp_path):
    """The Trainium launcher script with real sh, getent and ssh against the sshd worker. Stand-ins: nccom-test
    (prints where it runs and what it got) under the image's /opt/aws/neuron/bin, and an ``ssh`` on PATH that
    adds the workers' port and key and then runs the real ssh."""
    mpi = render_objects(RenderRequest("nccl-test", "ml.trn1.32xlarge", nodes=2))[0]
    c = launcher(mpi)
    neuron_bin = tmp_path / "opt/aws/neuron/bin"
    neuron_bin.mkdir(parents=True)
    (neuron_bin / "nccom-test").write_text(
        '#!/bin/sh\necho "nccom-test on $(cat /proc/sys/kernel/hostname) root=$NEURON_RT_ROOT_COMM_ID '
        'FI_PROVIDER=$FI_PROVIDER OMPI_ALLOW_RUN_AS_ROOT=$OMPI_ALLOW_RUN_AS_ROOT args $*"\n')
    (neuron_bin / "nccom-test").chmod(0o755)
    shim = tmp_path / "bin/ssh"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec /usr/bin/ssh {mpi_world.rsh_args()} "$@"\n')
    shim.chmod(0o755)
    hostfile = tmp_path / "hostfile"
    names = mpi_world.worker_names(mpi["metadata"]["name"])
    hostfile.write_text("".join(f"{h} slots=32\n" for h in names))
    script = c["command"][2].replace(render.NEURON_BIN, str(neuron_bin))
    env = {e["name"]: e["value"] for e in c["env"]} | operator_env(hostfile, mpi_world)
    env |= {"PATH": f"{shim.parent}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")}
    res = subprocess.run(mpi_world.launcher_command(["/bin/sh", "-c", script], mpi["metadata"]["name"], tmp_path),
                         env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("nccom-test on"))
    first, second = mpi_world.hosts
    assert f"root={first}:{render.NEURON_ROOT_COMM_PORT}" in line
    assert "FI_PROVIDER=efa" in line and "OMPI_ALLOW_RUN_AS_ROOT=1" in line
    assert "-r 64 -N 2 -b 8 -e 2G" in line and line.endswith(f"--hosts {first} {second} allr")



def test_neuron_worker_environment_for_ssh_sessions(tmp_path):
    """The Neuron worker writes the container's transport and library variables for pam_env before sshd
    starts; run with its output sent to a file instead of /etc/environment."""
    mpi = render_objects(RenderRequest("nccl-test", "ml.trn1.32xlarge", nodes=2))[0]
    cmd = mpi["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"]
    assert cmd[:2] == ["/bin/sh", "-c"] and cmd[2].endswith("exec /usr/sbin/sshd -De")
    out = tmp_path / "environment"
    part = cmd[2].split(";")[0].replace("/etc/environment", str(out))
    env = {"PATH": "/opt/aws/neuron/bin:/usr/bin:/bin", "LD_LIBRARY_PATH": "/opt/aws/neuron/lib",
           "FI_PROVIDER": "efa", "OMPI_ALLOW_RUN_AS_ROOT": "1", "HOSTNAME": "w0", "SECRET_TOKEN": "x"}
    subprocess.run(["/bin/sh", "-c", part], env=env, check=True, timeout=30)
    lines = set(out.read_text().splitlines())
    assert {"PATH=/opt/aws/neuron/bin:/usr/bin:/bin", "LD_LIBRARY_PATH=/opt/aws/neuron/lib", "FI_PROVIDER=efa",
            "OMPI_ALLOW_RUN_AS_ROOT=1"} <= lines
    assert not any(ln.startswith(("HOSTNAME=", "SECRET_TOKEN=")) for ln in lines)
