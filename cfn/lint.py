"""cfn-lint over rendered templates, in one process (the schema loads once for all files)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hpq.cfn import regions
from hpq.errors import UsageError
from hpq.vocab import VARIANTS

ProgressFn = Callable[[int, int], None]


def default_regions() -> tuple[str, ...]:
    """Every HyperPod region (cfn/regions.py): the templates must be clean in each, since cfn-lint's per-region
    data (resource types E3006, on-demand instance types W1030) differs between them."""
    return regions.hyperpod_regions()


def regions_for(path: Path) -> tuple[str, ...]:
    """The regions a rendered file is linted in: its variant's (OUT/<variant>/<file>.json, cfn/regions.py), or
    every HyperPod region for a file outside such a folder."""
    if path.parent.name in VARIANTS:
        return regions.variant_regions(path.parent.name)
    return default_regions()


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str  # "error" | "warning" | "informational"
    message: str
    path: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.column}: {self.rule} {self.message}"


def template_files(directory: str | Path) -> list[Path]:
    """Every *.json template below directory, sorted."""
    return sorted(p for p in Path(directory).rglob("*.json") if p.is_file())


def lint_files(files: list[Path], regions: tuple[str, ...] | list[str] | None = None,
               on_progress: ProgressFn | None = None) -> list[Finding]:
    """Run cfn-lint in this process (its schemas load once) over each file, in all the regions at once
    (cfn-lint's --regions); return errors and warnings (informational ignored). ``regions`` None: each
    file's own (``regions_for``). ``on_progress(done, total)`` after every file: all regions take a while."""
    from cfnlint.config import ConfigMixIn, ManualArgs
    from cfnlint.exceptions import InvalidRegionException
    from cfnlint.helpers import REGIONS
    from cfnlint.runner.cli import Runner
    from cfnlint.runner.template import run_template_by_file_paths

    if regions is not None:
        unknown = sorted(set(regions) - set(REGIONS))
        if unknown:
            raise UsageError(f"cfn-lint does not know region(s) {', '.join(unknown)}")
    matches: list = []
    runner = None  # its rule collection is built once and shared by every file (as cfn-lint does for a list)
    for done, f in enumerate(files, 1):
        where = list(regions if regions is not None else regions_for(Path(f)))
        try:
            config = ConfigMixIn(**ManualArgs(templates=[str(f)], regions=where))
            config.validate()
        except (InvalidRegionException, ValueError) as exc:
            raise UsageError(f"cfn-lint: {exc}") from None
        runner = runner or Runner(config)
        matches += run_template_by_file_paths(config, runner.rules)
        if on_progress:
            on_progress(done, len(files))
    out = []
    for m in matches:
        severity = str(getattr(m.rule, "severity", "error")).lower()
        if severity.startswith("info"):
            continue
        out.append(Finding(m.rule.id, severity, m.message, str(m.filename), m.linenumber, m.columnnumber))
    return sorted(out, key=lambda f: (f.path, f.line, f.column, f.rule))
