"""Registries of plugins: look a name up with an error that names what is allowed; the settings a plugin declares."""
from __future__ import annotations

import typing
from dataclasses import dataclass, field, fields
from typing import Any, Mapping, TypeVar

T = TypeVar("T")


def pick(registry: dict[str, T], name: str, what: str, key: str = "") -> T:
    """``registry[name]``; ValueError ``"KEY: unknown WHAT 'name'; registered: a, b"`` when absent
    (``key``: the scenario key that chose it, left out when empty)."""
    try:
        return registry[name]
    except KeyError:
        prefix = f"{key}: " if key else ""
        raise ValueError(f"{prefix}unknown {what} {name!r}; registered: {', '.join(sorted(registry))}") from None


# -- plugin settings -------------------------------------------------------------------------------
# A plugin (congestion control, load-balancing policy, queue backend) declares its settings as a frozen
# dataclass named ``Settings``: one field per scenario key, its default the value used when the scenario
# leaves the key out, its bounds in :func:`setting`. The testbed's spec validates the scenario's keys
# against it (testbed.spec.plugins: bounds, unknown keys refused with the key path and the allowed
# keys; ``*_bps`` keys take rates like '10M', ``*_bytes`` keys sizes like '64KiB'); the plugin receives
# an instance. No pydantic here: the controller's Ryu environment and the agents import these.

#: the key of a field's metadata holding its bounds: {"gt" | "ge" | "lt" | "le": number}
BOUNDS_KEY = "bounds"


def setting(default, *, gt=None, ge=None, lt=None, le=None):
    """A field of a plugin's ``Settings`` dataclass with its bounds (None: unbounded on that side)."""
    bounds = {k: v for k, v in (("gt", gt), ("ge", ge), ("lt", lt), ("le", le)) if v is not None}
    return field(default=default, metadata={BOUNDS_KEY: bounds})


@dataclass(frozen=True)
class NoSettings:
    """The settings of a plugin that has none."""


def settings_from(cls: type[T], values: Mapping[str, Any], path: str) -> T:
    """An instance of the settings dataclass ``cls`` from ``values`` (field name -> value, as decoded
    JSON; fields left out take their defaults). Raises ValueError naming ``path.KEY`` for an unknown key
    (with the allowed ones) or a value of the wrong type; the dataclass's own checks may raise too."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in fields(cls)]
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise ValueError(f"{path}.{unknown[0]}: unknown setting of {cls.__qualname__}; allowed: "
                         f"{', '.join(names) or '(none)'}")
    for k, v in values.items():
        t = hints[k]
        ok = isinstance(v, bool) if t is bool else (isinstance(v, t) and not isinstance(v, bool)) if t is int \
            else isinstance(v, (int, float)) and not isinstance(v, bool) if t is float else isinstance(v, t)
        if not ok:
            raise ValueError(f"{path}.{k}: expected {t.__name__}, got {type(v).__name__} {v!r}")
    return cls(**{k: float(v) if hints[k] is float else v for k, v in values.items()})
