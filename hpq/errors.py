"""Expected failures, each with the exit code the CLI uses (docs/design.md, "Exit codes and error lines").

Standard library only, so node-side code may raise them too.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class HpqError(Exception):
    """An expected error: printed as one line, never as a traceback."""

    exit_code = EXIT_FAILED


class UsageError(HpqError):
    """Bad input from the user: unknown variant, size, parameter, instance type, bucket name..."""

    exit_code = EXIT_USAGE


class OperationFailed(HpqError):
    """The operation ran and did not succeed (stack failed, test fell short)."""

    exit_code = EXIT_FAILED
