"""Draw docs/images/architecture-<variant>.svg from the real template composition and boot sequence.

Left: the root stack's nested stacks (AWS::CloudFormation::Stack resources of hpq synth's root.json),
placed in columns by dependency depth (DependsOn and Fn::GetAtt X.Outputs.Y in their Parameters), an
arrow per dependency, each box listing the resource types that stack creates. Right: the node boot
sequence, hpq.lifecycle.main.STEPS in order, with the steps this orchestrator skips left out.
Nothing is typed in by hand, so the picture cannot drift from the code; tests/cfn/test_architecture_svg.py
redraws it and compares.

    python dev/architecture_svg.py           # rewrite the pictures
"""

from __future__ import annotations

import sys
from html import escape
from pathlib import Path
from typing import Any

from hpq.cfn.synth import synthesize
from hpq.lifecycle import main as lifecycle_main
from hpq.vocab import orchestrator_of

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("slurm-gpu", "eks-gpu")
BOX_W, LINE_H, GAP_X, GAP_Y, PAD = 250, 15, 60, 24, 20


def out_path(variant: str) -> Path:
    return ROOT / "docs" / "images" / f"architecture-{variant}.svg"


def _refs(node: Any) -> set[str]:
    """Logical ids named by Fn::GetAtt / Ref anywhere in ``node``."""
    found: set[str] = set()
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "Fn::GetAtt":
                found.add(v[0] if isinstance(v, list) else str(v).split(".")[0])
            elif k == "Ref" and isinstance(v, str):
                found.add(v)
            else:
                found |= _refs(v)
    elif isinstance(node, list):
        for v in node:
            found |= _refs(v)
    return found


def composition(files: dict[str, dict]) -> dict[str, dict[str, Any]]:
    """Nested stack logical id -> {"after": ids it depends on, "types": {type: count}}."""
    resources = files["root.json"]["Resources"]
    nested = {k: r for k, r in resources.items() if r["Type"] == "AWS::CloudFormation::Stack"}
    out: dict[str, dict[str, Any]] = {}
    for lid, res in nested.items():
        depends = res.get("DependsOn", [])
        after = ({depends} if isinstance(depends, str) else set(depends)) | _refs(res.get("Properties", {}))
        url = res["Properties"]["TemplateURL"]
        file = next((f for f in files if f != "root.json" and f in str(url)), None)
        types: dict[str, int] = {}
        for child in (files[file]["Resources"].values() if file else []):
            short = child["Type"].replace("AWS::", "").replace("Custom::", "Custom ")
            types[short] = types.get(short, 0) + 1
        out[lid] = {"after": sorted(a for a in after if a in nested), "types": dict(sorted(types.items())),
                    "condition": res.get("Condition", "")}
    return out


def _depth(stacks: dict[str, dict[str, Any]]) -> dict[str, int]:
    depth: dict[str, int] = {}

    def d(s: str) -> int:
        if s not in depth:
            depth[s] = 1 + max((d(a) for a in stacks[s]["after"]), default=-1)
        return depth[s]

    for s in stacks:
        d(s)
    return depth


def draw(variant: str, stacks: dict[str, dict[str, Any]], steps: list[tuple[str, str]]) -> str:
    depth = _depth(stacks)
    columns: dict[int, list[str]] = {}
    for s in sorted(stacks):
        columns.setdefault(depth[s], []).append(s)
    boxes: dict[str, tuple[int, int, int]] = {}  # x, y, height
    bottom = 0
    for col, names in sorted(columns.items()):
        y = PAD + 40
        for s in names:
            h = LINE_H * (2 + len(stacks[s]["types"])) + 8
            boxes[s] = (PAD + col * (BOX_W + GAP_X), y, h)
            y += h + GAP_Y
        bottom = max(bottom, y)
    steps_x = PAD + len(columns) * (BOX_W + GAP_X) + 20
    width = steps_x + 360
    height = max(bottom, PAD + 70 + LINE_H * 2 * len(steps)) + PAD
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif" font-size="11">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{PAD}" y="{PAD + 12}" font-size="15" font-weight="bold">hpq {escape(variant)}: root stack '
           f'and its nested stacks (arrows: needs)</text>']
    for s, (x, y, h) in boxes.items():
        for a in stacks[s]["after"]:
            ax, ay, ah = boxes[a]
            svg.append(f'<line x1="{ax + BOX_W}" y1="{ay + ah // 2}" x2="{x}" y2="{y + h // 2}" stroke="#555" '
                       f'stroke-width="1" marker-end="url(#arrow)"/>')
    for s, (x, y, h) in boxes.items():
        dashed = ' stroke-dasharray="5,3"' if stacks[s]["condition"] else ""
        svg.append(f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{h}" rx="6" fill="#eef4fb" stroke="#2f6db5"{dashed}/>')
        label = s + (f" (if {stacks[s]['condition']})" if stacks[s]["condition"] else "")
        svg.append(f'<text x="{x + 8}" y="{y + LINE_H}" font-weight="bold">{escape(label)}</text>')
        for i, (t, n) in enumerate(stacks[s]["types"].items()):
            svg.append(f'<text x="{x + 12}" y="{y + LINE_H * (i + 2)}">{escape(t)}{f" x{n}" if n > 1 else ""}</text>')
    svg.append(f'<text x="{steps_x}" y="{PAD + 12}" font-size="15" font-weight="bold">node boot (OnCreate), '
               'in order</text>')
    for i, (name, purpose) in enumerate(steps):
        y = PAD + 40 + i * LINE_H * 2
        svg.append(f'<rect x="{steps_x}" y="{y}" width="340" height="{LINE_H * 2 - 6}" rx="4" fill="#f3f8ee" '
                   'stroke="#4b8a2f"/>')
        svg.append(f'<text x="{steps_x + 6}" y="{y + LINE_H + 2}"><tspan font-weight="bold">{i + 1}. '
                   f'{escape(name)}</tspan>: {escape(purpose[:52])}</text>')
    svg.append("</svg>")
    return "\n".join(svg) + "\n"


def boot_steps(variant: str) -> list[tuple[str, str]]:
    skip = lifecycle_main.EKS_ONLY_STEPS if orchestrator_of(variant) == "slurm" else lifecycle_main.SLURM_ONLY_STEPS
    return [(name, purpose) for name, _, purpose in lifecycle_main.STEPS if name not in skip]


def render(variant: str) -> str:
    return draw(variant, composition(synthesize(variant)), boot_steps(variant))


def main(argv: list[str]) -> int:
    for variant in VARIANTS:
        out_path(variant).write_text(render(variant), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
