"""Node-side code runs on the node's system python3 (>= 3.8; lifecycle/ even on 3.7: test_lifecycle_python37.py) with the standard library only.

Parsed with ``ast`` at ``feature_version=(3, 8)`` (so 3.9+ syntax fails here), every import
checked: third-party packages only inside ``try/except ImportError`` or lazily inside a
function for the allowed optional ones (boto3/botocore with a CLI fallback, torch in the
training program).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NODE_FILES = sorted(p for d in ("lifecycle", "scripts") for p in (REPO / d).glob("*.py"))
LAZY_OPTIONAL = {"boto3", "botocore", "torch"}
STDLIB = set(sys.stdlib_module_names)
PY39_APIS = (".removeprefix(", ".removesuffix(", "functools.cache(", "@cache\n", "zoneinfo", "graphlib")


def guarded(node: ast.AST, parents: dict) -> tuple[bool, bool]:
    """(inside try/except ImportError, inside a function)."""
    in_try = in_func = False
    child, cur = node, parents.get(node)
    while cur is not None:
        if isinstance(cur, ast.Try) and child in cur.body:
            for h in cur.handlers:
                names = [h.type] if not isinstance(h.type, ast.Tuple) else list(h.type.elts)
                if any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError") for n in names):
                    in_try = True
        if isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_func = True
        child, cur = cur, parents.get(cur)
    return in_try, in_func


def test_node_files_exist():
    names = {p.name for p in NODE_FILES}
    assert {"main.py", "imds.py", "fsx.py", "slurm.py", "munge.py", "transport.py", "catalog.py"} <= names


def offences(src: str, filename: str = "<src>") -> list[str]:
    """What makes ``src`` unfit for a node: 3.9+ syntax (SyntaxError), missing future import, bad imports."""
    tree = ast.parse(src, filename=filename, feature_version=(3, 8))
    out = []
    if src.strip():
        first = next((n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))),
                     None)
        if not (first is None or (isinstance(first, ast.ImportFrom) and first.module == "__future__")):
            out.append("does not start with `from __future__ import annotations`")
    parents = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            mods = [node.module or ""]
        else:
            continue
        for mod in mods:
            top = mod.split(".")[0]
            if top in STDLIB or top in ("hpq", "__future__"):
                continue
            in_try, in_func = guarded(node, parents)
            if not (in_try or (in_func and top in LAZY_OPTIONAL)):
                out.append(f"line {node.lineno}: unguarded import {mod}")
    out += [f"uses {api.strip()} (Python 3.9+)" for api in PY39_APIS if api in src]
    return out


@pytest.mark.parametrize("path", NODE_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_python38_stdlib_only(path):
    assert offences(path.read_text(), str(path)) == []


def test_the_checker_catches_what_it_should():
    head = "from __future__ import annotations\n"
    assert offences(head + "import os\ntry:\n    import boto3\nexcept ImportError:\n    boto3 = None\n") == []
    assert offences(head + "def f():\n    import torch\n") == []
    assert offences(head + "import requests\n") == ["line 2: unguarded import requests"]
    assert offences(head + "def f():\n    import yaml\n") == ["line 3: unguarded import yaml"]
    assert offences("import os\n") == ["does not start with `from __future__ import annotations`"]
    assert offences(head + "x = 'a'.removeprefix('b')\n") == ["uses .removeprefix( (Python 3.9+)"]
    with pytest.raises(SyntaxError):
        offences(head + "match x:\n    case 1:\n        pass\n")
