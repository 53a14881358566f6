"""Draw docs/images/architecture-<variant>.svg from the real template composition and boot sequence.

Left: the root stack's nested stacks (AWS::CloudFormation::Stack resources of hpq synth's root.json),
placed in columns by dependency depth (DependsOn and Fn::GetAtt X.Outputs.Y in their Parameters), an
arrow per dependency, each box listing the resource types that stack creates. Right: the node boot
sequence, hpq.lifecycle.main.STEPS in order, with the steps this orchestrator skips left out.
Nothing is typed in by hand, so the picture cannot drift from the code; tests/cfn/test_architecture_svg.py
redraws it and compares.

    python dev/architecture_svg.py           # rewrite the pictures
    python dev/architecture_svg.py --check   # exit 1 if a committed picture is not what the code draws
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
BOX_W, LINE_H, GAP_X, GAP_Y, PAD = 250, 15, 30, 28, 20
WIDTH, FONT, TITLE = 1100, 11, 15  # at most ~1200 px: at README width (~900 px) the text stays readable


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


def text_width(text: str, size: float = FONT, bold: bool = False) -> float:
    """A generous estimate of ``text``'s width in px (Helvetica/Arial average advance, wide glyphs counted
    wider), used to wrap every text inside its box; tests/cfn/test_architecture_svg.py checks with its own."""
    wide = sum(1 for c in text if c in "MWmw@%") * 0.35
    return (len(text) + wide) * size * (0.62 if bold else 0.57)


def wrap(text: str, width: float, size: float = FONT, bold: bool = False, first_indent: float = 0) -> list[str]:
    """``text`` in lines of at most ``width`` px (the first ``first_indent`` px shorter), cut at spaces only;
    every word is kept, none is cut."""
    lines: list[str] = []
    current = ""
    for word in text.split():
        trial = f"{current} {word}" if current else word
        room = width - (first_indent if not lines else 0)
        if current and text_width(trial, size, bold) > room:
            lines.append(current)
            current = word
        else:
            current = trial
    return lines + [current] if current else lines


def draw(variant: str, stacks: dict[str, dict[str, Any]], steps: list[tuple[str, str]]) -> str:
    """Nested stacks top to bottom by dependency depth (a row per depth, arrows downward), the boot steps in a
    column to their right, every description wrapped inside its box: at most WIDTH px wide."""
    depth = _depth(stacks)
    rows: dict[int, list[str]] = {}
    for s in sorted(stacks):
        rows.setdefault(depth[s], []).append(s)
    per_row = max(len(r) for r in rows.values())
    boxes: dict[str, tuple[int, int, int, list[str], list[str]]] = {}  # x, y, height, label lines, type lines
    y = PAD + 40
    for _, names in sorted(rows.items()):
        tallest = 0
        for i, s in enumerate(names):
            cond = stacks[s]["condition"]
            label = wrap(s + (f" (if {cond})" if cond else ""), BOX_W - 16, bold=True)
            types = [line for t, n in stacks[s]["types"].items()
                     for line in wrap(t + (f" x{n}" if n > 1 else ""), BOX_W - 20)]
            h = LINE_H * (len(label) + len(types)) + 12
            boxes[s] = (PAD + i * (BOX_W + GAP_X), y, h, label, types)
            tallest = max(tallest, h)
        y += tallest + GAP_Y
    bottom = y
    steps_x = PAD + per_row * (BOX_W + GAP_X) + 20
    steps_w = WIDTH - PAD - steps_x
    step_boxes = []
    sy = PAD + 40
    for i, (name, purpose) in enumerate(steps):
        head = f"{i + 1}. {name}"
        lines = wrap(f"{head}: {purpose}", steps_w - 14)
        h = LINE_H * len(lines) + 10
        step_boxes.append((sy, h, head, lines))
        sy += h + 6
    width = WIDTH
    height = max(bottom, sy) + PAD
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif" font-size="{FONT}">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{PAD}" y="{PAD + 12}" font-size="{TITLE}" font-weight="bold">hpq {escape(variant)}: '
           'nested stacks (arrows: needs)</text>']
    for s, (x, y, _h, _, _) in boxes.items():
        for a in stacks[s]["after"]:
            ax, ay, ah, _, _ = boxes[a]
            svg.append(f'<line x1="{ax + BOX_W // 2}" y1="{ay + ah}" x2="{x + BOX_W // 2}" y2="{y}" stroke="#555" '
                       f'stroke-width="1" marker-end="url(#arrow)"/>')
    for s, (x, y, h, label, types) in boxes.items():
        dashed = ' stroke-dasharray="5,3"' if stacks[s]["condition"] else ""
        svg.append(f'<g><rect x="{x}" y="{y}" width="{BOX_W}" height="{h}" rx="6" fill="#eef4fb" '
                   f'stroke="#2f6db5"{dashed}/>')
        for i, line in enumerate(label):
            svg.append(f'<text x="{x + 8}" y="{y + LINE_H * (i + 1)}" font-weight="bold">{escape(line)}</text>')
        for i, line in enumerate(types):
            svg.append(f'<text x="{x + 12}" y="{y + LINE_H * (len(label) + i + 1)}">{escape(line)}</text>')
        svg.append("</g>")
    svg.append(f'<text x="{steps_x}" y="{PAD + 12}" font-size="{TITLE}" font-weight="bold">node boot (OnCreate), '
               'in order</text>')
    for sy, h, head, lines in step_boxes:
        svg.append(f'<g><rect x="{steps_x}" y="{sy}" width="{steps_w}" height="{h}" rx="4" fill="#f3f8ee" '
                   'stroke="#4b8a2f"/>')
        for i, line in enumerate(lines):
            ty = sy + LINE_H * (i + 1)
            if i == 0:  # the step's number and name in bold, then its purpose
                body = escape(line[len(head):])
                svg.append(f'<text x="{steps_x + 7}" y="{ty}"><tspan font-weight="bold">{escape(head)}</tspan>'
                           f'{body}</text>')
            else:
                svg.append(f'<text x="{steps_x + 7}" y="{ty}">{escape(line)}</text>')
        svg.append("</g>")
    svg.append("</svg>")
    return "\n".join(svg) + "\n"


def boot_steps(variant: str) -> list[tuple[str, str]]:
    skip = lifecycle_main.EKS_ONLY_STEPS if orchestrator_of(variant) == "slurm" else lifecycle_main.SLURM_ONLY_STEPS
    return [(name, purpose) for name, _, purpose in lifecycle_main.STEPS if name not in skip]


def render(variant: str) -> str:
    return draw(variant, composition(synthesize(variant)), boot_steps(variant))


def main(argv: list[str]) -> int:
    """Rewrite the pictures; ``--check``: exit 1 naming each picture that differs from what the code draws."""
    stale = []
    for variant in VARIANTS:
        drawn = render(variant)
        path = out_path(variant)
        if "--check" in argv:
            if not path.exists() or path.read_text(encoding="utf-8") != drawn:
                stale.append(str(path.relative_to(ROOT)))
        else:
            path.write_text(drawn, encoding="utf-8")
    for path in stale:
        print(f"{path} is stale: run python dev/architecture_svg.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
