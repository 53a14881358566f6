"""Test-only fault injection for the built-in benchmark: corrupt one all-reduce result, prove the check sees it.

Never shipped to nodes and never read by hpq: a test puts this folder first on PYTHONPATH of the
benchmark's interpreter only (tests.faults.python_with_corruption writes a wrapper for ``--python``),
so Python imports this file at start-up. It waits until ``torch.distributed`` is imported, then
wraps ``all_reduce``: on rank RANK, the first call on a tensor of SIZE bytes gets one element
altered after the real collective ran, exactly what a faulty link or GPU would leave behind.
The spec comes from HPQ_TEST_FAULT_CORRUPT_ALLREDUCE=SIZE:RANK, set by that wrapper alone.
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


class _AfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
        if name != "torch.distributed":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        load = spec.loader.exec_module

        def exec_module(module):  # type: ignore[no-untyped-def]
            load(module)
            _wrap(module)

        spec.loader.exec_module = exec_module
        return spec


if _SPEC:
    sys.meta_path.insert(0, _AfterImport())
if os.environ.get("COVERAGE_PROCESS_CONFIG"):  # this file shadows the coverage start-up one (conftest.py)
    try:
        import coverage

        coverage.process_startup()
    except ImportError:
        pass
