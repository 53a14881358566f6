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
