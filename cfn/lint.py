"""cfn-lint over rendered templates, in one process (the schema loads once for all files)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hpq.errors import UsageError

# The regions the templates must be clean in (HyperPod's main GPU/Trainium regions). cfn-lint's per-region
# data (e.g. which HyperPod instance types have an on-demand offer, W1030) differs between them.
DEFAULT_REGIONS = ("us-east-1", "us-east-2", "us-west-2")


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


def lint_files(files: list[Path], regions: tuple[str, ...] | list[str] = DEFAULT_REGIONS) -> list[Finding]:
    """Run cfn-lint on all files at once; return errors and warnings (informational ignored)."""
    from cfnlint.api import ManualArgs, lint_by_config
    from cfnlint.exceptions import InvalidRegionException

    try:
        matches = lint_by_config(ManualArgs(templates=[str(f) for f in files], regions=list(regions)))
    except InvalidRegionException:
        from cfnlint.helpers import REGIONS

        unknown = sorted(set(regions) - set(REGIONS))
        raise UsageError(f"cfn-lint does not know region(s) {', '.join(unknown) or regions}") from None
    out = []
    for m in matches:
        severity = str(getattr(m.rule, "severity", "error")).lower()
        if severity.startswith("info"):
            continue
        out.append(Finding(m.rule.id, severity, m.message, str(m.filename), m.linenumber, m.columnnumber))
    return sorted(out, key=lambda f: (f.path, f.line, f.column, f.rule))
