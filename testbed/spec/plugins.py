"""A plugin's settings in a scenario: the keys a congestion control, load-balancing policy or queue
backend declares (its ``Settings`` dataclass, traffic.registry.setting), validated like every section.

:func:`checked` validates the keys the scenario gave against the plugin's dataclass: its field names
(an unknown key is refused with the allowed ones), types, bounds, and the unit conventions of the spec
(a ``*_bps`` key takes a rate like ``'10M'``, a ``*_bytes`` key a size like ``'64KiB'``;
testbed.spec.units). A section holding a plugin's keys calls it from a ``mode="before"`` validator
and keeps the checked values; errors name the full key path (``transport.dcqcn.g: ...``).
"""
from __future__ import annotations

import dataclasses
import typing
from functools import lru_cache
from typing import Any, Mapping, Optional

from pydantic import BeforeValidator, ConfigDict, Field, ValidationError, create_model
from typing_extensions import Annotated

from testbed.spec.units import parse_rate, parse_size, refuse_bool
from traffic.registry import BOUNDS_KEY
from testbed.spec.yaml_loader import clip, did_you_mean


def _annotation(name: str, t: type, bounds: dict) -> Any:
    """The pydantic type of one setting: its Python type, bounds, no YAML booleans for numbers."""
    if t is bool:
        return bool
    before = [BeforeValidator(refuse_bool)]
    if name.endswith("_bps"):
        before.append(BeforeValidator(parse_rate))
    elif name.endswith("_bytes"):
        before.append(BeforeValidator(parse_size))
    extra = {"allow_inf_nan": False} if t is float else {"strict": True}
    return Annotated[(t, *before, Field(**bounds, **extra))]


@lru_cache(maxsize=None)
def _model(cls: type):
    """A pydantic model of ``cls``'s fields, each optional (None: not given), unknown keys refused."""
    hints = typing.get_type_hints(cls)
    types = {f.name: _annotation(f.name, hints[f.name], dict(f.metadata.get(BOUNDS_KEY, {})))
             for f in dataclasses.fields(cls)}
    return create_model(f"{cls.__qualname__}Keys", __config__=ConfigDict(extra="forbid", frozen=True),
                        **{name: (Optional[t], None) for name, t in types.items()})


def keys(cls: type) -> tuple[str, ...]:
    """The scenario keys of the settings dataclass ``cls``."""
    return tuple(f.name for f in dataclasses.fields(cls))


def checked(cls: type, given: Mapping[str, Any], path: str) -> dict:
    """The keys of ``given`` (as the scenario wrote them) checked against the settings dataclass ``cls``
    and converted (rates and sizes to numbers); keys given as None are left out. Also builds the
    settings once, so that the dataclass's own checks run. Raises ValueError
    ``"PATH.KEY: what is wrong (got VALUE)"`` for the first bad key (``PATH.KEY: unknown key; allowed
    keys here: ...`` for an unknown one)."""
    if not isinstance(given, Mapping):
        raise ValueError(f"{path}: expected a mapping of {', '.join(keys(cls)) or 'no keys'}, got {given!r}")
    try:
        m = _model(cls).model_validate(dict(given))
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join([path, *map(str, err["loc"][:1])])
        if err["type"] == "extra_forbidden":
            allowed = sorted(keys(cls))
            raise ValueError(f"{where}: unknown key{did_you_mean(str(err['loc'][0]), allowed)}; allowed keys here: "
                             f"{', '.join(allowed)}") from None
        raise ValueError(f"{where}: {err['msg'].removeprefix('Value error, ')} (got "
                         f"{clip(repr(err.get('input')), 80)})") from None
    values = {k: v for k, v in m.model_dump().items() if v is not None}
    cls(**values)
    return values


def named_blocks(data: Any, section: str, fields: Mapping, settings: Mapping[str, type], choice_key: str,
                 default: str) -> Any:
    """For a ``mode="before"`` validator of a section with a plugin choice: the section's mapping with the
    chosen plugin's block checked (:func:`checked`). A block is a key named after a plugin (``settings``:
    name -> its settings dataclass, plugins with keys only) holding that plugin's keys; it applies only
    when ``data[choice_key]`` (default ``default``) names that plugin. Raises ValueError naming
    ``SECTION.KEY`` for a key that is neither a field (``fields``) nor a block, or a block of another
    plugin. A block given as None is left out. Anything but a mapping is returned unchanged."""
    if not isinstance(data, dict):
        return data
    chosen = data.get(choice_key, default)
    out = {}
    for k, v in data.items():
        if k in fields:
            out[k] = v
        elif k not in settings:
            allowed = sorted([*fields, *settings])
            raise ValueError(f"{section}.{k}: unknown key{did_you_mean(str(k), allowed)}; allowed keys here: "
                             f"{', '.join(allowed)}")
        elif v is None:
            continue
        elif k != chosen:
            raise ValueError(f"{section}.{k} applies only with {section}.{choice_key}: {k} (here {chosen!r}): "
                             f"remove the block or choose {k}")
        else:
            out[k] = checked(settings[k], v, f"{section}.{k}")
    return out
