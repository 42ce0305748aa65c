"""The kind of workload is dispatched in three places only (issue 30, item 2; testbed.workloads docstring):

1. testbed/workloads/__init__.py: the registry (``workload_for``);
2. testbed/spec/workload.py: the schema of the ``workload`` section;
3. testbed/spec/jobs.py: the schema of the ``jobs`` list.

A dispatch is a test of which kind a scenario has: a workload section (``sizes``, ``simai``, ``pattern``,
``chakra``, ``perftest``, ``open_loop``) compared with None or used as a truth value, or the ``jobs`` list used as a truth
value. A kind's own package may test its own section (the SimAI package reading ``workload.simai``), never
another kind's. The scan reads every module of testbed/ with the ast module.
"""
import ast
from pathlib import Path

TESTBED = Path(__file__).resolve().parents[1] / "testbed"
#: the three modules that may dispatch on the kind
DISPATCH_PLACES = {"workloads/__init__.py", "spec/workload.py", "spec/jobs.py"}
#: section -> the kind package that may test it
OWN = {"sizes": "workloads/sweep/", "simai": "workloads/simai/", "pattern": "workloads/pattern/",
       "chakra": "workloads/chakra/", "perftest": "workloads/perftest/", "open_loop": "workloads/open_loop/",
       "jobs": "workloads/jobs/"}
SECTIONS = set(OWN) - {"jobs"}


def _section(node) -> str | None:
    """The section an expression names (``x.workload.simai``, ``spec.jobs``), else None."""
    if isinstance(node, ast.Attribute):
        if node.attr in SECTIONS and isinstance(node.value, ast.Attribute) and node.value.attr == "workload":
            return node.attr
        if node.attr == "jobs" and isinstance(node.value, ast.Name) and node.value.id in ("spec", "self", "s"):
            return "jobs"
    return None


def dispatches(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, section) of every kind test in ``tree``: ``<section> is (not) None`` and a section as a truth
    value (if/while/ternary/comprehension condition, ``not``, ``and``/``or``, ``bool(...)``)."""
    out = []
    conditions = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(isinstance(c, ast.Constant) and c.value is None
                                                 for c in node.comparators):
            s = _section(node.left)
            if s:
                out.append((node.lineno, s))
        elif isinstance(node, (ast.If, ast.While, ast.IfExp)):
            conditions.append(node.test)
        elif isinstance(node, ast.comprehension):
            conditions.extend(node.ifs)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            conditions.append(node.operand)
        elif isinstance(node, ast.BoolOp):
            conditions.extend(node.values)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "bool" and node.args:
            conditions.append(node.args[0])
    for c in conditions:
        s = _section(c)
        if s:
            out.append((c.lineno, s))
    return sorted(set(out))


def test_the_scan_finds_a_dispatch():
    code = ("if spec.workload.simai is not None:\n    pass\n"
            "x = 1 if spec.jobs else 2\n"
            "y = [j for j in jobs if j.workload.pattern]\n"
            "path = spec.workload.simai.path\n")
    assert dispatches(ast.parse(code)) == [(1, "simai"), (3, "jobs"), (4, "pattern")]


def test_the_kind_is_dispatched_in_three_places_only():
    found = {}
    for path in sorted(TESTBED.rglob("*.py")):
        rel = path.relative_to(TESTBED).as_posix()
        for line, section in dispatches(ast.parse(path.read_text(), str(path))):
            if rel in DISPATCH_PLACES or rel.startswith(OWN[section]):
                continue
            found.setdefault(rel, []).append(f"{section}@{line}")
    assert found == {}, f"kind dispatched outside {sorted(DISPATCH_PLACES)}: {found}"
