"""Every variant x size rendered (the session fixture ``rendered`` of tests/conftest.py: cfn/ and observability/
tests read it), on a fixed date so that the golden files do not change as days pass."""

from __future__ import annotations

import datetime

from hpq import vocab
from hpq.cfn import synth

COMBOS = [(v, s) for v in vocab.VARIANTS for s in vocab.SIZES]

# The date the EKS templates' calendar is rendered for (cfn/eks.py): fixed, so the golden files do not change as
# days pass; the EKS tests also render other dates.
RENDER_DATE = datetime.date(2026, 11, 26)


def render_all() -> dict[tuple[str, str], dict[str, dict]]:
    """(variant, size) -> {file name: template dict}, with default parameters, rendered on RENDER_DATE."""
    return {(v, s): synth.synthesize(v, s, as_of=RENDER_DATE) for v, s in COMBOS}
