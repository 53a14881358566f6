"""Whole numbers and seconds: counts of nodes, GPUs, instances, ports, GiB; FSx capacity steps."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import click

from hpq.lifecycle import catalog
from hpq.manifests.render import MAX_NODES
from hpq.text import show
from hpq.vocab import FSX_MAX_GIB, FSX_MIN_GIB, FSX_RULE, fsx_capacity_ok

FSX_CAPACITY_MAX = FSX_MAX_GIB  # fsx StorageCapacity
MAX_INSTANCES = 6758  # sagemaker ClusterInstanceCount
EBS_GIB_MAX = 16384  # sagemaker ClusterEbsVolumeConfig.VolumeSizeInGB


def _max_test_nodes() -> int:
    return MAX_NODES


def _max_accelerators() -> int:
    return max(e.accelerator_count for e in catalog.CATALOG.values())


class Count(click.ParamType):
    """A whole number in a range; the error says what it counts and the range."""

    name = "integer"

    def __init__(self, lo: int, hi: int | Callable[[], int], what: str) -> None:
        self.lo, self._hi, self.what = lo, hi, what

    @property
    def hi(self) -> int:
        return self._hi() if callable(self._hi) else self._hi

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, bool):
            self.fail(f"{show(value)} is not a whole number ({self.what})", param, ctx)
        if isinstance(value, str):
            if not re.fullmatch(r"\s*[+-]?[0-9]{1,30}\s*", value):
                self.fail(f"{show(value)} is not a whole number ({self.what})", param, ctx)
            value = int(value)
        if not isinstance(value, int):
            self.fail(f"{show(value)} is not a whole number ({self.what})", param, ctx)
        if not self.lo <= value <= self.hi:
            self.fail(f"{value} is out of range {self.lo}-{self.hi} ({self.what})", param, ctx)
        return value


NODES = Count(1, MAX_INSTANCES, "nodes")
TEST_NODES = Count(1, _max_test_nodes, "nodes in one test job")
GPUS = Count(1, _max_accelerators, "GPUs or Neuron devices per node")
INSTANCE_COUNT = Count(1, MAX_INSTANCES, "instances")
PORT = Count(1, 65535, "TCP port")
TIMEOUT = Count(1, 7 * 24 * 3600, "seconds")


class FsxCapacity(Count):
    """FSx for Lustre SSD capacity by hpq.vocab's one rule (fsx_capacity_ok, FSX_RULE)."""

    def __init__(self, allow_none: bool) -> None:
        super().__init__(0 if allow_none else FSX_MIN_GIB, FSX_CAPACITY_MAX,
                         f"FSx for Lustre: {FSX_RULE}" + ("; 0 for none" if allow_none else ""))

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if number and not fsx_capacity_ok(number):
            self.fail(f"{number} is not a valid size ({self.what})", param, ctx)
        return number


FSX_GIB = FsxCapacity(allow_none=True)
FSX_CAPACITY = FsxCapacity(allow_none=False)
EBS_GIB = Count(1, EBS_GIB_MAX, "GiB per node")


_DECIMAL = re.compile(r"[0-9]{1,12}(\.[0-9]{0,12})?|\.[0-9]{1,12}")


class Seconds(click.ParamType):
    """A finite, positive number of seconds (``nan``, ``inf`` and 0 are refused)."""

    name = "seconds"

    def __init__(self, lo: float = 0.01, hi: float = 3600.0) -> None:
        self.lo, self.hi = lo, hi

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not _DECIMAL.fullmatch(value):
            # float() also takes '٣', '1_0', 'nan' and 'inf': one spelling per number, ASCII digits.
            self.fail(f"{show(value)} must be a number of seconds between {self.lo:g} and {self.hi:g}", param, ctx)
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{show(value)} is not a number of seconds", param, ctx)
        if not math.isfinite(number) or not self.lo <= number <= self.hi:
            self.fail(f"{show(value)} must be a number of seconds between {self.lo:g} and {self.hi:g}", param, ctx)
        return number


POLL_SECONDS = Seconds()
