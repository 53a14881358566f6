"""The lifecycle runs on Python 3.7, the python3 of Amazon Linux 2 (EKS nodes on an AL2 HyperPod AMI).

HyperPod released AL2 AMIs for EKS up to Kubernetes 1.32 ("SageMaker HyperPod AMI releases for Amazon EKS":
AL2 and AL2023 builds for 1.28-1.32, AL2023 only from 1.33), hpq sets no ImageId, and AWS's own EKS lifecycle
still has an AL2 branch (awsome-distributed-ai 1.architectures/7.sagemaker-hyperpod-eks/LifecycleScripts/
base-config/on_create_main.sh, ``os_version == "2"``). So on_create.sh accepts Python 3.7, and every lifecycle
module must keep to what 3.7 has.

Two guards, because CI cannot run 3.7 (no registry hpq installs from ships a 3.7 interpreter for the CI image, and
3.7 is past its end of life): (1) a static check of every lifecycle module, run everywhere: Python 3.7 grammar
(``ast.parse(feature_version=(3, 7))``: no walrus, no positional-only parameters, ...), no 3.8+ standard-library
names or keyword arguments (table below), no subscripted builtins such as ``list[str]`` outside annotations
(3.9+ at run time; annotations are strings under ``from __future__ import annotations``), no bare ``@lru_cache``
(3.8+); (2) where a real Python 3.7 exists (this dev machine: pyenv's 3.7.16, the version AL2 ships), the bundle
is byte-compiled by it and the EKS path (identify, nccl-env, fsx, eks-storage) and a Slurm worker's identify and
nccl-env run through on_create.sh on it, with the same stand-ins as tests/lifecycle/test_lifecycle_eks.py (AL2023's units:
only the interpreter is AL2's here). Where no 3.7
exists, (2) says so and checks (1) instead: it never passes on nothing.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest

from hpq.lifecycle import names
from tests import node_samples

REPO = Path(__file__).resolve().parents[2]
LIFECYCLE_FILES = sorted((REPO / "lifecycle").glob("*.py"))
PY37_CANDIDATES = ("/root/.pyenv/versions/3.7.16/bin/python3.7", "python3.7")

# Standard-library names that came after 3.7 (Python "What's New" 3.8 to 3.12), by module.
NEWER_NAMES = {
    "shlex": {"join"},
    "functools": {"cached_property", "singledispatchmethod", "cache"},
    "typing": {"Literal", "Protocol", "TypedDict", "Final", "final", "get_origin", "get_args", "SupportsIndex",
               "runtime_checkable", "Annotated", "ParamSpec", "TypeAlias", "Self", "TypeGuard"},
    "math": {"prod", "isqrt", "dist", "comb", "perm", "lcm", "nextafter", "ulp"},
    "statistics": {"fmean", "geometric_mean", "multimode", "quantiles", "NormalDist"},
    "importlib": {"metadata"},
    "os": {"memfd_create", "waitstatus_to_exitcode", "pidfd_open", "splice", "eventfd"},
    "sys": {"audit", "addaudithook", "unraisablehook"},
    "threading": {"excepthook", "get_native_id"},
    "socket": {"create_server", "has_dualstack_ipv6"},
    "random": {"randbytes"},
    "asyncio": {"to_thread"},
    "itertools": {"pairwise", "batched"},
    "contextlib": {"aclosing", "chdir"},
}
NEWER_MODULES = {"zoneinfo", "graphlib", "importlib.metadata", "tomllib", "multiprocessing.shared_memory"}
NEWER_METHODS = {"removeprefix", "removesuffix", "is_relative_to", "with_stem", "link_to", "bit_count",
                 "hardlink_to", "readlink_path"}
NEWER_KEYWORDS = {"dirs_exist_ok", "missing_ok", "root_dir"}  # shutil.copytree, Path.unlink, glob.glob
BUILTIN_GENERICS = {"list", "dict", "tuple", "set", "frozenset", "type"}


def _annotation_nodes(tree: ast.AST) -> set[int]:
    """ids of every node inside an annotation (strings at run time under the __future__ import)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        roots = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            roots.append(node.returns)
            args = node.args
            roots += [a.annotation for a in args.args + args.kwonlyargs + getattr(args, "posonlyargs", [])]
            roots += [a.annotation for a in (args.vararg, args.kwarg) if a is not None]
        elif isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
        for root in roots:
            if root is not None:
                inside |= {id(n) for n in ast.walk(root)}
    return inside


