"""Golden JSON per variant x size, reviewed in diffs.

Update after an intended change with:  HPQ_UPDATE_GOLDEN=1 pytest tests/cfn/test_cfn_golden.py
Lambda code is stored as a marker naming its source file (test_cfn_structure checks the
real ZipFile equals that file), so editing a handler does not churn the golden files.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hpq.cfn import synth
from tests.cfn.golden import GOLDEN_DIR, UPDATE_GOLDEN, golden_view, handler_sources
from tests.cfn_render import COMBOS


@pytest.mark.parametrize(("variant", "size"), COMBOS)
def test_golden(rendered, variant, size):
    sources = handler_sources()
    folder = GOLDEN_DIR / variant / size
    files = rendered[(variant, size)]
    views = {name: golden_view(template, sources) for name, template in files.items()}
    if UPDATE_GOLDEN:
        synth.write_files(views, folder, trust_existing=True)  # hpq synth's writer; git, not a manifest, owns these
        return
    problems = []
    for name, view in views.items():
        text = synth.to_json(view)
        path = folder / name
        if not path.exists():
            problems.append(f"missing golden file {path}")
        elif path.read_text(encoding="utf-8") != text:
            problems.append(f"{path} differs from the rendered template")
    extra = sorted(p.name for p in folder.glob("*.json") if p.name not in files)
    if extra:
        problems.append(f"golden files no longer rendered: {extra}")
    assert not problems, "; ".join(problems) + " (HPQ_UPDATE_GOLDEN=1 pytest tests/cfn/test_cfn_golden.py, review the diff)"


def test_golden_marker_replaces_code(rendered):
    """The golden view must hide the code yet still say which file it came from."""
    view = golden_view(rendered[("eks-gpu", "small")]["Helm.json"], handler_sources())
    assert view["Resources"]["HelmFunction"]["Properties"]["Code"]["ZipFile"] == "<<embedded: cfn/handlers/helm.py>>"
    view = golden_view(rendered[("slurm-gpu", "small")]["S3.json"], {})
    assert view["Resources"]["ContentsFunction"]["Properties"]["Code"]["ZipFile"] == "<<embedded: NO MATCHING FILE>>"


def test_output_is_deterministic():
    a = {k: synth.to_json(v) for k, v in synth.synthesize("eks-trn", "large").items()}
    b = {k: synth.to_json(v) for k, v in synth.synthesize("eks-trn", "large").items()}
    assert a == b
    assert all(text.endswith("}\n") for text in a.values())


def test_output_does_not_depend_on_the_interpreter_run():
    """Two fresh interpreters with different hash seeds (set/dict-of-set order) render identical bytes."""
    code = (
        "import hashlib\n"
        "from hpq.cfn import synth\n"
        "from tests.cfn_render import COMBOS\n"
        "h = hashlib.sha256()\n"
        "for v, s in COMBOS:\n"
        "    for name, t in synth.synthesize(v, s).items():\n"
        "        h.update(f'{v}/{s}/{name}'.encode() + synth.to_json(t).encode())\n"
        "print(h.hexdigest())\n"
    )
    digests = set()
    for seed in ("1", "2"):
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                             env=dict(os.environ, PYTHONHASHSEED=seed))
        assert res.returncode == 0, res.stderr
        digests.add(res.stdout.strip())
    assert len(digests) == 1, digests
