"""Values from hpq's own lists: variants, sizes, catalog instance types, NCCL_DEBUG levels."""

from __future__ import annotations

from typing import Any

import click

from hpq.cli.inputs.completion import items
from hpq.cli.inputs.text import Text, show
from hpq.lifecycle import catalog
from hpq.manifests.render import NCCL_DEBUG_LEVELS
from hpq.vocab import SIZES, VARIANTS


class Variant(Text):
    name = "variant"

    def __init__(self) -> None:
        super().__init__("variant")

    def shell_complete(self, ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
        return items(VARIANTS, incomplete)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        value = super().convert(value, param, ctx)
        if isinstance(value, str) and value not in VARIANTS:  # the wording every hpq command uses
            self.fail(f"unknown variant {show(value)}; choose one of: {', '.join(VARIANTS)}", param, ctx)
        return value


class Size(Text):
    name = "size"

    def __init__(self) -> None:
        super().__init__("size")

    def shell_complete(self, ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
        return items(SIZES, incomplete)

    def check(self, value: str) -> str | None:
        return None if value in SIZES else f"is unknown; choose one of: {', '.join(SIZES)}"


VARIANT = Variant()
SIZE = Size()


class InstanceType(Text):
    """A type from hpq's catalog (``p5.48xlarge`` or ``ml.p5.48xlarge``); returns the ``ml.`` name."""

    name = "instance-type"

    def __init__(self, kind: str | None = None) -> None:
        super().__init__("instance type")
        self.kind = kind  # None, "accelerated" or "cpu"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        value = super().convert(value, param, ctx)
        if not isinstance(value, str):
            return value
        try:
            entry = catalog.lookup(value)
        except catalog.UnknownInstanceType as exc:
            self.fail(str(exc), param, ctx)
        if self.kind == "accelerated" and not entry.is_accelerated:
            self.fail(f"{entry.name} has no GPU or Trainium accelerator (e.g. ml.g5.16xlarge, ml.p5.48xlarge)",
                      param, ctx)
        if self.kind == "cpu" and entry.is_accelerated:
            self.fail(f"{entry.name} is an accelerated type; a controller is a CPU type such as "
                      f"{catalog.DEFAULT_CONTROLLER_TYPE}",
                      param, ctx)
        return entry.name


INSTANCE_TYPE = InstanceType()
ACCELERATED_TYPE = InstanceType("accelerated")
CPU_TYPE = InstanceType("cpu")


class NcclDebug(Text):
    """NCCL_DEBUG level (manifests.render.NCCL_DEBUG_LEVELS, any case) or 'off'."""

    name = "level"

    def __init__(self) -> None:
        super().__init__("NCCL_DEBUG level")

    def check(self, value: str) -> str | None:
        if value.lower() == "off" or value.upper() in NCCL_DEBUG_LEVELS:
            return None
        return f"is not one of {', '.join(NCCL_DEBUG_LEVELS)} or off"


NCCL_DEBUG = NcclDebug()
