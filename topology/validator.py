"""The topology file's error and the small checks its reader makes (topology.model.from_dict): each raises
:class:`TopologyError` naming the file (``source``) and the key path.

Pure standard library, as topology.model.
"""
from __future__ import annotations

import ipaddress
from typing import Any, List, NoReturn, Sequence


class TopologyError(ValueError):
    """The topology file is missing, not JSON, or violates the format.

    The message starts with the source (file name) and the key path of the bad
    value, e.g. ``topo.json: links[3].a: unknown node 'x'``.
    """


class Validator:
    """Small helpers that raise TopologyError with the source and key path."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, where: str, why: str) -> NoReturn:
        raise TopologyError(f"{self.source}: {where or '<top level>'}: {why}")

    def keys(self, obj: Any, where: str, expected: Sequence[str]) -> None:
        if not isinstance(obj, dict):
            self.fail(where, f"expected an object, got {type(obj).__name__}")
        prefix = f"{where}." if where else ""
        for k in expected:
            if k not in obj:
                self.fail(f"{prefix}{k}", "missing required key")
        for k in obj:
            if k not in expected:
                self.fail(f"{prefix}{k}", f"unknown key (expected only {', '.join(expected)})")

    def string(self, value: Any, where: str) -> str:
        if not isinstance(value, str) or not value:
            self.fail(where, f"expected a non-empty string, got {value!r}")
        return value

    def integer(self, value: Any, where: str, lo: int, hi: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(where, f"expected an integer, got {value!r}")
        if not lo <= value <= hi:
            self.fail(where, f"{value} is outside {lo}..{hi}")
        return value

    def seq(self, value: Any, where: str) -> List[Any]:
        if not isinstance(value, list):
            self.fail(where, f"expected a list, got {type(value).__name__}")
        return value

    def network(self, value: Any, where: str) -> ipaddress.IPv4Network:
        text = self.string(value, where)
        try:
            return ipaddress.IPv4Network(text, strict=True)
        except ValueError as exc:
            self.fail(where, f"{text!r} is not an IPv4 prefix with host bits zero ({exc})")

    def unique(self, values: Sequence[Any], where: str, what: str) -> None:
        seen = set()
        for i, val in enumerate(values):
            if val in seen:
                self.fail(f"{where}[{i}]", f"duplicate {what} {val!r}")
            seen.add(val)
