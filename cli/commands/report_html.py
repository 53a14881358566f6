"""``hpq report``: results (hpq test --output json, the node programs' result files) as one HTML page."""

from __future__ import annotations

import click

from hpq.cli import inputs
from hpq.scripts import outcome
from hpq.views import load, output, page


@click.command("report")
@click.argument("results", nargs=-1, required=True, metavar="RESULT...",
                type=inputs.InputFile(max_bytes=load.MAX_FILE_BYTES, what="result"))
@click.option("-o", "--out", "out", default="hpq-report.html", show_default=True, type=inputs.WritableFile("report"),
              help="The HTML file to write (replaced only if it is an earlier hpq report, or with --force).")
@click.option("--title", default=None, type=inputs.Text("--title"), help="The page's title (default: the cluster).")
@click.option("--force", is_flag=True, help="Replace --out even if it is not an hpq report.")
def report(results: tuple[str, ...], out: str, title: str | None, force: bool) -> None:
    """Write one self-contained HTML page from test results: verdicts, charts, environment.

    Each RESULT is a JSON file: what `hpq test ... --output json` prints, a result file the node
    programs write in /fsx/hpq-results (run-nccl-test, run-nccom-test, run-nanogpt,
    the sweep), `hpq nccl-report --output json` or `hpq rehearse --output json`.
    The page shows the cluster and when, one line per verdict (PASS, FAIL or
    INCONCLUSIVE, the number, the expectation, the reason), bus bandwidth against
    message size with the expected figure, the sweep as a node-by-node heat map with
    the slow node marked, nanoGPT's loss and tokens/s per iteration, and the transport
    environment each node's ranks had. CSS and SVG are inline: it opens offline, in
    any browser, without JavaScript.

    \b
    Exit 0  the page was written (whatever the verdicts: they are on the page and in
            the tests' own exit codes).
    Exit 2  a file that is not an hpq result (not JSON, another shape, over 16 MiB),
            more than 64 files or 64 MiB, or --out is a file hpq did not write
            (use --force).

    \b
    Examples:
      hpq test nccl my-cluster 2 --output json > nccl.json
      hpq test sweep my-cluster --output json > sweep.json
      hpq report nccl.json sweep.json -o my-cluster.html --title "my-cluster, after the driver update"

    The node programs' own result files (/fsx/hpq-results/*.json on the cluster)
    can be copied to the laptop and given the same way.
    """
    items = load.load(list(results))
    html = page.render(items, title)
    output.write_report(out, html, force)
    overall = outcome.combine(i.outcome for i in items)
    click.echo(f"wrote {out}: {len(items)} result(s), overall {overall}")
