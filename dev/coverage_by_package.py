"""Line coverage by package, and every cli/ module, from the .coverage file a `pytest --cov` run left.

dev/test.sh prints it after the suite. ``--cli-module-min N`` fails (exit 1) when a module under
cli/ is below N percent (the per-module target); 0, the default, only reports.
Run: python3 dev/coverage_by_package.py [--cli-module-min 75]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

PACKAGES = ("cli/aws", "cli/commands", "cli/eks", "cli/rehearse", "cli", "cfn/handlers", "cfn", "lifecycle", "manifests",
            "scripts", "hpq")


def package_of(path: str) -> str:
    for pkg in PACKAGES:
        if path.startswith(pkg + "/"):
            return pkg
    return "other"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-file", default=".coverage")
    ap.add_argument("--cli-module-min", type=float, default=0.0)
    args = ap.parse_args(argv)
    import coverage

    if not Path(args.data_file).exists():
        print(f"no coverage data in {args.data_file} (run pytest --cov)", file=sys.stderr)
        return 2
    import json
    import tempfile

    cov = coverage.Coverage(data_file=args.data_file)
    cov.load()
    with tempfile.TemporaryDirectory() as tmp:  # the JSON report also lists files no test imported
        out = Path(tmp) / "coverage.json"
        cov.json_report(outfile=str(out))
        files = json.loads(out.read_text())["files"]
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    modules: list[tuple[str, int, int]] = []
    for rel, info in files.items():
        rel = Path(rel).as_posix()
        total, run = info["summary"]["num_statements"], info["summary"]["covered_lines"]
        for key in (package_of(rel), "TOTAL"):
            totals[key][0] += total
            totals[key][1] += run
        if rel.startswith("cli/"):
            modules.append((rel, total, run))

    def pct(total: int, run: int) -> float:
        return 100.0 * run / total if total else 100.0

    print(f"{'package':<16} {'lines':>6} {'run':>6} {'cover':>7}")
    for pkg in [*PACKAGES, "other", "TOTAL"]:
        if pkg in totals:
            total, run = totals[pkg]
            print(f"{pkg:<16} {total:>6} {run:>6} {pct(total, run):>6.1f}%")
    print(f"\n{'cli/ module':<30} {'lines':>6} {'cover':>7}")
    low = []
    for rel, total, run in sorted(modules):
        flag = " <" if pct(total, run) < args.cli_module_min else ""
        print(f"{rel:<30} {total:>6} {pct(total, run):>6.1f}%{flag}")
        if flag:
            low.append(rel)
    if low:
        print(f"\n{len(low)} cli/ module(s) below {args.cli_module_min:g}%: {', '.join(low)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
