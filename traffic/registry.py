"""Look a name up in a registry (a dict of name -> class), with an error that names what is allowed."""
from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def pick(registry: dict[str, T], name: str, what: str, key: str = "") -> T:
    """``registry[name]``; ValueError ``"KEY: unknown WHAT 'name'; registered: a, b"`` when absent
    (``key``: the scenario key that chose it, left out when empty)."""
    try:
        return registry[name]
    except KeyError:
        prefix = f"{key}: " if key else ""
        raise ValueError(f"{prefix}unknown {what} {name!r}; registered: {', '.join(sorted(registry))}") from None
