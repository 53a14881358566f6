"""The ``hpq`` click application.

Commands are registered by dotted path and imported only when invoked, so that
``hpq --help`` never pays for boto3, troposphere or kubernetes.
"""

from __future__ import annotations

import errno
import importlib
import os
import sys
from typing import NoReturn

import click

from hpq import __version__
from hpq.errors import EXIT_FAILED, EXIT_USAGE, HpqError

# name -> (module, attribute, one-line help). Help lives here so listing commands imports nothing.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "synth": ("hpq.cli.commands.synth", "synth", "Render CloudFormation templates for a variant (no AWS calls)."),
    "lint": ("hpq.cli.commands.synth", "lint", "Run cfn-lint over rendered templates; non-zero on any finding."),
    "nccl-env": ("hpq.cli.commands.nccl", "nccl_env", "Show the EFA/NCCL environment a node of a type gets."),
    "nccl-report": ("hpq.cli.commands.report", "nccl_report", "Parse nccl-tests output and judge it against the catalog."),
    "deploy": ("hpq.cli.commands.deploy", "deploy", "Package, create or update a variant's stack, follow it."),
    "publish": ("hpq.cli.commands.deploy", "publish", "Upload every variant and print Launch Stack links."),
    "status": ("hpq.cli.commands.stacks", "status", "Show a stack's state and outputs."),
    "destroy": ("hpq.cli.commands.stacks", "destroy", "Delete a stack (with confirmation) and follow the deletion."),
    "stack-errors": ("hpq.cli.commands.stacks", "stack_errors", "Root-cause failures through nested stacks."),
    "check-quotas": ("hpq.cli.commands.quotas", "check_quotas", "Check the service quotas a deploy of that size needs."),
    "connect": ("hpq.cli.commands.connect", "connect", "Open an SSM session on a HyperPod node."),
    "remote": ("hpq.cli.commands.remote", "remote", "Run a command on the controller over SSH through SSM."),
    "remote-nccl-test": ("hpq.cli.commands.remote", "remote_nccl_test", "Run run-nccl-test on the controller, report."),
    "eks": ("hpq.cli.commands.eks", "eks", "Run the validation tests as Kubernetes jobs on an EKS cluster."),
    "rehearse": ("hpq.cli.commands.rehearse", "rehearse",
                 "Rehearse a deploy on this machine, offline: emulated AWS, namespaced nodes, real Slurm."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        if cmd_name not in COMMANDS:
            return None
        module, attr, _ = COMMANDS[cmd_name]
        from hpq.cli.inputs import refuse_repeated_options

        return refuse_repeated_options(getattr(importlib.import_module(module), attr))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in sorted(COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]}, invoke_without_command=True)
@click.version_option(__version__, prog_name="hpq")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """hpq: stand up SageMaker HyperPod clusters (Slurm or EKS) and prove they run at full speed.

    \b
    Examples:
      hpq synth --all -o out/          render every variant offline
      hpq lint out/                    cfn-lint them
      hpq nccl-env ml.p5.48xlarge      the NCCL environment a p5 node gets
      hpq deploy slurm-gpu my-bucket   deploy and follow progress

    Run `hpq COMMAND --help` for a command's options and examples.
    """
    if ctx.invoked_subcommand is None:  # bare `hpq`: help is the answer, not an error
        click.echo(ctx.get_help())


def one_line(message: str) -> str:
    """An error message as one line: whatever it quotes (user input, AWS text) cannot break it up."""
    return " ".join(str(message).split())


def _undecodable(args: list[str]) -> str | None:
    """The first argument that is not valid UTF-8 (Python keeps such bytes as lone surrogates)."""
    for arg in args:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            return arg
    return None


def main(argv: list[str] | None = None) -> None:
    """Entry point: expected errors become one line on stderr and an exit code, never a traceback."""
    args = sys.argv[1:] if argv is None else list(argv)
    if sys.stdout is None:  # `hpq ... >&-`: every command's answer would vanish without a word
        if sys.stderr is not None:
            sys.stderr.write("hpq: error: standard output is closed\n")
        sys.exit(EXIT_USAGE)
    bad = _undecodable(args)
    if bad is not None:
        from hpq.cli.inputs import show

        click.echo(f"hpq: error: argument {show(bad)} is not valid UTF-8", err=True)
        sys.exit(EXIT_USAGE)
    try:
        rv = cli.main(args=args, prog_name="hpq", standalone_mode=False)
    except HpqError as exc:
        click.echo(f"hpq: error: {one_line(str(exc))}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("hpq: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        # Usage errors from click itself: one line, without click's multi-line usage block.
        click.echo(f"hpq: error: {one_line(exc.format_message())}", err=True)
        sys.exit(EXIT_USAGE if exc.exit_code == 2 else exc.exit_code)
    except KeyboardInterrupt:
        click.echo("hpq: interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:  # `hpq eks render ... | head`: the reader left; not an error of ours
        sys.stderr.close()
        sys.exit(EXIT_FAILED)
    except OSError as exc:
        if exc.errno not in _DEVICE_ERRNOS:
            _internal_error(exc)
        # A full disk or a broken device under our output or files: the machine's problem, not a bug.
        where = f" {exc.filename}" if exc.filename else ""
        click.echo(f"hpq: error: cannot write{where}: {exc.strerror}", err=True)
        sys.exit(EXIT_FAILED)
    except Exception as exc:  # noqa: BLE001 - a bug: one line that says so; HPQ_DEBUG=1 shows the traceback
        _internal_error(exc)
    sys.exit(rv if isinstance(rv, int) else 0)


# errno values that mean the output's device failed (full, over quota, read-only, I/O error).
_DEVICE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO})


def _internal_error(exc: BaseException) -> NoReturn:
    if os.environ.get("HPQ_DEBUG"):
        raise exc
    click.echo(f"hpq: internal error: {type(exc).__name__}: {one_line(str(exc))} "
               "(a bug in hpq: rerun with HPQ_DEBUG=1 for the traceback and report it)", err=True)
    sys.exit(EXIT_FAILED)


if __name__ == "__main__":
    main()
