"""The packages stack strictly: topology/ and traffic/ at the bottom, then dataplane/, then controllers/,
then testbed/ (docs/architecture.md).

Every ``.py`` file of the five packages is parsed with :mod:`ast` and every import in it is read,
at module level and inside functions alike (an import deferred into a function still ties the
packages together). Relative imports are resolved against the importing module. A failure names
each offending import as ``file:line``.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: package -> layer; a module may import its own package and packages of a lower layer only
LAYERS = {"topology": 0, "traffic": 0, "dataplane": 1, "controllers": 2, "testbed": 3}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """Absolute names of the modules ``node`` imports (empty for a node that is no import)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if not node.level:
        return [node.module or ""]
    base = module.split(".")
    base = base[:len(base) - node.level + (1 if is_package else 0)]
    return [".".join(base + ([node.module] if node.module else []))]


def package_imports() -> list[tuple[str, str, str]]:
    """(importing package, imported package, ``file:line``) for every import across two of the packages."""
    edges = []
    for package in LAYERS:
        for path in sorted((ROOT / package).rglob("*.py")):
            module = _module_name(path)
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                for name in _imported(node, module, path.name == "__init__.py"):
                    target = name.split(".")[0]
                    if target in LAYERS and target != package:
                        edges.append((package, target, f"{path.relative_to(ROOT)}:{node.lineno}"))
    return edges


def _cycles(edges: list[tuple[str, str, str]]) -> list[list[str]]:
    """Every cycle of the package graph, as the list of its packages (each cycle once)."""
    succ: dict[str, set[str]] = {p: set() for p in LAYERS}
    for a, b, _ in edges:
        succ[a].add(b)
    found = []

    def walk(start: str, node: str, path: list[str]) -> None:
        for nxt in sorted(succ[node]):
            if nxt == start:
                found.append(path[:])
            elif nxt not in path and nxt > start:  # each cycle from its smallest package
                walk(start, nxt, path + [nxt])

    for start in sorted(LAYERS):
        walk(start, start, [start])
    return found


def test_the_import_scan_sees_every_package():
    edges = package_imports()
    assert {a for a, _, _ in edges} >= {"controllers", "testbed"}
    assert ("testbed", "topology") in {(a, b) for a, b, _ in edges}


def test_no_cycle_between_packages():
    edges = package_imports()
    cycles = _cycles(edges)
    lines = []
    for cycle in cycles:
        hops = list(zip(cycle, cycle[1:] + cycle[:1]))
        lines.append(" -> ".join(cycle + cycle[:1]) + ":")
        lines += [f"  {where}: {a} imports {b}" for a, b, where in edges if (a, b) in hops]
    assert not cycles, "package cycles:\n" + "\n".join(lines)


def test_no_upward_import():
    upward = [f"{where}: {a} (layer {LAYERS[a]}) imports {b} (layer {LAYERS[b]})"
              for a, b, where in package_imports() if LAYERS[b] > LAYERS[a]]
    assert not upward, ("imports of a package above the importer's own "
                        "(topology, traffic -> dataplane -> controllers -> testbed):\n" + "\n".join(upward))


def test_peer_packages_do_not_import_each_other():
    """topology/ and traffic/ share the bottom layer; neither leans on the other."""
    peers = [f"{where}: {a} imports {b}" for a, b, where in package_imports()
             if LAYERS[a] == LAYERS[b]]
    assert not peers, "imports between the two bottom packages:\n" + "\n".join(peers)
