"""FSx for Lustre capacity: one rule (hpq.vocab), and every place that takes a capacity accepts and refuses the same
values: the command-line input (hpq eks render --fsx-capacity), the EKS fsx manifest (hpq.manifests.render), and
the storage template's StorageCapacityGiB parameter (its AllowedValues, up to vocab.FSX_TEMPLATE_MAX_GIB).

The oracle is AWS's sentence itself, not our constant: for the SSD deployment types "the valid values are
1200 GiB, 2400 GiB, and increments of 2400 GiB" (CreateFileSystem StorageCapacity,
https://docs.aws.amazon.com/fsx/latest/APIReference/API_CreateFileSystem.html).
"""

from __future__ import annotations

import click
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpq.cfn import storage
from hpq.cli import inputs
from hpq.cli.main import main
from hpq.errors import UsageError
from hpq.manifests.render import RenderRequest, render
from hpq.vocab import FSX_MAX_GIB, FSX_RULE, FSX_TEMPLATE_MAX_GIB, fsx_capacities, fsx_capacity_ok

ALLOWED_IN_TEMPLATE = {int(v) for v in storage.build(storage.StorageConfig()).to_dict()["Parameters"][
    "StorageCapacityGiB"]["AllowedValues"]}


def aws_says(gib: int) -> bool:
    """AWS's words: 1200, 2400, and increments of 2400 (within the API's Integer)."""
    return 0 < gib <= FSX_MAX_GIB and (gib == 1200 or gib % 2400 == 0)


def cli_accepts(gib: int) -> bool:
    try:
        inputs.FSX_CAPACITY.convert(str(gib), None, None)
    except click.BadParameter:
        return False
    return True


def manifest_accepts(gib: int) -> bool:
    try:
        render(RenderRequest("fsx", fsx_id="fs-0123456789abcdef0", fsx_dns="fs-0123456789abcdef0.fsx.us-west-2."
                             "amazonaws.com", fsx_mount_name="abcdefgh", fsx_capacity_gib=gib))
    except UsageError as exc:
        assert FSX_RULE in str(exc)
        return False
    return True


# Around the edges and the steps, and anywhere up to the API's bound.
CAPACITIES = st.one_of(st.integers(-2400, 50_000), st.integers(1, 2_000).map(lambda k: k * 1200),
                       st.integers(0, FSX_MAX_GIB + 10))


@settings(max_examples=300, deadline=None)
@given(CAPACITIES)
def test_every_place_accepts_and_refuses_the_same_capacities(gib):
    expected = aws_says(gib)
    assert fsx_capacity_ok(gib) == expected
    assert cli_accepts(gib) == expected
    assert (gib in ALLOWED_IN_TEMPLATE) == (expected and gib <= FSX_TEMPLATE_MAX_GIB)


@settings(max_examples=60, deadline=None)
@given(CAPACITIES)
def test_the_fsx_manifest_takes_the_same_capacities(gib):
    assert manifest_accepts(gib) == aws_says(gib)


def test_the_template_lists_every_valid_size_up_to_its_bound():
    """No gap (7200 was missing from the old list while the command line took it)."""
    assert ALLOWED_IN_TEMPLATE == {g for g in range(1, FSX_TEMPLATE_MAX_GIB + 1) if aws_says(g)}
    assert fsx_capacities() == tuple(sorted(ALLOWED_IN_TEMPLATE)) and 7200 in ALLOWED_IN_TEMPLATE


@pytest.mark.parametrize("value", [True, 2400.0, "2400"])
def test_the_rule_takes_only_whole_numbers(value):
    assert fsx_capacity_ok(value) is False


def test_the_help_and_the_messages_quote_the_rule(capsys):
    with pytest.raises(SystemExit):
        main(["eks", "render", "--help"])
    assert " ".join(capsys.readouterr().out.split()).count(FSX_RULE) == 1
    with pytest.raises(click.BadParameter, match=FSX_RULE):
        inputs.FSX_CAPACITY.convert("3600", None, None)
