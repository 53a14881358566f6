"""Service managers: systemd on a HyperPod node, direct process start where there is no systemd.

Both read the same unit files and drop-ins, so what the lifecycle writes (a drop-in
next to the vendor unit, never an edit of it) is exactly what configures the daemon
in tests too: the direct manager reads the vendor unit and its ``<unit>.d/*.conf``
drop-ins under the node root, applies ``ExecStart=`` resets, ``Environment=``,
``EnvironmentFile=``, ``ConditionPathExists=``, ``User=``/``Group=`` and ``RuntimeDirectory=``
the way systemd does, and runs the command in a new session, keeping its PID under
``<root>/run/hpq``. Both mask a unit the same way (a /dev/null link in /etc/systemd/system), and
neither starts a masked one.
"""

from __future__ import annotations

import glob
import grp
import os
import pwd
import re
import shlex
import signal
import subprocess
import time
from typing import Dict, List, Optional, Tuple

from . import files

UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system")
DROPIN_DIR = "/etc/systemd/system"
# systemd.unit(5): a unit file linked to /dev/null (or empty) is masked: systemd never starts it.
MASK_TARGET = "/dev/null"


class ServiceError(Exception):
    pass


def manager(ctx):
    kind = ctx.s.service_manager
    if kind == "systemd":
        return SystemdManager(ctx)
    if kind == "direct":
        return DirectManager(ctx)
    raise ServiceError("unknown service manager %r (use systemd or direct)" % kind)


class _Base:
    def __init__(self, ctx):
        self.ctx = ctx

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

    def _disable(self, unit: str) -> None:
        raise NotImplementedError

    def _mask_file(self, unit: str) -> None:
        raise NotImplementedError

    def stop(self, unit: str) -> None:
        raise NotImplementedError

    def write_dropin(self, unit: str, name: str, text: str) -> bool:
        changed = files.write_file(self.dropin_path(unit, name), text)
        if changed:
            self.reload()
        return changed

    def reload(self) -> None:
        pass


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


class SystemdManager(_Base):
    """systemctl, as on a HyperPod node."""

    def _systemctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        res = subprocess.run(["systemctl"] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             universal_newlines=True, timeout=300)
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


