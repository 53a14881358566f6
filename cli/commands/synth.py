"""``hpq synth`` and ``hpq lint``: render the CloudFormation variants offline and lint them.

Thin click commands over hpq.cfn.synth and hpq.cfn.lint; troposphere and
cfn-lint are imported inside the commands so ``hpq --help`` stays instant.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from hpq import atomic, user_files
from hpq.cfn import synth_out
from hpq.cfn.lint import lint_files, template_files
from hpq.cfn.synth import ROOT_FILE, calendar_notes, parse_params, stack_files, synthesize, to_json
from hpq.cli import inputs, printing
from hpq.cli.inputs import show
from hpq.errors import HpqError, OperationFailed, UsageError
from hpq.vocab import VARIANTS

DEFAULT_OUT = "out"
STATE_MAX_BYTES = 8192  # one absolute path (PATH_MAX is 4096 on Linux)


def _state_file() -> Path:
    """Where synth remembers its output folder for a later bare ``hpq lint``."""
    base = os.environ.get("HPQ_STATE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "hpq")
    return Path(base) / "last-synth-dir"


def _check_state_file(state: Path) -> None:
    """Refuse, before anything is written, a state file hpq could only replace by breaking a link."""
    atomic.check_no_links(state, state.parent)
    atomic.check_target(state)


def _remember(out_dir: Path) -> None:
    state = _state_file()
    try:
        atomic.Batch().mkdirs(state.parent)
        atomic.write_file(state, str(out_dir.resolve()) + "\n")
    except (OSError, HpqError):
        pass  # remembering is a convenience only: the templates are written already


def _last_dir() -> Path:
    state = _state_file()
    if not os.path.lexists(state):
        return Path(DEFAULT_OUT)
    # hpq.user_files: a FIFO or device here (HPQ_STATE_DIR is the user's) is refused, never read or waited on
    raw = user_files.read_bytes(str(state), STATE_MAX_BYTES, "hpq synth's state file")
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise UsageError(f"{show(str(state))} is not UTF-8 text: remove it (hpq synth writes it again)") from None
    if len(raw) > STATE_MAX_BYTES or "\n" in text or "\0" in text:
        raise UsageError(f"{show(str(state))} is not one folder path: remove it (hpq synth writes it again)")
    return Path(text) if text and os.path.isdir(text) else Path(DEFAULT_OUT)


@click.command("synth")
@click.argument("variant", required=False, metavar="[VARIANT]", type=inputs.VARIANT)
@click.option("--all", "all_", is_flag=True, help="Render all four variants.")
@click.option("-o", "--out", "out", type=inputs.OutputDir(), default=DEFAULT_OUT, show_default=True,
              help="Output folder; each variant goes to OUT/<variant>/. Only files hpq wrote there (listed with their "
                   "hashes in OUT/<variant>/.hpq-synth-files) are replaced; any other file, an edited one or a "
                   "symbolic link is refused (exit 2). All or nothing: every file is written beside its target "
                   "first and renamed into place only when all are written, so a failure leaves OUT as it was.")
@click.option("--size", default="small", show_default=True, type=inputs.SIZE,
              help="Size preset: small, medium or large.")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE", type=inputs.KEY_VALUE,
              callback=inputs.unique_keys,
              help="Set a root parameter's default (repeatable, each KEY once), e.g. WorkerInstanceType=ml.p5.48xlarge.")
def synth(variant: str | None, all_: bool, out: str, size: str, params: tuple[str, ...]) -> None:
    """Render CloudFormation for VARIANT (slurm-gpu, slurm-trn, eks-gpu, eks-trn) or --all.

    Writes deterministic JSON (root.json plus one file per nested stack) and
    prints every file written. No AWS calls.

    \b
    Examples:
      hpq synth --all -o out/
      hpq synth slurm-gpu -o out/ --size medium
      hpq synth eks-gpu -o out/ --param WorkerInstanceType=ml.p5.48xlarge --param WorkerCount=4
    """
    if all_ and variant:
        raise UsageError("give a VARIANT or --all, not both")
    if not all_ and not variant:
        raise UsageError(f"missing VARIANT (one of: {', '.join(VARIANTS)}) or --all")
    overrides = parse_params(params)
    chosen = list(VARIANTS) if all_ else [variant]
    # Links, folders in the way and foreign manifests are refused at once, before the slow rendering.
    synth_out.precheck(Path(out), {name: [ROOT_FILE, *stack_files(name)] for name in chosen})
    # Render (and so validate) everything before writing anything.
    rendered = {name: synthesize(name, size, overrides) for name in chosen}
    for note in dict.fromkeys(n for name in chosen for n in calendar_notes(name, overrides)):
        click.echo(f"hpq: warning: {note}", err=True)
    out_dir = Path(out)
    state = _state_file()
    _check_state_file(state)
    trees = {name: {f: to_json(t).encode("utf-8") for f, t in files.items()}
             for name, files in rendered.items()}
    written = synth_out.write_trees(out_dir, trees)
    for path in written:
        click.echo(str(path))
    total = len(written)
    _remember(out_dir)
    click.echo(f"hpq: wrote {total} templates for {', '.join(chosen)} ({size}) under {out_dir}", err=True)


@click.command("lint")
@click.argument("directory", required=False, type=inputs.ExistingDir())
@click.option("--region", "regions", multiple=True, type=inputs.REGION,
              help="Region(s) whose resource schemas cfn-lint checks against (repeatable). Default: every region "
                   "the variant deploys to (OUT/<variant>/), else every HyperPod region.")
def lint(directory: str | None, regions: tuple[str, ...]) -> None:
    """Run cfn-lint over every *.json under DIRECTORY (default: the last synth folder, else ./out).

    By default each variant's templates are checked in every region it deploys to (the HyperPod regions
    whose CloudFormation has all its resource types; cfn-lint's data), which takes a while: the files
    done are shown as it goes. Exit 0 when clean, 1 on any error or warning (findings are printed),
    2 when the folder holds no templates.

    \b
    Examples:
      hpq synth --all -o out/ && hpq lint out/
      hpq lint                      lint what the last hpq synth wrote
      hpq lint out/ --region us-west-2 --region us-east-1
    """
    target = Path(directory) if directory else _last_dir()
    files = template_files(target) if target.is_dir() else []
    if not files:
        raise UsageError(f"no *.json templates under {target} (run: hpq synth --all -o {target})")
    findings = lint_files(files, regions or None, on_progress=printing.counter("cfn-lint"))
    for finding in findings:
        click.echo(str(finding))
    if findings:
        raise OperationFailed(f"cfn-lint: {len(findings)} finding(s) in {len(files)} templates under {target}")
    click.echo(f"hpq: cfn-lint clean: {len(files)} templates under {target}", err=True)