def py37_offences(src: str, filename: str = "<src>") -> list[str]:
    """What Python 3.7 would not run in ``src`` (SyntaxError for 3.8+ grammar)."""
    tree = ast.parse(src, filename=filename, feature_version=(3, 7))
    annotations = _annotation_nodes(tree)
    out = []
    aliases: dict[str, str] = {}  # local name -> module
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
                if a.name in NEWER_MODULES:
                    out.append(f"line {node.lineno}: import {a.name} (Python 3.8+)")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module in NEWER_MODULES:
                out.append(f"line {node.lineno}: from {node.module} import (Python 3.8+)")
            newer = NEWER_NAMES.get(node.module, set())
            out += [f"line {node.lineno}: from {node.module} import {a.name} (Python 3.8+)"
                    for a in node.names if a.name in newer]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.attr in NEWER_NAMES.get(aliases.get(node.value.id, ""), ()):
                out.append(f"line {node.lineno}: {node.value.id}.{node.attr} (Python 3.8+)")
            elif node.attr in NEWER_METHODS:
                out.append(f"line {node.lineno}: .{node.attr}() (Python 3.8+)")
        elif isinstance(node, ast.Call):
            out += [f"line {node.lineno}: keyword {k.arg}= (Python 3.8+)" for k in node.keywords
                    if k.arg in NEWER_KEYWORDS]
        elif isinstance(node, ast.Subscript) and id(node) not in annotations:
            if isinstance(node.value, ast.Name) and node.value.id in BUILTIN_GENERICS:
                out.append(f"line {node.lineno}: {node.value.id}[...] outside an annotation (Python 3.9+)")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for dec in node.decorator_list:
                name = dec.attr if isinstance(dec, ast.Attribute) else getattr(dec, "id", "")
                if name == "lru_cache":
                    out.append(f"line {dec.lineno}: bare @lru_cache (Python 3.8+; write @lru_cache())")
    # The f-string "=" specifier (3.8) leaves no trace in the tree: look for it in the text of f-strings.
    for match in re.finditer(r"""\bf(?:r|R)?(["'])(?:(?!\1).)*\{[^{}]*?[^=!<>]=\s*(?:![rsa])?(?::[^{}]*)?\}""", src):
        out.append(f"line {src[:match.start()].count(chr(10)) + 1}: f-string '=' specifier (Python 3.8+)")
    return out


@pytest.mark.parametrize("path", LIFECYCLE_FILES, ids=lambda p: p.name)
def test_lifecycle_module_keeps_to_python37(path):
    assert py37_offences(path.read_text(), str(path)) == []


def test_the_python37_checker_catches_what_it_should():
    head = "from __future__ import annotations\n"
    assert py37_offences(head + "import os\nx: list[str] = []\ndef f(a: dict[str, int]) -> tuple[int]:\n    pass\n") == []
    with pytest.raises(SyntaxError):
        py37_offences(head + "if (n := 3):\n    pass\n")
    with pytest.raises(SyntaxError):
        py37_offences(head + "def f(a, /):\n    pass\n")
    assert py37_offences(head + "import shlex\nshlex.join(['a'])\n") == ["line 3: shlex.join (Python 3.8+)"]
    assert py37_offences(head + "from typing import Literal\n") == [
        "line 2: from typing import Literal (Python 3.8+)"]
    assert py37_offences(head + "import functools as ft\n@ft.cached_property\ndef f():\n    pass\n") == [
        "line 3: ft.cached_property (Python 3.8+)"]
    assert py37_offences(head + "import math\nmath.prod([1])\n") == ["line 3: math.prod (Python 3.8+)"]
    assert py37_offences(head + "'ab'.removeprefix('a')\n") == ["line 2: .removeprefix() (Python 3.8+)"]
    assert py37_offences(head + "import shutil\nshutil.copytree('a', 'b', dirs_exist_ok=True)\n") == [
        "line 3: keyword dirs_exist_ok= (Python 3.8+)"]
    assert py37_offences(head + "x = list[str]\n") == ["line 2: list[...] outside an annotation (Python 3.9+)"]
    assert py37_offences(head + "from functools import lru_cache\n@lru_cache\ndef f():\n    pass\n") == [
        "line 3: bare @lru_cache (Python 3.8+; write @lru_cache())"]
    try:  # the parser refuses it at feature_version (3, 7) (3.11 does); else the text check finds it
        found = py37_offences(head + "x = 1\ny = f'{x=}'\n")
    except SyntaxError:
        found = ["line 3: f-string '=' specifier (Python 3.8+)"]
    assert found == ["line 3: f-string '=' specifier (Python 3.8+)"]
    assert py37_offences(head + "x = 1\ny = f'{x}={x!r} {x == 1}'\n") == []


