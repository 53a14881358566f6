"""Draw the house from its own imports: which hpq module imports which, and where the arrows go wrong.

    python3 dev/import_graph.py                 # summary: packages, cycles, function-level imports
    python3 dev/import_graph.py --edges         # every package-to-package edge with its count
    python3 dev/import_graph.py --mermaid       # the package graph as a Mermaid flowchart

Reads the source with ``ast`` (nothing is imported or run), so it works on a broken tree too. Modules are
named as installed (``hpq.aws.deploy`` for aws/deploy.py, per pyproject's package-dir); a
"package" here is the first two levels below hpq (``hpq.aws``), or one for top-level folders without
sub-packages (``hpq.cfn``). An import inside a function counts like one at the top of the module, and is
listed, since a diagram of module-level imports alone does not see it.

The process entries ``hpq/__main__.py`` (``python -m hpq``) and ``hpq/console.py`` (the console script)
live in the ground folder because Python finds them there, but they start the command line: they are
drawn as ``hpq.entry``, the roof, above ``hpq.cli``. tests/cli/test_house.py holds the house's rules.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# pyproject.toml's package-dir: import name -> folder.
FOLDERS = {"hpq": "hpq", "hpq.cli": "cli", "hpq.aws": "aws", "hpq.kube": "kube", "hpq.rehearsal": "rehearsal",
           "hpq.standins": "standins", "hpq.validation": "validation", "hpq.views": "views", "hpq.cfn": "cfn",
           "hpq.lifecycle": "lifecycle",
           "hpq.manifests": "manifests", "hpq.observability": "observability", "hpq.scripts": "scripts"}


def modules(root: Path = ROOT) -> Iterator[tuple[str, Path]]:
    for prefix, folder in FOLDERS.items():
        base = root / folder
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            if prefix == "hpq" and parts and parts[0] in {p.split(".")[1] for p in FOLDERS if "." in p}:
                continue
            yield ".".join([prefix, *parts]), path


# Modules in the ground folder that start the command line (see the module docstring).
ENTRY = {"hpq.__main__": "hpq.entry", "hpq.console": "hpq.entry"}


def package_of(module: str) -> str:
    if module in ENTRY:
        return ENTRY[module]
    parts = module.split(".")
    if len(parts) >= 2 and f"hpq.{parts[1]}" not in FOLDERS:
        return "hpq"  # the ground floor: hpq/*.py (errors, console, atomic, ...)
    if len(parts) >= 3 and parts[1] == "cli":
        return ".".join(parts[:3]) if len(parts) > 3 else "hpq.cli"
    return ".".join(parts[:2])


def _function_import_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    lines.add(inner.lineno)
    return lines


def other_imports(path: Path) -> Iterator[tuple[str, int, bool]]:
    """(top-level name, line, inside a function?) for every import of something that is not hpq
    (the standard library and third-party packages), absolute imports only."""
    tree = ast.parse(path.read_text(), str(path))
    func_lines = _function_import_lines(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top != "hpq":
                yield top, node.lineno, node.lineno in func_lines


def imports(module: str, path: Path) -> Iterator[tuple[str, int, bool]]:
    """(imported hpq module, line, inside a function?) for every hpq import in one file."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    func_lines = _function_import_lines(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("hpq"):
                    yield alias.name, node.lineno, node.lineno in func_lines
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_pkg else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if not base.startswith("hpq"):
                continue
            for alias in node.names:
                yield (base + "." + alias.name) if alias.name != "*" else base, node.lineno, node.lineno in func_lines


def graph(root: Path = ROOT):
    known = dict(modules(root))
    edges: dict[tuple[str, str], int] = Counter()
    inner: list[tuple[str, int, str]] = []
    for module, path in known.items():
        for target, line, in_func in imports(module, path):
            while target not in known and "." in target:
                target = target.rsplit(".", 1)[0]
            if target not in known:
                continue
            src, dst = package_of(module), package_of(target)
            if src != dst:
                edges[(src, dst)] += 1
            if in_func:
                inner.append((module, line, target))
    return known, edges, inner


def cycles(edges) -> list[list[str]]:
    """Strongly connected components of more than one package (Tarjan)."""
    adj = defaultdict(set)
    for a, b in edges:
        adj[a].add(b)
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in adj[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted({x for e in edges for x in e}):
        if v not in index:
            visit(v)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--edges", action="store_true")
    ap.add_argument("--mermaid", action="store_true")
    args = ap.parse_args(argv)
    sys.setrecursionlimit(10000)
    known, edges, inner = graph()
    if args.mermaid:
        print("flowchart TD")
        for (a, b), n in sorted(edges.items()):
            print(f'    {a.replace(".", "_")}["{a}"] -->|{n}| {b.replace(".", "_")}["{b}"]')
        return 0
    if args.edges:
        for (a, b), n in sorted(edges.items()):
            print(f"{a} -> {b}  ({n})")
        return 0
    packages = sorted({package_of(m) for m in known})
    print(f"{len(known)} modules in {len(packages)} packages; {len(edges)} package edges")
    for comp in cycles(edges):
        print("cycle: " + " <-> ".join(comp))
    own = [x for x in inner if x[2].startswith("hpq.")]
    print(f"{len(own)} imports of hpq's own modules inside functions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
