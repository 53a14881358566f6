"""The ``systemctl`` stand-in: what systemd does for the lifecycle on a HyperPod node, where systemd is not PID 1.

The lifecycle has one service manager, the real one: it runs ``systemctl`` (lifecycle/services.py). There is
no systemd on the hosts that run the rehearsal and the tests, so they put this command first on the node's
PATH (``install``: a small shim ``systemctl`` that runs ``python -m hpq.standins.systemctl --node-root ROOT``),
or name it in ``HPQ_SYSTEMCTL_CMD``. It never ships in the node bundle: a real node has systemd.

It implements the verbs the lifecycle and the node programs call, with systemd's semantics, on unit files under
the node root (the vendor unit from the first of the unit directories that has it, then every
``<unit>.d/*.conf`` drop-in in file-name order, /etc's winning over /lib's of the same name):

- ``start``, ``stop``, ``restart``, ``reload``, ``is-active``, ``enable``, ``disable``, ``mask``,
  ``daemon-reload``, ``show -p LoadState,ActiveState,SubState,MainPID``;
- systemd.service(5) (https://www.freedesktop.org/software/systemd/man/latest/systemd.service.html):
  ``ExecStart=`` (an empty assignment resets the list; more than one is refused unless Type=oneshot), ``Type=``
  simple / exec / notify / forking (with ``PIDFile=``; other types are refused as not implemented); a simple service's start succeeds once it is forked (its death shows in
  is-active as ``failed``), a forking one's when its parent exits 0; notify is taken as ready when it still runs
  half a second later (there is no NOTIFY_SOCKET here);
- systemd.exec(5) (https://www.freedesktop.org/software/systemd/man/latest/systemd.exec.html):
  ``Environment=``, ``EnvironmentFile=`` (``-`` for optional; a later assignment wins, files after
  Environment=), ``$VAR`` (split into words) and ``${VAR}`` (one word) in the command line, ``User=``/``Group=``
  (when run as root), ``RuntimeDirectory=`` under /run;
- systemd.unit(5) (https://www.freedesktop.org/software/systemd/man/latest/systemd.unit.html):
  ``ConditionPathExists=`` (``!`` negates; an empty assignment resets every condition): a condition that fails
  skips the start without an error, and the unit stays inactive; a unit linked to /dev/null (or an empty file) is
  masked: start refuses it, ``mask`` links it (refusing a real file in /etc/systemd/system);
- the loaded configuration: a running unit keeps the configuration it was started with until ``daemon-reload``
  (a restart without one uses the old one and warns, as systemctl does); a stopped unit is read from disk again;
- systemctl(1) (https://www.freedesktop.org/software/systemd/man/latest/systemctl.html, "Exit status"):
  is-active exits 0 when active, 3 when not (also for a unit that does not exist, printing ``inactive``);
  start/stop/restart/reload of a unit that does not exist exit 5 with ``Failed to start X.service: Unit
  X.service not found.`` on stderr; a refused start (masked, failed) exits 1.

Not done: ExecStartPre=/ExecStartPost= are not run (the tests' node roots are directories of one host, and the
AMI's ExecStartPre would act on the host's own paths), no dependencies (After=/Requires=), no journal: each
unit's output goes to ``/var/log/hpq/<unit>.log`` under the node root. Main PIDs are kept in
``/run/hpq/services/<unit>.pid`` (``PID_DIR``) under the node root, so the tests' teardown can stop what it
started. Standard library only.
"""

from __future__ import annotations

import argparse
import glob
import grp
import json
import os
import pwd
import re
import shlex
import signal
import subprocess
import sys
import time

from hpq.lifecycle import files, services

PID_DIR = "/run/hpq/services"
LOG_DIR = "/var/log/hpq"
Sections = dict[str, dict[str, list[str]]]

# systemctl(1) "Exit status": 3 program is not running (is-active); the LSB code 5, "program is not installed",
# is what systemctl returns for a unit it cannot find.
EXIT_FAILED = 1
EXIT_NOT_ACTIVE = 3
EXIT_NOT_FOUND = 5


class Refused(Exception):
    """systemctl's answer for a refused request: the message (stderr) and the exit code."""

    def __init__(self, message: str, code: int = EXIT_FAILED):
        super().__init__(message)
        self.code = code


def unit_name(name: str) -> str:
    """systemctl(1): a name without a unit type suffix means ``.service``."""
    return name if re.search(r"\.(service|socket|target|timer|mount|path|slice|scope|device|swap)$", name) \
        else name + ".service"


