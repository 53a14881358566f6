"""The ``hpq`` click application.

Commands are registered by dotted path and imported only when invoked, so that
``hpq --help`` never pays for boto3, troposphere or kubernetes.
"""

from __future__ import annotations

import errno
import importlib
import os
import signal
import sys
from typing import Any, NoReturn

import click

from hpq import __version__
from hpq.errors import EXIT_FAILED, EXIT_USAGE, HpqError
from hpq.interrupts import hard_interrupts
from hpq.text import show

# name -> (module, attribute, one-line help). Help lives here so listing commands imports nothing.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "synth": ("hpq.cli.commands.synth", "synth", "Render CloudFormation templates for a variant (no AWS calls)."),
    "lint": ("hpq.cli.commands.synth", "lint", "Run cfn-lint over rendered templates; non-zero on any finding."),
    "nccl-env": ("hpq.cli.commands.nccl", "nccl_env", "Show the EFA/NCCL environment a node of a type gets."),
    "report": ("hpq.cli.commands.report_html", "report", "Write test results as one self-contained HTML page (charts)."),
    "nccl-report": ("hpq.cli.commands.report", "nccl_report", "Parse nccl-tests output and judge it against the catalog."),
    "deploy": ("hpq.cli.commands.deploy", "deploy", "Package, create or update a variant's stack, follow it."),
    "publish": ("hpq.cli.commands.deploy", "publish", "Upload every variant and print Launch Stack links."),
    "status": ("hpq.cli.commands.stacks", "status", "Show a stack, its outputs and its HyperPod cluster: groups, nodes, FSx."),
    "list": ("hpq.cli.commands.list_", "list_clusters", "List hpq's HyperPod clusters: variant, state, groups, age, cost."),
    "prices": ("hpq.cli.commands.prices", "prices", "Refresh or show the price file the cost estimates use."),
    "destroy": ("hpq.cli.commands.stacks", "destroy", "Delete a stack (with confirmation) and follow the deletion."),
    "stack-errors": ("hpq.cli.commands.stacks", "stack_errors", "Root-cause failures through nested stacks."),
    "check-quotas": ("hpq.cli.commands.quotas", "check_quotas", "Check the service quotas a deploy of that size needs."),
    "connect": ("hpq.cli.commands.connect", "connect", "Open an SSM session on a HyperPod node."),
    "remote": ("hpq.cli.commands.remote", "remote", "Run a command on the controller over SSH through SSM."),
    "test": ("hpq.cli.commands.test", "test",
             "Prove a cluster works: nccl, nanogpt, nccom, sweep, validate; same on Slurm, EKS, rehearsal."),
    "doctor": ("hpq.cli.commands.doctor", "doctor",
               "Find the sick node: per-node findings, drift, HyperPod's view; --fix drains, reboots, replaces."),
    "remote-nccl-test": ("hpq.cli.commands.remote", "remote_nccl_test", "Run run-nccl-test on the controller, report."),
    "eks": ("hpq.cli.commands.eks", "eks", "Run the validation tests as Kubernetes jobs on an EKS cluster."),
    "observe": ("hpq.cli.commands.observe", "observe",
                "Show the Managed Prometheus workspace, its endpoints and the Grafana dashboard import commands."),
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
@click.option("--debug", is_flag=True, expose_value=False, is_eager=True, callback=lambda ctx, param, on: (
    os.environ.__setitem__("HPQ_DEBUG", "1") if on else None),
    help="Show the traceback of an internal error (as HPQ_DEBUG=1 does), for a bug report.")
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


def main(argv: list[str] | None = None, process_entry: bool = False) -> None:
    """Entry point: expected errors become one line on stderr and an exit code, never a traceback.

    While a command runs, Ctrl-C is a KeyboardInterrupt so that its cleanups (``finally``, a
    rehearsal's teardown) run; before it (``hpq.console``) and after it, when nothing is left
    to clean up, Ctrl-C ends the process at once with one line and exit 130.
    """
    args = sys.argv[1:] if argv is None else list(argv)
    if sys.stdout is None:  # `hpq ... >&-`: every command's answer would vanish without a word
        if sys.stderr is not None:
            sys.stderr.write("hpq: error: standard output is closed\n")
        sys.exit(EXIT_USAGE)
    _close_unreadable_stdin()
    bad = _undecodable(args)
    if bad is not None:
        click.echo(f"hpq: error: argument {show(bad)} is not valid UTF-8", err=True)
        sys.exit(EXIT_USAGE)
    previous = _set_sigint(signal.default_int_handler)
    try:
        rv = cli.main(args=args, prog_name="hpq", standalone_mode=False)
    except BaseException as exc:  # noqa: BLE001 - every way out becomes one line and an exit code
        _after_command(previous, process_entry)
        code = _exit_code(exc)
    else:
        _after_command(previous, process_entry)
        code = rv if isinstance(rv, int) else 0
    if process_entry:
        _flush_stdout()
    sys.exit(code)


