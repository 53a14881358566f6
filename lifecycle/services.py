"""The node's service manager: systemd, through ``systemctl``, as on a HyperPod node.

The lifecycle configures a daemon with a drop-in next to the vendor unit (never an edit of it), reads the
unit's merged settings (vendor file, then ``<unit>.d/*.conf`` drop-ins, as systemd.unit(5) orders them:
https://www.freedesktop.org/software/systemd/man/latest/systemd.unit.html) to build its own ``ExecStart=``,
and starts, stops, reloads and masks units with ``systemctl`` (``HPQ_SYSTEMCTL_CMD``, default ``systemctl``
from PATH). Where systemd is not PID 1 (the rehearsal, the tests) the ``systemctl`` on PATH is hpq's stand-in
(standins/systemctl.py), which never ships in the node bundle.
"""

from __future__ import annotations

import glob
import os
import shlex
import subprocess
from typing import Dict, List, Optional

from . import files

UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system")
DROPIN_DIR = "/etc/systemd/system"
# systemd.unit(5): a unit file linked to /dev/null (or empty) is masked: systemd never starts it.
MASK_TARGET = "/dev/null"


class ServiceError(Exception):
    pass


class UnitFiles:
    """The unit files under the node root, read as systemd reads them."""

    def __init__(self, ctx):
        self.ctx = ctx  # anything with path(node_path): a lifecycle Context

    def dropin_path(self, unit: str, name: str) -> str:
        return self.ctx.path("%s/%s.d/%s.conf" % (DROPIN_DIR, unit, name))

    def unit_path(self, unit: str) -> Optional[str]:
        for d in UNIT_DIRS:
            p = self.ctx.path("%s/%s" % (d, unit))
            if os.path.isfile(p):
                return p
        return None

    def unit_sections(self, unit: str, with_dropins: bool = True,
                      without: Optional[str] = None) -> Dict[str, Dict[str, List[str]]]:
        """The unit's settings as systemd would merge them: vendor file, then drop-ins by name.

        ``without``: leave out our own drop-in of that name (what the unit is without our change).
        """
        path = self.unit_path(unit)
        if path is None:
            raise ServiceError("no unit file %s under %s" % (unit, ", ".join(self.ctx.path(d) for d in UNIT_DIRS)))
        sections: Dict[str, Dict[str, List[str]]] = {}
        paths = [path]
        if with_dropins:
            dropins: Dict[str, str] = {}
            for d in reversed(UNIT_DIRS):  # /etc wins over /lib for the same file name
                for p in glob.glob(self.ctx.path("%s/%s.d/*.conf" % (d, unit))):
                    dropins[os.path.basename(p)] = p
            dropins.pop("%s.conf" % without, None)
            paths += [dropins[k] for k in sorted(dropins)]
        for p in paths:
            _parse_unit(files.read_text(p) or "", sections)
        return sections

    def is_masked(self, unit: str) -> bool:
        """The first unit file systemd would load is a link to /dev/null or empty (systemd.unit(5))."""
        for d in UNIT_DIRS:
            p = self.ctx.path("%s/%s" % (d, unit))
            if os.path.islink(p) and os.readlink(p) == MASK_TARGET:
                return True
            if os.path.isfile(p):
                return os.path.getsize(p) == 0
        return False


def _parse_unit(text: str, sections: Dict[str, Dict[str, List[str]]]) -> None:
    section = None
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = sections.setdefault(line[1:-1], {})
            continue
        if section is None or "=" not in line:
            continue
        key, value = line.split("=", 1)
        key, value = key.strip(), value.strip()
        if value == "":
            if key.startswith("Condition"):
                for k in [k for k in section if k.startswith("Condition")]:
                    section[k] = []
            section[key] = []
        else:
            section.setdefault(key, []).append(value)


def exec_start(unit_name: str, sections: Dict[str, Dict[str, List[str]]]) -> str:
    starts = sections.get("Service", {}).get("ExecStart", [])
    if not starts:
        raise ServiceError("%s has no ExecStart" % unit_name)
    return starts[-1]


def exec_start_with(vendor_exec: str, flag: str, value: str) -> str:
    """A unit's ExecStart command with ``flag value`` appended, for a drop-in that replaces ExecStart.

    A flag the vendor command already sets (``flag X`` or ``flag=X``) is dropped so ours is the only one;
    ``$VARS`` stay unquoted so systemd still expands them (the AMI's slurmd uses ``$SLURMD_OPTIONS``).
    """
    argv = shlex.split(vendor_exec)
    if flag in argv:
        i = argv.index(flag)
        del argv[i:i + 2]
    argv = [a for a in argv if not a.startswith(flag + "=")]
    cmd = " ".join(a if a.startswith("$") else shlex.quote(a) for a in argv)
    return "%s %s %s" % (cmd, flag, value)


class SystemdManager(UnitFiles):
    """systemctl, as on a HyperPod node."""

    def _set_aside(self, unit: str, aside: str) -> bool:
        """Move a unit file in /etc/systemd/system to ``aside`` (``systemctl mask`` refuses to replace one)."""
        path = self.ctx.path("%s/%s" % (DROPIN_DIR, unit))
        if os.path.islink(path) or not os.path.isfile(path):
            return False
        target = self.ctx.path("%s/%s" % (DROPIN_DIR, aside))
        if os.path.exists(target):  # set aside before: keep that copy, drop this one
            os.unlink(path)
        else:
            os.rename(path, target)
        return True

    def mask(self, unit: str, aside: str) -> str:
        """Stop, disable and mask ``unit``; its file in /etc/systemd/system, if any, is kept as ``aside``."""
        if self.is_masked(unit):
            self.stop(unit)  # masked but left running (by hand): stopped, nothing else changes
            return "%s already masked" % unit
        self.stop(unit)
        self._disable(unit)
        moved = self._set_aside(unit, aside)
        self._mask_file(unit)
        return "%s stopped, disabled and masked%s" % (unit, " (unit file kept as %s)" % aside if moved else "")

    def write_dropin(self, unit: str, name: str, text: str) -> bool:
        changed = files.write_file(self.dropin_path(unit, name), text)
        if changed:
            self.reload()
        return changed

    def _systemctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        res = subprocess.run(list(self.ctx.s.systemctl_cmd) + list(args), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, universal_newlines=True, timeout=300)
        if check and res.returncode != 0:
            raise ServiceError("systemctl %s failed (%d): %s" % (" ".join(args), res.returncode, res.stdout.strip()))
        return res

    def reload(self) -> None:
        self._systemctl("daemon-reload")

    def is_active(self, unit: str) -> bool:
        return self._systemctl("is-active", "--quiet", unit, check=False).returncode == 0

    def ensure_running(self, unit: str, restart: bool = False) -> str:
        self._systemctl("enable", unit, check=False)
        if self.is_active(unit):
            if restart:
                self._systemctl("restart", unit)
                return "restarted"
            return "already running"
        self._systemctl("start", unit)
        return "started"

    def stop(self, unit: str) -> None:
        self._systemctl("stop", unit, check=False)

    def _disable(self, unit: str) -> None:
        self._systemctl("disable", unit, check=False)  # a unit that does not exist has nothing to disable

    def _mask_file(self, unit: str) -> None:
        self._systemctl("mask", unit)
        self.reload()

    def reload_config(self, unit: str) -> str:
        """Make a running daemon re-read its configuration (systemctl reload); a stopped one is left alone."""
        if not self.is_active(unit):
            return "not running"
        self._systemctl("reload", unit)
        return "reloaded"
