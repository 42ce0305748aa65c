"""No string-key read of a controller result in testbed/ (issue 30): what comes back from the controller (the
congestion loop's result, the ready file, the events, the supervisor's report) is read as typed records
(controllers.loop_result, controllers.contract, controllers.supervisor_report), never as ``x["key"]`` or
``x.get("key")``.

Every ``.py`` file of testbed/ is parsed with :mod:`ast`. Within each function (and at module level), an
expression is a controller result when it is a call of one of :data:`SOURCES` (a function or method name), an
attribute named in :data:`ATTRIBUTES`, a parameter annotated with a record of :data:`RECORDS`, or is rooted
(through attributes, subscripts by number, iteration) at a name bound to one. A read with a string key on
one of them fails the test, named ``file:line``.
"""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from controllers import contract, loop_result, supervisor_report

ROOT = Path(__file__).resolve().parents[1]
#: calls that return a controller result (typed readers, and the supervisor's report)
SOURCES = {"read_loop_result", "pfc_result", "decode_report", "read_ready", "wait_ready", "read_events",
           "parse_event", "parse_stats", "report", "snapshot", "controller_health"}
#: contract.read_json(path, Record) (RunDir.read_json, of one argument, reads the testbed's own files)
TYPED_READ = "read_json"
#: attributes that hold one (RunDir.congestion_loop, Fabric.ready, Fabric.controller_report, Recording.controller)
ATTRIBUTES = {"congestion_loop", "ready", "controller_report", "controller"}
#: record classes whose annotated parameters are controller results
RECORDS = {"LoopResult", "PfcResult", "EcnResult", "ControllerReport", "Death", "ControllerReady", "StatsPoll",
           "Event"}
#: the records' fields that are maps by design (``resync`` counts by name, ``conf`` sections, ...): their entries
#: are read by key
MAPS = {f.name for m in (contract, loop_result, supervisor_report) for c in vars(m).values()
        if dataclasses.is_dataclass(c) for f in dataclasses.fields(c) if str(f.type).lower().startswith("dict")}


def _is_source(node: ast.AST, bound: set[str]) -> bool:
    """Whether ``node`` is (rooted at) a controller result."""
    while True:
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            return name in SOURCES or (name == TYPED_READ and len(node.args) == 2)
        if isinstance(node, ast.Attribute):
            if node.attr in MAPS:
                return False
            if node.attr in ATTRIBUTES:
                return True
            node = node.value
        elif isinstance(node, ast.Subscript) and not _string_key(node):
            node = node.value
        elif isinstance(node, ast.Name):
            return node.id in bound
        else:
            return False


def _string_key(node: ast.Subscript) -> bool:
    key = node.slice
    return isinstance(key, ast.Constant) and isinstance(key.value, str)


def _targets(target: ast.AST):
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for t in target.elts:
            yield from _targets(t)


def _scope_reads(body: list, bound: set[str]) -> list[int]:
    """Lines of string-key reads of controller results in the statements ``body`` (not descending into nested
    functions: each is its own scope)."""
    bound = set(bound)
    nodes = []
    for stmt in body:
        nodes += [n for n in _walk(stmt)]
    for n in nodes:  # names bound to a controller result (assignments, for loops, with), in any order
        if isinstance(n, ast.Assign) and _is_source(n.value, bound):
            for t in n.targets:
                bound.update(_targets(t))
        elif isinstance(n, (ast.AnnAssign, ast.NamedExpr)) and n.value is not None and _is_source(n.value, bound):
            bound.update(_targets(n.target))
        elif isinstance(n, (ast.For, ast.comprehension)) and _is_source(n.iter, bound):
            bound.update(_targets(n.target))
    lines = []
    for n in nodes:
        if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load) and _string_key(n) and \
                _is_source(n.value, bound):
            lines.append(n.lineno)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get" and n.args \
                and isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str) \
                and _is_source(n.func.value, bound):
            lines.append(n.lineno)
    return lines


def _walk(node: ast.AST):
    """ast.walk, but not into nested function bodies."""
    yield node
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield from _walk(child)


def string_key_reads(source: str) -> list[int]:
    """Lines of ``source`` that read a controller result with a string key (module doc)."""
    tree = ast.parse(source)
    lines = _scope_reads(tree.body, set())
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
            typed = {a.arg for a in args if a.annotation is not None
                     and any(r in ast.unparse(a.annotation) for r in RECORDS)}
            lines += _scope_reads(fn.body, typed)
    return sorted(set(lines))


def test_the_scan_finds_planted_string_key_reads():
    planted = '''
def f(run_dir, rec, fab, block):
    loop = RunDir(run_dir).congestion_loop
    a = loop["ticks"], loop.pfc["kick_frames"], RunDir(run_dir).congestion_loop.get("pfc")
    report = decode_report(block)
    for d in report.events:
        b = d["pid"]
    c = rec.controller["deaths"], fab.controller_report.get("openflow_errors"), sup.snapshot()["events"]
    return [e["event"] for e in read_events(run_dir)]

def g(r: LoopResult | None, d: dict):
    return r["ecn"], d["fine"], {"k": 1}["k"], r.resync["flows_added"], RunDir(d).read_json("x.json")["k"]

def h(path):
    return contract.read_json(path, ControllerReady)["dpids"]
'''
    assert string_key_reads(planted) == [4, 7, 8, 9, 12, 15]
    assert {"resync", "conf", "loads_bps", "host_pids"} <= MAPS


def test_no_string_key_read_of_a_controller_result_in_testbed():
    found = [f"{p.relative_to(ROOT)}:{line}" for p in sorted((ROOT / "testbed").rglob("*.py"))
             for line in string_key_reads(p.read_text())]
    assert found == [], "controller results are typed records: read attributes\n" + "\n".join(found)