def python37() -> str | None:
    for candidate in PY37_CANDIDATES:
        path = candidate if os.path.isabs(candidate) else shutil.which(candidate)
        if path and os.access(path, os.X_OK):
            out = subprocess.run([path, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                                 text=True)
            if out.stdout.strip() == "(3, 7)":
                return path
    return None


def _without_python37() -> None:
    warnings.warn("no Python 3.7 interpreter here: checked the lifecycle statically for 3.7 instead of running it",
                  stacklevel=2)
    for path in LIFECYCLE_FILES:
        assert py37_offences(path.read_text(), str(path)) == []


def _eks_root(tmp_path: Path) -> Path:
    root = tmp_path / "node"
    node_samples.write_json(root / "opt/ml/config/resource_config.json", node_samples.eks_resource_config())
    units = root / "usr/lib/systemd/system"
    units.mkdir(parents=True)
    (units / "containerd.service").write_text(node_samples.AL2023_CONTAINERD_UNIT)
    (units / "kubelet.service").write_text(node_samples.AL2023_KUBELET_UNIT)
    (root / "var/lib/containerd").mkdir(parents=True)
    (root / "var/lib/kubelet").mkdir(parents=True)
    (root / "var/lib/kubelet/kubeconfig").write_text("apiVersion: v1\nkind: Config\n")
    (root / "proc").mkdir()
    (root / "proc/mounts").write_text(node_samples.BASE_MOUNTS + "/dev/nvme1n1 /opt/sagemaker xfs rw,noatime 0 0\n")
    (root / "opt/sagemaker").mkdir(parents=True)
    (root / "etc").mkdir(parents=True)
    (root / "etc/os-release").write_text('NAME="Amazon Linux"\nVERSION="2"\nID="amzn"\nVERSION_ID="2"\n'
                                         'PRETTY_NAME="Amazon Linux 2"\n')
    return root


def test_eks_path_runs_on_python37(tmp_path, imds_factory):
    py = python37()
    if py is None:
        _without_python37()
        return
    entry = node_samples.build_bundle(tmp_path / "bucket/lifecycle")
    compiled = subprocess.run([py, "-m", "compileall", "-q", str(entry.parent / "hpq")], capture_output=True,
                              text=True)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr  # every module of the bundle parses on 3.7
    root = _eks_root(tmp_path)
    node_samples.write_recorder(tmp_path / "modprobe")
    iid = list(node_samples.EKS_NODES)[0]
    srv = imds_factory({"": node_samples.imds_answers(iid, "g5.48xlarge")})
    env = dict(HPQ_ROOT=str(root), HPQ_IMDS_URL=srv.url, HPQ_SYSTEMCTL_CMD=node_samples.systemctl_standin_for(root), HPQ_PYTHON=py,
               HPQ_MODPROBE_CMD=str(tmp_path / "modprobe"))
    res = node_samples.run_on_create(entry, env, "--steps", "identify,nccl-env,fsx,eks-storage")
    assert res.returncode == 0, res.stdout + res.stderr
    for step in ("identify", "nccl-env", "fsx", "eks-storage"):
        assert f"step {step}: done" in res.stdout, res.stdout
    info = json.loads((root / names.NODE_INFO.lstrip("/")).read_text())
    assert (info["role"], info["orchestrator"]) == ("worker", "eks")
    assert (root / "var/lib/kubelet").is_symlink()
    again = node_samples.run_on_create(entry, env, "--steps", "identify,nccl-env,fsx,eks-storage")
    assert again.returncode == 0, again.stdout + again.stderr


def test_slurm_worker_identity_runs_on_python37(tmp_path, imds_factory):
    py = python37()
    if py is None:
        _without_python37()
        return
    entry = node_samples.build_bundle(tmp_path / "bucket/lifecycle")
    root = tmp_path / "node"
    node_samples.write_json(root / "opt/ml/config/resource_config.json", node_samples.slurm_resource_config())
    node_samples.write_json(entry.parent / names.HPQ_CLUSTER_CONFIG, node_samples.hpq_cluster_config())
    iid = node_samples.SLURM_NODES[node_samples.WORKER_GROUP + "-1"][0]
    srv = imds_factory({"": node_samples.imds_answers(iid, "p5.48xlarge")})
    env = dict(HPQ_ROOT=str(root), HPQ_IMDS_URL=srv.url, HPQ_SYSTEMCTL_CMD=node_samples.systemctl_standin_for(root), HPQ_PYTHON=py)
    res = node_samples.run_on_create(entry, env, "--steps", "identify,nccl-env")
    assert res.returncode == 0, res.stdout + res.stderr
    info = json.loads((root / names.NODE_INFO.lstrip("/")).read_text())
    assert (info["role"], info["orchestrator"]) == ("worker", "slurm")
