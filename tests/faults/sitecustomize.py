"""Test-only fault injection: prove that a check sees the fault it exists for.

Never shipped to nodes and never read by hpq: a test puts this folder first on PYTHONPATH of one
interpreter only, so Python imports this file at start-up. Two faults, each off unless its variable is set:

- HPQ_TEST_FAULT_CORRUPT_ALLREDUCE=SIZE:RANK (set by tests.faults.python_with_corruption's wrapper for
  ``--python``): once ``torch.distributed`` is imported, ``all_reduce`` on rank RANK gets one element of
  the first tensor of SIZE bytes altered after the real collective ran, as a faulty link or GPU would.
- HPQ_TEST_FAULT_INHERIT_ENV=1: once ``hpq.scripts.launch`` is imported, its ``child_env`` merges the
  launching process's transport variables again instead of removing them (hpq before issue 19), so a
  controller's ``NCCL_NET_PLUGIN=none`` reaches the ranks: the twin that the job's environment check
  and the rehearsal must fail.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

_SPEC = os.environ.get("HPQ_TEST_FAULT_CORRUPT_ALLREDUCE", "")


def _wrap(dist) -> None:  # type: ignore[no-untyped-def]
    size_txt, _, rank_txt = _SPEC.partition(":")
    size, rank = int(size_txt), int(rank_txt or 0)
    done: set = set()
    real = dist.all_reduce

    def all_reduce(tensor, *args, **kwargs):  # type: ignore[no-untyped-def]
        result = real(tensor, *args, **kwargs)
        nbytes = tensor.numel() * tensor.element_size()
        if nbytes == size and nbytes not in done and dist.get_rank() == rank:
            done.add(nbytes)
            tensor.view(-1)[tensor.numel() // 2] += 1
        return result

    dist.all_reduce = all_reduce


def _inherit_env(launch) -> None:  # type: ignore[no-untyped-def]
    real = launch.child_env

    def child_env(extra=None, path_prepend=(), inherit_transport=False):  # type: ignore[no-untyped-def]
        return real(extra, path_prepend, inherit_transport=True)

    launch.child_env = child_env


class _AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, wrap) -> None:  # type: ignore[no-untyped-def]
        self.name, self.wrap = name, wrap

    def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        load = spec.loader.exec_module
        wrap = self.wrap

        def exec_module(module):  # type: ignore[no-untyped-def]
            load(module)
            wrap(module)

        spec.loader.exec_module = exec_module
        return spec


if _SPEC:
    sys.meta_path.insert(0, _AfterImport("torch.distributed", _wrap))
if os.environ.get("HPQ_TEST_FAULT_INHERIT_ENV"):
    sys.meta_path.insert(0, _AfterImport("hpq.scripts.launch", _inherit_env))
if os.environ.get("COVERAGE_PROCESS_CONFIG"):  # this file shadows the coverage start-up one (conftest.py)
    try:
        import coverage

        coverage.process_startup()
    except ImportError:
        pass