def pid_alive(pid: int) -> bool:
    """True for a running process; a zombie (exited, not yet reaped by its parent) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (OSError, IndexError):
        return True


class Systemd:
    """The service manager's state for one node root: unit files (read through lifecycle/services' reader, the
    files a node has) plus the stand-in's own PID files, logs and loaded configurations under the root."""

    def __init__(self, root: str):
        self.root = root or "/"
        self.files = services.UnitFiles(_RootOnly(self.root))

    def path(self, node_path: str) -> str:
        return node_path if self.root == "/" else os.path.join(self.root, node_path.lstrip("/"))

    def _state(self, unit: str, suffix: str) -> str:
        return self.path(f"{PID_DIR}/{unit}.{suffix}")

    # ---- states

    def load_state(self, unit: str) -> str:
        if self.files.is_masked(unit):
            return "masked"
        return "loaded" if self.files.unit_path(unit) else "not-found"

    def recorded_pid(self, unit: str) -> int | None:
        text = files.read_text(self._state(unit, "pid"))
        return int(text.strip()) if text and text.strip().isdigit() else None

    def main_pid(self, unit: str) -> int | None:
        pid = self.recorded_pid(unit)
        return pid if pid and pid_alive(pid) else None

    def active_state(self, unit: str) -> str:
        """active; failed when its main process is gone without a stop (or the start failed); else inactive."""
        if self.main_pid(unit):
            return "active"
        if self.recorded_pid(unit) or os.path.exists(self._state(unit, "failed")):
            return "failed"
        return "inactive"

    # ---- the loaded configuration

    def loaded(self, unit: str) -> Sections:
        """The configuration a running unit was started with, else the files on disk (systemd re-reads a unit it
        garbage-collected; daemon-reload drops every loaded copy)."""
        text = files.read_text(self._state(unit, "loaded.json")) if self.main_pid(unit) else None
        return json.loads(text) if text else self.files.unit_sections(unit)

    def changed_on_disk(self, unit: str) -> bool:
        text = files.read_text(self._state(unit, "loaded.json"))
        return bool(text) and self.main_pid(unit) is not None and json.loads(text) != self.files.unit_sections(unit)

    def daemon_reload(self) -> None:
        for p in glob.glob(self.path(f"{PID_DIR}/*.loaded.json")):
            os.unlink(p)

    # ---- the command line as systemd builds it

    def conditions_met(self, sections: Sections) -> bool:
        for cond in sections.get("Unit", {}).get("ConditionPathExists", []):
            negate = cond.startswith("!")
            if os.path.exists(self.path(cond.lstrip("!"))) == negate:
                return False
        return True

    def environment(self, unit: str, service: dict[str, list[str]]) -> dict[str, str]:
        env: dict[str, str] = {}
        for entry in service.get("Environment", []):
            for item in shlex.split(entry):
                if "=" in item:
                    k, v = item.split("=", 1)
                    env[k] = v
        for ef in service.get("EnvironmentFile", []):  # read after Environment=: a variable set here wins
            optional = ef.startswith("-")
            text = files.read_text(self.path(ef.lstrip("-")))
            if text is None:
                if optional:
                    continue
                raise Refused(f"{unit}: Failed to load environment files: {ef}: No such file or directory")
            for line in text.splitlines():
                line = line.strip()
                if line and line[0] not in "#;" and "=" in line:
                    k, v = line.split("=", 1)
                    env[k.strip()] = " ".join(shlex.split(v)) if v.strip() else ""
        return env

    def command(self, unit: str, sections: Sections) -> tuple[list[str], dict[str, str]]:
        """(argv, the unit's environment) for the unit's ExecStart, the way systemd expands it."""
        service = sections.get("Service", {})
        if len(service.get("ExecStart", [])) > 1 and (service.get("Type") or ["simple"])[-1] != "oneshot":
            # systemd.service(5): several ExecStart= only for Type=oneshot; the unit does not load ("bad-setting")
            raise Refused(f"Failed to start {unit}: Unit {unit} has a bad unit file setting. ({unit} has more than "
                          "one ExecStart= setting, which is only allowed for Type=oneshot services. Refusing.)")
        env = self.environment(unit, service)
        try:
            line = services.exec_start(unit, sections).lstrip("-@+!:")
        except services.ServiceError:
            raise Refused(f"{unit} has no ExecStart= setting, refusing.") from None
        argv: list[str] = []
        for word in shlex.split(line):
            m = re.match(r"^\$([A-Za-z_][A-Za-z0-9_]*)$", word)
            if m:
                argv += env.get(m.group(1), "").split()
                continue
            argv.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda mm: env.get(mm.group(1), ""), word))
        return argv, env

    @staticmethod
    def credentials(unit: str, service: dict[str, list[str]]) -> tuple[int, int, str] | None:
        """(uid, gid, user) from User=/Group=; None when it runs as the caller (not root, or no User=)."""
        user = (service.get("User") or [""])[-1]
        group = (service.get("Group") or [""])[-1]
        if not user or os.geteuid() != 0:
            return None
        try:
            pw = pwd.getpwnam(user)
        except KeyError:
            raise Refused(f"{unit}: Failed to determine user credentials: No such process (User={user})") \
                from None
        return pw.pw_uid, grp.getgrnam(group).gr_gid if group else pw.pw_gid, user

    def runtime_directories(self, service: dict[str, list[str]], creds) -> None:
        mode = int((service.get("RuntimeDirectoryMode") or ["0755"])[-1], 8)
        for entry in service.get("RuntimeDirectory", []):
            for name in entry.split():
                path = self.path("/run/" + name)
                os.makedirs(path, exist_ok=True)
                os.chmod(path, mode)
                if creds:
                    os.chown(path, creds[0], creds[1])

    # ---- verbs

    def _known(self, unit: str, verb: str) -> None:
        if self.load_state(unit) == "not-found" and not self.main_pid(unit):
            raise Refused(f"Failed to {verb} {unit}: Unit {unit} not found.", EXIT_NOT_FOUND)

    def start(self, unit: str, sections: Sections | None = None) -> None:
        self._known(unit, "start")
        if self.load_state(unit) == "masked":
            raise Refused(f"Failed to start {unit}: Unit {unit} is masked.")
        if self.main_pid(unit):
            return
        sections = self.files.unit_sections(unit) if sections is None else sections
        if os.path.exists(self._state(unit, "pid")):
            os.unlink(self._state(unit, "pid"))
        log_path = self.path(f"{LOG_DIR}/{unit}.log")
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        os.makedirs(self.path(PID_DIR), exist_ok=True)
        for stale in ("failed", "loaded.json"):
            if os.path.exists(self._state(unit, stale)):
                os.unlink(self._state(unit, stale))
        if not self.conditions_met(sections):  # systemd.unit(5): skipped, not failed
            with open(log_path, "a") as log:
                log.write(f"Condition check resulted in {unit} being skipped.\n")
            return
        try:
            self._spawn(unit, sections, log_path)
        except Refused:
            files.write_file(self._state(unit, "failed"), "")
            raise
        files.write_file(self._state(unit, "loaded.json"), json.dumps(sections))

    def _spawn(self, unit: str, sections: Sections, log_path: str) -> None:
        service = sections.get("Service", {})
        argv, env = self.command(unit, sections)
        kind = (service.get("Type") or ["simple"])[-1]
        if kind not in ("simple", "exec", "notify", "forking"):
            raise Refused(f"{unit}: Type={kind} is not implemented by the systemctl stand-in")
        creds = self.credentials(unit, service)
        self.runtime_directories(service, creds)
        full_env = dict(os.environ)
        full_env.update(env)

        def drop_privileges() -> None:  # in the child, before exec: the unit's User=/Group=
            if creds:
                os.setgid(creds[1])
                os.initgroups(creds[2], creds[1])
                os.setuid(creds[0])

        failed = (f"Job for {unit} failed because the control process exited with error code.\nSee the stand-in's "
                  f"log {log_path} for details (systemd: \"journalctl -xeu {unit}\").")
        with open(log_path, "ab") as log:
            try:
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                        env=full_env, cwd="/", start_new_session=True, close_fds=True,
                                        preexec_fn=drop_privileges if creds else None)
            except OSError as exc:
                log.write(("{}: Failed to execute {}: {}\n".format(unit, argv[0] if argv else "", exc)).encode())
                if kind == "simple":  # forked, then exec failed: the start job itself succeeded
                    files.write_file(self._state(unit, "failed"), "")
                    return
                raise Refused(failed) from None
        pid = proc.pid
        if kind == "forking":
            if proc.wait(timeout=90) != 0:
                raise Refused(failed + _tail(log_path))
            pidfile = (service.get("PIDFile") or [""])[-1]
            pid = 0
            for _ in range(50):
                text = files.read_text(self.path(pidfile)) if pidfile else None
                if text and text.strip().isdigit():
                    pid = int(text.strip())
                    break
                time.sleep(0.1)
            if not pid:
                raise Refused(f"{unit}: New main PID could not be read from PIDFile={pidfile}.\n{failed}")
        elif kind == "notify":  # ready unless it dies first (no NOTIFY_SOCKET here: half a second's grace)
            time.sleep(0.5)
            if proc.poll() is not None:
                raise Refused(failed + _tail(log_path))
        files.write_file(self._state(unit, "pid"), f"{pid}\n")

    def stop(self, unit: str) -> None:
        if self.load_state(unit) == "not-found" and not self.main_pid(unit):
            raise Refused(f"Failed to stop {unit}: Unit {unit} not loaded.", EXIT_NOT_FOUND)
        pid = self.main_pid(unit)
        for stale in ("loaded.json", "failed", "pid"):
            if os.path.exists(self._state(unit, stale)):
                os.unlink(self._state(unit, stale))
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        for _ in range(100):  # systemd.kill(5): SIGKILL after TimeoutStopSec (90 s there, 10 s here)
            if not pid_alive(pid):
                return
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)

    def restart(self, unit: str) -> str:
        self._known(unit, "restart")
        warning = ""
        if self.changed_on_disk(unit):
            warning = (f"Warning: The unit file, source configuration file or drop-ins of {unit} changed on disk. Run "
                       "'systemctl daemon-reload' to reload units.")
        sections = self.loaded(unit)
        if self.load_state(unit) == "masked":
            raise Refused(f"Failed to restart {unit}: Unit {unit} is masked.")
        self.stop(unit)
        self.start(unit, sections)
        return warning

    def reload(self, unit: str) -> None:
        """SIGHUP to the main process: the ExecReload= of the units hpq reloads (ssh, slurmd: kill -HUP $MAINPID)."""
        self._known(unit, "reload")
        pid = self.main_pid(unit)
        if pid is None:
            raise Refused(f"Failed to reload {unit}: Job type reload is not applicable for unit {unit}.")
        os.kill(pid, signal.SIGHUP)

    def unit_file_or_refuse(self, unit: str, verb: str) -> str:
        path = self.files.unit_path(unit)
        if path is None:
            raise Refused(f"Failed to {verb} unit: Unit file {unit} does not exist.")
        return path

    def enable(self, unit: str) -> str:
        if self.files.is_masked(unit):
            raise Refused(f"Failed to enable unit: Unit file /etc/systemd/system/{unit} is masked.")
        self.unit_file_or_refuse(unit, "enable")
        wanted = self.files.unit_sections(unit).get("Install", {}).get("WantedBy", [])
        if not wanted:
            return ("The unit files have no installation config (WantedBy=, RequiredBy=, Also=,\n"
                    "Alias= settings in the [Install] section, and DefaultInstance= for template\nunits).")
        out = []
        for target in " ".join(wanted).split():
            link = self.path(f"{services.DROPIN_DIR}/{target}.wants/{unit}")
            if not os.path.islink(link):
                os.makedirs(os.path.dirname(link), exist_ok=True)
                os.symlink(self.node_unit_path(unit), link)
                out.append(f"Created symlink {services.DROPIN_DIR}/{target}.wants/{unit} \u2192 {self.node_unit_path(unit)}.")
        return "\n".join(out)

    def node_unit_path(self, unit: str) -> str:
        path = self.files.unit_path(unit) or ""
        return "/" + os.path.relpath(path, self.root) if self.root != "/" else path

    def disable(self, unit: str) -> str:
        if not self.files.is_masked(unit):
            self.unit_file_or_refuse(unit, "disable")
        out = []
        for link in sorted(glob.glob(self.path(f"{services.DROPIN_DIR}/*.wants/{unit}")) + glob.glob(
                self.path(f"{services.DROPIN_DIR}/*.requires/{unit}"))):
            if os.path.islink(link):
                os.unlink(link)
                out.append(f"Removed \"/{os.path.relpath(link, self.root)}\".")
        return "\n".join(out)

    def mask(self, unit: str) -> str:
        node_path = f"{services.DROPIN_DIR}/{unit}"
        path = self.path(node_path)
        if os.path.islink(path) and os.readlink(path) == services.MASK_TARGET:
            return ""
        if os.path.lexists(path):
            raise Refused(f"Failed to mask unit: File {node_path} already exists.")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.symlink(services.MASK_TARGET, path)
        return f"Created symlink {node_path} \u2192 {services.MASK_TARGET}."

    def show(self, unit: str, props: list[str]) -> str:
        values = {"Id": unit, "LoadState": self.load_state(unit), "ActiveState": self.active_state(unit),
                  "MainPID": str(self.main_pid(unit) or 0)}
        values["SubState"] = {"active": "running", "failed": "failed"}.get(values["ActiveState"], "dead")
        return "\n".join("{}={}".format(p, values.get(p, "")) for p in (props or sorted(values)))


