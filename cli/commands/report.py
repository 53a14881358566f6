"""``hpq nccl-report``: turn nccl-tests / built-in / nccom-test output into a verdict."""

from __future__ import annotations

import sys

import click

from hpq.cli import inputs
from hpq.cli.common_options import deprecated_spelling
from hpq.errors import UsageError
from hpq.scripts import outcome
from hpq.scripts.nccl_report import (
    evaluate,
    format_table,
    parse_expect,
    parse_file,
    read_stream,
    report_to_dict,
)


@click.command("nccl-report")
@click.argument("file", type=inputs.InputFile(allow_dash=True, max_bytes=64 << 20))
@deprecated_spelling("-i", canonical="instance_type", new_flag="-t/--instance-type", type=inputs.ACCELERATED_TYPE)
@click.option("--instance-type", "-t", default=None, type=inputs.ACCELERATED_TYPE,
              help="Compare the peak against the catalog's expected busbw for this type (e.g. ml.p5.48xlarge).")
@click.option("--nodes", "-n", type=inputs.NODES, default=None,
              help="Nodes the run used, when the log has no nccl-tests rank lines (they win when present).")
@click.option("--expect", default="catalog", show_default=True, metavar="catalog|none|GBPS",
              help="What the peak is judged against: the catalog's figure for --instance-type and the node count, "
                   "none (bandwidth reported, not judged; still fails on #wrong or a cut-off log), or your own "
                   "figure in GB/s (pass at 70%, 80% on one node).")
@deprecated_spelling("-o", canonical="output", new_flag="--output", type=click.Choice(["table", "json"]))
@click.option("--output", "output", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="Output format.")
def nccl_report(file: str, instance_type: str | None, nodes: int | None, expect: str, output: str) -> int:
    """Parse collective benchmark output in FILE ('-' for stdin) and judge it.

    Reads nccl-tests (all_reduce_perf ...), hpq's built-in benchmark and Neuron
    nccom-test output; FILE must be a regular file (or '-'). The expected bus
    bandwidth depends on the instance type and the node count: one node runs over
    NVLink/NeuronLink, several nodes are bound by the network. The node count is
    read from nccl-tests' rank lines ("#  Rank 0 Group 0 Pid ... on HOST device
    ..."), else from --nodes. The verdict's first line reads
    PASS|FAIL|INCONCLUSIVE: <number> vs <expectation>: <reason>, one line per
    check follows (values, data, transport, bandwidth, complete).

    \b
    Exit 0  PASS: every check holds (complete run, possible values, no wrong
            element, EFA named in the log on EFA types, bandwidth at least 70%
            (80% on one node) of the healthy published figure).
    Exit 1  FAIL: a check failed (TCP sockets on an EFA type, short of the
            figure, #wrong, impossible values, a run cut off).
    Exit 3  INCONCLUSIVE: evidence is missing (no published figure for the
            type and node count, no transport line in the log, several runs
            in one log); the message says what to run.
    Exit 2  unreadable input (over 64 MiB, no result rows) or a bad option.
    --expect none waives the bandwidth check; --expect GBPS judges against
    your own healthy baseline instead of the catalog.

    \b
    Examples:
      hpq nccl-report nccl-test.log -t ml.p5.48xlarge
      hpq nccl-report nccom.log -t trn1.32xlarge --nodes 2
      hpq nccl-report nccl-test.log --output json | jq .peak_busbw_gbps
      hpq nccl-report nccl-test.log --expect 350          your own baseline, GB/s
      hpq nccl-report nccl-test.log --expect none         completion and #wrong only
      srun -N 2 --ntasks-per-node 8 all_reduce_perf -b 8 -e 16G -f 2 | hpq nccl-report - -t p4d.24xlarge

    nccl-test.log and nccom.log stand for your saved logs (run-nccl-test keeps them
    in /fsx/hpq-results/ on the cluster).
    """
    wanted = parse_expect(expect)  # a bad value is a usage error before the file is read
    if file == "-" and sys.stdin is None:
        raise UsageError("FILE '-' reads standard input, which is closed: pipe a log in or give a file")
    if file == "-" and sys.stdin.isatty():
        raise UsageError("FILE '-' reads standard input, which is a terminal: pipe a log in or give a file")
    if file == "-":  # read in chunks up to hpq.scripts.nccl_report.MAX_LOG_BYTES: /dev/zero stops at the limit, Ctrl-C is honoured
        report = read_stream(sys.stdin.buffer)
    else:
        report = parse_file(file)
    verdict = evaluate(report, instance_type, nodes, wanted)
    if output == "json":
        click.echo(outcome.dumps(report_to_dict(report, verdict), indent=2))
    else:
        click.echo(verdict.message)  # the headline first, read at a glance (docs/validation.md "Three outcomes")
        click.echo()
        click.echo(format_table(report))
    return verdict.exit_code
