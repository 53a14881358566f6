"""Session-wide test set-up.

The test command may run from a virtualenv that is not on PATH (``/tmp/v/bin/python -m pytest``):
console scripts the tests start by name (torchrun, aws, moto_server, cfn-lint) live in the
interpreter's own scripts directory, so that directory goes first on PATH for every subprocess.
"""

from __future__ import annotations

import os
import sysconfig

_scripts = sysconfig.get_path("scripts")
if _scripts and _scripts not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _scripts + os.pathsep + os.environ.get("PATH", "")