class DirectManager(_Base):
    """Start the unit's ExecStart as a plain process (tests, containers without systemd)."""

    def pid_file(self, unit: str) -> str:
        return self.ctx.path("/run/hpq/services/%s.pid" % unit)

    def pid(self, unit: str) -> Optional[int]:
        try:
            with open(self.pid_file(unit)) as fh:
                pid = int(fh.read().strip())
        except (OSError, ValueError):
            return None
        return pid if pid_alive(pid) else None

    def is_active(self, unit: str) -> bool:
        return self.pid(unit) is not None

    def command(self, unit: str, sections: Optional[Dict[str, Dict[str, List[str]]]] = None
                ) -> Tuple[List[str], Dict[str, str], str]:
        """(argv, extra environment, Type=) the way systemd would run the unit."""
        sections = self.unit_sections(unit) if sections is None else sections
        service = sections.get("Service", {})
        for cond in sections.get("Unit", {}).get("ConditionPathExists", []):
            negate = cond.startswith("!")
            exists = os.path.exists(self.ctx.path(cond.lstrip("!")))
            if exists == negate:
                raise ServiceError("%s: condition ConditionPathExists=%s not met" % (unit, cond))
        env: Dict[str, str] = {}
        for entry in service.get("Environment", []):
            for item in shlex.split(entry):
                if "=" in item:
                    k, v = item.split("=", 1)
                    env[k] = v
        # systemd: a variable set in an EnvironmentFile wins over Environment=.
        for ef in service.get("EnvironmentFile", []):
            optional = ef.startswith("-")
            path = self.ctx.path(ef.lstrip("-"))
            text = files.read_text(path)
            if text is None:
                if optional:
                    continue
                raise ServiceError("%s: EnvironmentFile %s missing" % (unit, path))
            for line in text.splitlines():
                line = line.strip()
                if line and not line.startswith("#") and "=" in line:
                    k, v = line.split("=", 1)
                    env[k.strip()] = " ".join(shlex.split(v)) if v.strip() else ""
        line = exec_start(unit, sections).lstrip("-@+!:")
        argv: List[str] = []
        for word in shlex.split(line):
            m = re.match(r"^\$([A-Za-z_][A-Za-z0-9_]*)$", word)
            if m:
                argv += env.get(m.group(1), "").split()
                continue
            argv.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda mm: env.get(mm.group(1), ""), word))
        return argv, env, (service.get("Type") or ["simple"])[-1]

    def ensure_running(self, unit: str, restart: bool = False) -> str:
        if self.is_masked(unit):  # as systemctl start refuses: "Unit ... is masked."
            raise ServiceError("%s is masked: not started" % unit)
        if self.is_active(unit):
            if not restart:
                return "already running"
            self.stop(unit)
            self._start(unit)
            return "restarted"
        self._start(unit)
        return "started"

    def _disable(self, unit: str) -> None:
        """What ``systemctl disable`` removes: the unit's links in the *.wants/*.requires folders of /etc."""
        for link in glob.glob(self.ctx.path("%s/*.wants/%s" % (DROPIN_DIR, unit))) + glob.glob(
                self.ctx.path("%s/*.requires/%s" % (DROPIN_DIR, unit))):
            if os.path.islink(link):
                os.unlink(link)

    def _mask_file(self, unit: str) -> None:
        path = self.ctx.path("%s/%s" % (DROPIN_DIR, unit))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.symlink(MASK_TARGET, path)

    @staticmethod
    def _credentials(unit: str, service: Dict[str, List[str]]):
        """(uid, gid, user) from the unit's User=/Group= (systemd.exec), None when it runs as root."""
        user = (service.get("User") or [""])[-1]
        group = (service.get("Group") or [""])[-1]
        if not user or os.geteuid() != 0:
            return None
        try:
            pw = pwd.getpwnam(user)
        except KeyError:
            raise ServiceError("%s: User=%s does not exist" % (unit, user)) from None
        gid = grp.getgrnam(group).gr_gid if group else pw.pw_gid
        return pw.pw_uid, gid, user

    def _runtime_directories(self, service: Dict[str, List[str]], creds) -> None:
        """RuntimeDirectory= under /run, owned by the unit's user, as systemd creates them before start."""
        mode = int((service.get("RuntimeDirectoryMode") or ["0755"])[-1], 8)
        for entry in service.get("RuntimeDirectory", []):
            for name in entry.split():
                path = self.ctx.path("/run/" + name)
                os.makedirs(path, exist_ok=True)
                os.chmod(path, mode)
                if creds:
                    os.chown(path, creds[0], creds[1])

    def _start(self, unit: str) -> None:
        sections = self.unit_sections(unit)  # unit file and drop-ins, read once for everything below
        service = sections.get("Service", {})
        argv, env, kind = self.command(unit, sections)
        log_path = self.ctx.path("/var/log/hpq/%s.log" % unit)
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        os.makedirs(os.path.dirname(self.pid_file(unit)), exist_ok=True)
        full_env = dict(os.environ)
        full_env.update(env)
        creds = self._credentials(unit, service)
        self._runtime_directories(service, creds)

        def drop_privileges():  # in the child, before exec: the unit's User=/Group=
            if creds:
                os.setgid(creds[1])
                os.initgroups(creds[2], creds[1])
                os.setuid(creds[0])

        with open(log_path, "ab") as log:
            try:
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                        env=full_env, cwd="/", start_new_session=True, close_fds=True,
                                        preexec_fn=drop_privileges if creds else None)
            except OSError as exc:
                raise ServiceError("%s: cannot run %s: %s" % (unit, argv[0], exc)) from None
        if kind == "forking":
            rc = proc.wait(timeout=60)
            if rc != 0:
                raise ServiceError("%s exited %d at start; see %s" % (unit, rc, log_path))
            pidfile = service.get("PIDFile", [""])[-1]
            pid = None
            for _ in range(50):
                text = files.read_text(self.ctx.path(pidfile)) if pidfile else None
                if text and text.strip().isdigit():
                    pid = int(text.strip())
                    break
                time.sleep(0.1)
            if pid is None:
                raise ServiceError("%s forked but left no PIDFile" % unit)
        else:
            pid = proc.pid
            time.sleep(0.5)
            if proc.poll() is not None:
                raise ServiceError("%s exited %s right after start; last log lines: %s"
                                   % (unit, proc.returncode, _tail(log_path)))
        files.write_file(self.pid_file(unit), "%d\n" % pid)

    def reload_config(self, unit: str) -> str:
        """SIGHUP, what the units' ExecReload does for sshd and slurmd; a stopped daemon is left alone."""
        pid = self.pid(unit)
        if pid is None:
            return "not running"
        os.kill(pid, signal.SIGHUP)
        return "reloaded"

    def stop(self, unit: str) -> None:
        pid = self.pid(unit)
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        for _ in range(100):
            if not pid_alive(pid):
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open("/proc/%d/stat" % pid) as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (OSError, IndexError):
        return True


def _tail(path: str, n: int = 8) -> str:
    text = files.read_text(path) or ""
    return " | ".join(text.strip().splitlines()[-n:])