def _close_unreadable_stdin() -> None:
    """A stdin opened write-only (`0>file`) or not open at all reads like a closed one: every command
    that reads stdin already answers a closed one with one line (it was EBADF: "internal error")."""
    import fcntl

    if sys.stdin is None:
        return
    try:
        fd = sys.stdin.fileno()
    except (OSError, ValueError, AttributeError):
        return  # not a file descriptor (an in-memory stream a caller put there)
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    except OSError:
        sys.stdin = None
        return
    if flags & os.O_ACCMODE == os.O_WRONLY:
        sys.stdin = None


def _set_sigint(handler: Any) -> Any:
    try:
        return signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread
        return None


def _after_command(previous: Any, process_entry: bool) -> None:
    if process_entry:
        hard_interrupts()
    elif previous is not None:
        _set_sigint(previous)


def _flush_stdout() -> None:
    """Flush now, so that a reader that left (`| head`) is not a traceback at interpreter exit."""
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):
        _silence_stdout()
    except OSError as exc:
        _silence_stdout()
        click.echo(f"hpq: error: cannot write: {exc.strerror}", err=True)
        sys.exit(EXIT_FAILED)


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _exit_code(exc: BaseException) -> int:
    """Print the one line an exception deserves; return the exit code."""
    if isinstance(exc, SystemExit):
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_FAILED)
    if isinstance(exc, HpqError):
        _say(f"hpq: error: {one_line(str(exc))}")
        return exc.exit_code
    if isinstance(exc, click.exceptions.Abort | KeyboardInterrupt):
        _say("hpq: interrupted")
        return 130
    if isinstance(exc, click.ClickException):
        # Usage errors from click itself: one line, without click's multi-line usage block.
        _say(f"hpq: error: {one_line(exc.format_message())}")
        return EXIT_USAGE if exc.exit_code == 2 else exc.exit_code
    if isinstance(exc, BrokenPipeError):  # `hpq eks render ... | head`: the reader left; not an error of ours
        _silence_stdout()
        return EXIT_FAILED
    if isinstance(exc, OSError) and exc.errno in _DEVICE_ERRNOS:
        # A full disk or a broken device under our output or files: the machine's problem, not a bug.
        where = f" {exc.filename}" if exc.filename else ""
        _say(f"hpq: error: cannot write{where}: {exc.strerror}")
        return EXIT_FAILED
    if isinstance(exc, OSError) and exc.errno in _USER_ERRNOS:
        where = f" {exc.filename}" if exc.filename else ""
        _say(f"hpq: error: cannot use{where}: {exc.strerror}")
        return EXIT_USAGE
    if not isinstance(exc, Exception):
        raise exc
    _internal_error(exc)


def _say(line: str) -> None:
    try:
        click.echo(line, err=True)
    except (OSError, ValueError, AttributeError):
        pass  # stderr closed: the exit code still tells


# errno values that mean the output's device failed (full, over quota, read-only, I/O error).
_DEVICE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO})
# errno values that mean a path the user gave cannot be used as given (too long, a loop of links).
_USER_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.ELOOP})


def _internal_error(exc: BaseException) -> NoReturn:
    if os.environ.get("HPQ_DEBUG"):
        raise exc
    click.echo(f"hpq: internal error: {type(exc).__name__}: {one_line(str(exc))} "
               "(a bug in hpq: rerun with --debug, e.g. `hpq --debug COMMAND ...`, for the traceback and report it)", err=True)
    sys.exit(EXIT_FAILED)


if __name__ == "__main__":
    main(process_entry=True)
