"""Install the node commands: copy the bundle to /opt/hpq and put wrappers on PATH.

The bundle copy in the bucket is the source (no downloads at boot). The copy under
/opt/hpq is a managed tree: files that left the bundle are removed, unchanged ones are
not rewritten. Every executable under ``hpq/scripts/bin/`` gets a wrapper in
``/usr/local/bin`` that sets PYTHONPATH so the command imports ``hpq`` from /opt/hpq.
"""

from __future__ import annotations

import os
import shlex

from . import bundle, files, names

WRAPPER_MARK = "# hpq node command wrapper"


def run(ctx) -> str:
    install_root = ctx.path(names.NODE_INSTALL_DIR)
    src = bundle.node_bundle_files()
    written = 0
    for key, path in sorted(src.items()):
        with open(path, "rb") as fh:
            data = fh.read()
        mode = 0o755 if os.access(path, os.X_OK) or key.endswith(".sh") or "/bin/" in key else 0o644
        if files.write_file(os.path.join(install_root, key), data, mode):
            written += 1
    removed = 0
    managed = os.path.join(install_root, "hpq")
    wanted = {os.path.normpath(os.path.join(install_root, k)) for k in src}
    for dirpath, _dirs, filenames in os.walk(managed, topdown=False):
        if "__pycache__" in dirpath.split(os.sep):
            continue  # python's own caches from running the commands: not ours to sweep
        for fn in filenames:
            p = os.path.normpath(os.path.join(dirpath, fn))
            if p not in wanted:
                os.unlink(p)
                removed += 1
        if dirpath != managed and not os.listdir(dirpath):  # a directory that left the bundle
            os.rmdir(dirpath)
    commands = sorted(k.rsplit("/", 1)[1] for k in src if k.startswith("hpq/scripts/bin/"))
    bin_dir = ctx.path(ctx.s.bin_dir)
    for name in commands:
        target = "%s/hpq/scripts/bin/%s" % (names.NODE_INSTALL_DIR, name)
        text = "\n".join([
            "#!/bin/sh",
            WRAPPER_MARK + " (written by the lifecycle, replaced on every run)",
            'PYTHONPATH=%s${PYTHONPATH:+:$PYTHONPATH}' % shlex.quote(names.NODE_INSTALL_DIR),
            "export PYTHONPATH",
            'exec %s "$@"' % shlex.quote(target),
            "",
        ])
        if files.write_file(os.path.join(bin_dir, name), text, 0o755):
            written += 1
    # Wrappers of commands that left the bundle.
    if os.path.isdir(bin_dir):
        for fn in os.listdir(bin_dir):
            p = os.path.join(bin_dir, fn)
            if fn not in commands and os.path.isfile(p) and _is_wrapper(p):
                os.unlink(p)
                removed += 1
    return "%d bundle files under %s, commands %s; %d written, %d removed" % (
        len(src), names.NODE_INSTALL_DIR, ", ".join(commands) or "(none yet)", written, removed)


def _is_wrapper(path: str) -> bool:
    with open(path, "rb") as fh:
        return WRAPPER_MARK.encode() in fh.read(200)