class _RootOnly:
    """What lifecycle/services' unit-file reader needs of a Context: where a node path lives."""

    def __init__(self, root: str):
        self.root = root

    def path(self, node_path: str) -> str:
        return node_path if self.root == "/" else os.path.join(self.root, node_path.lstrip("/"))


def _tail(path: str, n: int = 8) -> str:
    lines = (files.read_text(path) or "").strip().splitlines()[-n:]
    return ("\nLast lines of {}: {}".format(path, " | ".join(lines))) if lines else ""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line and systemctl's exit code, not argparse's usage text
        raise ValueError(message)


VERBS = ("start", "stop", "restart", "reload", "is-active", "enable", "disable", "mask", "daemon-reload", "show")


def run(root: str, argv: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``systemctl ARGV`` on the node at ``root``."""
    parser = _Parser(prog="systemctl", add_help=False)
    parser.add_argument("-q", "--quiet", action="store_true")
    parser.add_argument("-p", "--property", action="append", default=[])
    parser.add_argument("--no-block", action="store_true")
    parser.add_argument("--no-pager", action="store_true")
    parser.add_argument("words", nargs="*")
    try:
        args = parser.parse_intermixed_args(argv)
    except ValueError as exc:
        return EXIT_FAILED, "", f"systemctl: {exc}\n"
    if not args.words:
        return EXIT_FAILED, "", "systemctl stand-in: no command verb (list-units is not implemented)\n"
    verb, units = args.words[0], [unit_name(u) for u in args.words[1:]]
    if verb not in VERBS:
        return EXIT_FAILED, "", f"Unknown command verb '{verb}'.\n"
    if verb != "daemon-reload" and not units:
        return EXIT_FAILED, "", "Too few arguments.\n"
    sd = Systemd(root)
    out: list[str] = []
    err: list[str] = []
    code = 0
    if verb == "daemon-reload":
        sd.daemon_reload()
    elif verb == "is-active":
        states = [sd.active_state(u) for u in units]
        out = [] if args.quiet else states
        code = 0 if "active" in states else EXIT_NOT_ACTIVE
    elif verb == "show":
        props = [p for group in args.property for p in group.split(",") if p]
        out = ["\n\n".join(sd.show(u, props) for u in units)]
    else:
        for unit in units:
            try:
                said = {"start": sd.start, "stop": sd.stop, "restart": sd.restart, "reload": sd.reload,
                        "enable": sd.enable, "disable": sd.disable, "mask": sd.mask}[verb](unit)
                if said:
                    err.append(said)  # systemctl's notices (Created symlink, warnings) go to stderr
            except Refused as exc:
                err.append(str(exc))
                code = code or exc.code
    return code, "".join(s + "\n" for s in out if s), "".join(s + "\n" for s in err if s)


SHIM = """#!/bin/sh
# The systemctl stand-in for a node without systemd (hpq.standins.systemctl); never on a real node.
# -I: the lifecycle exports PYTHONPATH=<bundle>, whose hpq package has no stand-ins; hpq comes from its install.
exec {python} -I -m hpq.standins.systemctl --node-root {root} "$@"
"""


def install(bin_dir: str, root: str = "/", python: str = sys.executable) -> str:
    """Write the ``systemctl`` shim for the node at ``root`` into ``bin_dir``; returns its path."""
    os.makedirs(bin_dir, exist_ok=True)
    path = os.path.join(bin_dir, "systemctl")
    with open(path, "w") as fh:
        fh.write(shim_text(root, python))
    os.chmod(path, 0o755)
    return path


def shim_text(root: str = "/", python: str = sys.executable) -> str:
    return SHIM.format(python=shlex.quote(python), root=shlex.quote(root))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = "/"
    if argv[:1] == ["--node-root"] and len(argv) > 1:
        root, argv = argv[1], argv[2:]
    code, out, err = run(root, argv)
    sys.stdout.write(out)
    sys.stderr.write(err)
    return code


if __name__ == "__main__":
    sys.exit(main())
