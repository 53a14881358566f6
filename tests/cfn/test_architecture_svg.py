"""docs/images/architecture-<variant>.svg is drawn by dev/architecture_svg.py from the templates hpq
synthesizes and the lifecycle's step list: redrawn here, it must equal the committed picture. A
broken twin (the composition with one dependency dropped, a step renamed) must draw differently, so
the comparison can fail, and the picture must show every nested stack and every boot step.
"""

from __future__ import annotations

import runpy
import xml.dom.minidom
from pathlib import Path

import pytest

from hpq.cfn.synth import synthesize

ROOT = Path(__file__).resolve().parents[2]
ARCH = runpy.run_path(str(ROOT / "dev" / "architecture_svg.py"))


@pytest.mark.parametrize("variant", ARCH["VARIANTS"])
def test_committed_picture_is_the_one_the_code_draws(variant: str):
    committed = ARCH["out_path"](variant).read_text(encoding="utf-8")
    assert committed == ARCH["render"](variant), "run python dev/architecture_svg.py"


@pytest.mark.parametrize("variant", ARCH["VARIANTS"])
def test_picture_shows_every_nested_stack_and_boot_step(variant: str):
    files = synthesize(variant)
    svg = ARCH["render"](variant)
    xml.dom.minidom.parseString(svg)  # well-formed: a browser will draw it
    nested = [k for k, r in files["root.json"]["Resources"].items() if r["Type"] == "AWS::CloudFormation::Stack"]
    assert len(nested) >= 5
    for lid in nested:
        assert f">{lid}" in svg, lid
    steps = ARCH["boot_steps"](variant)
    assert ("slurm" in dict(steps)) == variant.startswith("slurm")
    for i, (name, _) in enumerate(steps):
        assert f">{i + 1}. {name}</tspan>" in svg


def test_a_changed_composition_draws_differently():
    variant = "slurm-gpu"
    stacks = ARCH["composition"](synthesize(variant))
    steps = ARCH["boot_steps"](variant)
    healthy = ARCH["draw"](variant, stacks, steps)
    dependent = next(s for s, v in stacks.items() if v["after"])
    broken = {s: dict(v, after=[] if s == dependent else v["after"]) for s, v in stacks.items()}
    assert ARCH["draw"](variant, broken, steps) != healthy
    assert ARCH["draw"](variant, stacks, [("renamed", p) if n == "fsx" else (n, p) for n, p in steps]) != healthy


def _width(text: str, size: float, bold: bool) -> float:
    """This test's own width estimate (Helvetica/Arial: capitals and digits ~0.67 em, lower case ~0.5 em, bold
    ~8% wider), independent of the drawing script's."""
    em = sum(0.83 if c in "MWmw@%" else 0.67 if c.isupper() or c.isdigit() else 0.28 if c in " .,:;il|!()/'"
             else 0.52 for c in text)
    return em * size * (1.08 if bold else 1.0)


def _texts(svg: str):  # type: ignore[no-untyped-def]
    """(group rect or None, x, y, text, bold, size) for every <text> element of the picture."""
    import xml.etree.ElementTree as ET

    ns = "{http://www.w3.org/2000/svg}"
    root = ET.fromstring(svg)
    size0 = float(root.get("font-size", "11"))
    out = []

    def visit(node, rect):  # type: ignore[no-untyped-def]
        if node.tag == ns + "g":
            rect = node.find(ns + "rect")
        for child in node:
            if child.tag == ns + "text":
                bold = child.get("font-weight") == "bold"
                size = float(child.get("font-size", size0))
                parts = [(child.text or "", bold)] + [(t.text or "", t.get("font-weight") == "bold" or bold)
                                                      for t in child] + [(t.tail or "", bold) for t in child]
                width = sum(_width(p, size, b) for p, b in parts)
                text = "".join(child.itertext())
                out.append((rect, float(child.get("x")), float(child.get("y")), text, width, size))
            elif child.tag == ns + "g":
                visit(child, None)
    visit(root, None)
    return root, out


@pytest.mark.parametrize("variant", ARCH["VARIANTS"])
def test_every_text_fits_its_box_and_the_picture_fits_a_page(variant: str):
    """Issue 25: descriptions were cut at 52 characters, step 9 ran past its box and the canvas, and the
    picture was 2570 px wide (text ~4 px at README width)."""
    root, texts = _texts(ARCH["render"](variant))
    width, height = float(root.get("width")), float(root.get("height"))
    assert width <= 1200
    for rect, x, y, text, w, size in texts:
        if rect is None:  # a heading: inside the canvas
            assert x + w <= width and y <= height, text
            continue
        rx, ry = float(rect.get("x")), float(rect.get("y"))
        rw, rh = float(rect.get("width")), float(rect.get("height"))
        assert rx < x and x + w <= rx + rw, (text, x + w, rx + rw)
        assert ry + size * 0.8 <= y <= ry + rh, (text, y, ry, rh)
        assert rx + rw <= width and ry + rh <= height, text


@pytest.mark.parametrize("variant", ARCH["VARIANTS"])
def test_no_boot_step_is_cut(variant: str):
    """Each step's lines, joined, are exactly ``N. name: purpose`` from hpq.lifecycle.main.STEPS."""
    import xml.etree.ElementTree as ET

    ns = "{http://www.w3.org/2000/svg}"
    root = ET.fromstring(ARCH["render"](variant))
    groups = [g for g in root.iter(ns + "g") if g.find(ns + "rect").get("fill") == "#f3f8ee"]
    steps = ARCH["boot_steps"](variant)
    assert len(groups) == len(steps)
    for i, (g, (name, purpose)) in enumerate(zip(groups, steps, strict=True)):
        shown = " ".join("".join(t.itertext()) for t in g.iter(ns + "text"))
        assert shown == f"{i + 1}. {name}: {purpose}", shown


def test_the_old_drawing_is_caught():
    """Broken twin: a step cut at 52 characters, and a box narrower than its text, fail the same checks."""
    import xml.etree.ElementTree as ET

    svg = ARCH["render"]("slurm-gpu")
    cut = svg.replace(">instance group</text>", "></text>")
    assert cut != svg
    ns = "{http://www.w3.org/2000/svg}"
    g = next(g for g in ET.fromstring(cut).iter(ns + "g") if g.find(ns + "rect").get("fill") == "#f3f8ee")
    assert " ".join("".join(t.itertext()) for t in g.iter(ns + "text")) != (
        "1. identify: " + dict(ARCH["boot_steps"]("slurm-gpu"))["identify"])
    narrow = svg.replace('width="250"', 'width="120"')
    _, texts = _texts(narrow)
    assert any(rect is not None and x + w > float(rect.get("x")) + float(rect.get("width"))
               for rect, x, _, _, w, _ in texts)


def test_check_reports_a_stale_picture(tmp_path, monkeypatch):
    """dev/architecture_svg.py --check: 0 when the committed pictures are what the code draws, 1 when one is not."""
    assert ARCH["main"](["--check"]) == 0
    arch = runpy.run_path(str(ROOT / "dev" / "architecture_svg.py"))
    stale = tmp_path / "docs" / "images"
    stale.mkdir(parents=True)
    for variant in arch["VARIANTS"]:
        (stale / f"architecture-{variant}.svg").write_text("<svg/>", encoding="utf-8")
    arch["main"].__globals__["ROOT"] = tmp_path
    assert arch["main"](["--check"]) == 1
