"""What ships to the nodes: the files of the node bundle and their keys.

The bundle keeps the import names (``hpq/lifecycle/...``, ``hpq/scripts/...``)
so node code imports exactly as it does when installed; ``hpq/__init__.py``, ``hpq/errors.py`` and
``hpq/vocab.py`` come along as the (standard-library-only) parent package. At its root
sits ``on_create.sh`` (names.ON_CREATE_ENTRY, from lifecycle/oncreate_entry.sh): the file
LifeCycleConfig.OnCreate names, which runs ``hpq/lifecycle/on_create.sh``.
Used on the laptop by deploy/publish; standard library only like the rest.
"""

from __future__ import annotations

import os
from typing import Dict

from . import names

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_SKIP_DIRS = {"__pycache__"}
_SKIP_SUFFIXES = (".pyc", ".pyo")
ENTRY_SOURCE = "oncreate_entry.sh"  # shipped as names.ON_CREATE_ENTRY at the bundle root


def _hpq_dir() -> str:
    import hpq

    return os.path.dirname(os.path.abspath(hpq.__file__))


def _scripts_dir() -> str:
    """scripts/ is lifecycle/'s sibling wherever hpq lives: the repository (pyproject's package-dir maps
    hpq.lifecycle and hpq.scripts to ``lifecycle/`` and ``scripts/``), an installed wheel (``hpq/lifecycle``,
    ``hpq/scripts``) and the node bundle itself. Found by path, not by import: the bundle needs the
    files of hpq.scripts, not its code, and hpq.scripts imports hpq.lifecycle (never the reverse)."""
    return os.path.join(os.path.dirname(_PKG_DIR), "scripts")


def node_bundle_files() -> Dict[str, str]:
    """Map of bundle key (posix path, e.g. ``hpq/lifecycle/on_create.sh``) to source file path."""
    files: Dict[str, str] = {names.ON_CREATE_ENTRY: os.path.join(_PKG_DIR, ENTRY_SOURCE)}
    root = _hpq_dir()
    for name in ("__init__.py", "errors.py", "vocab.py"):
        files["hpq/" + name] = os.path.join(root, name)
    for sub, src in (("lifecycle", _PKG_DIR), ("scripts", _scripts_dir())):
        for dirpath, dirnames, filenames in os.walk(src):
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
            for fn in sorted(filenames):
                if fn.endswith(_SKIP_SUFFIXES):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, fn), src).replace(os.sep, "/")
                files["hpq/%s/%s" % (sub, rel)] = os.path.join(dirpath, fn)
    return files
