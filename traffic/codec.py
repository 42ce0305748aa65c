"""Strict JSON-object codec of frozen dataclasses: every field present, no other, each of its type.

Shared by the two typed boundaries of the testbed: the runner <-> agent messages
(:mod:`traffic.protocol`) and the testbed <-> controller records (:mod:`controllers.contract`).
A dataclass field may be an ``int``, ``float`` (an int is accepted and made a float), ``str``,
``bool``, another dataclass, ``list[T]``, ``dict[str, T]`` (JSON object keys are strings),
``Optional[T]`` or a union of dataclasses (decoded as the one whose field names are exactly the
object's keys). Decoding never fills in a default: both sides say everything (pydantic would
fill a missing field that has a default). Runs on Python 3.9 (the Ryu controller's Python).
"""
from __future__ import annotations

import dataclasses
import json
import types
import typing
from functools import lru_cache
from typing import Any, Union

#: ``X | Y`` annotations (Python 3.10+); Python 3.9 has only typing.Union
_UNIONS = (Union, getattr(types, "UnionType", Union))


class DecodeError(ValueError):
    """A value that does not fit its dataclass; the text names the field path at fault."""


def to_dict(obj) -> dict:
    """The fields of dataclass instance ``obj`` as JSON-ready values (nested dataclasses as dicts)."""
    return dataclasses.asdict(obj)


def from_dict(cls, obj: Any, path: str):
    """An instance of dataclass ``cls`` from the JSON value ``obj``.

    Raises DecodeError naming ``path`` + the field path of an unknown, missing or mistyped field
    (``path.field``, ``path.list[3].field``)."""
    return _build(cls, obj, path)


@lru_cache(maxsize=None)
def _hints(cls) -> tuple:
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name]) for f in dataclasses.fields(cls))


def _build(cls, obj, path: str):
    if not isinstance(obj, dict):
        raise DecodeError(f"{path}: expected an object ({cls.__name__}), got {type(obj).__name__}")
    fields = _hints(cls)
    names = {n for n, _ in fields}
    unknown = sorted(set(obj) - names)
    if unknown:
        raise DecodeError(f"{path}.{unknown[0]}: unknown field of {cls.__name__}; allowed: "
                          f"{', '.join(sorted(names)) or '(none)'}")
    missing = [n for n, _ in fields if n not in obj]
    if missing:
        raise DecodeError(f"{path}.{missing[0]}: missing field of {cls.__name__}")
    return cls(**{n: _value(t, obj[n], f"{path}.{n}") for n, t in fields})


def _value(t, v, path: str):
    origin = typing.get_origin(t)
    if origin in _UNIONS:
        args = typing.get_args(t)
        if v is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _value(inner[0], v, path) if len(inner) == 1 else _one_of(inner, v, path)
    if origin is list:
        if not isinstance(v, list):
            raise DecodeError(f"{path}: expected a list, got {type(v).__name__}")
        (inner,) = typing.get_args(t)
        return [_value(inner, x, f"{path}[{i}]") for i, x in enumerate(v)]
    if origin is dict:
        if not isinstance(v, dict):
            raise DecodeError(f"{path}: expected an object, got {type(v).__name__}")
        key_t, inner = typing.get_args(t)
        if key_t is not str:
            raise DecodeError(f"{path}: dict keys must be str in JSON, the field says {key_t!r}")
        return {k: _value(inner, x, f"{path}[{k!r}]") for k, x in v.items()}
    if dataclasses.is_dataclass(t):
        return _build(t, v, path)
    if t is dict:  # a plugin's settings (e.g. TransportParams.cc_settings): names -> numbers or booleans
        if not isinstance(v, dict) or not all(isinstance(k, str) and isinstance(x, (int, float, bool))
                                              for k, x in v.items()):
            raise DecodeError(f"{path}: expected an object of numbers and booleans, got {str(v)[:120]}")
        return dict(v)
    ok = {int: lambda x: isinstance(x, int) and not isinstance(x, bool),
          float: lambda x: isinstance(x, (int, float)) and not isinstance(x, bool),
          str: lambda x: isinstance(x, str), bool: lambda x: isinstance(x, bool)}.get(t)
    if ok is None:
        raise DecodeError(f"{path}: field type {t!r} is not supported by the codec")
    if not ok(v):
        raise DecodeError(f"{path}: expected {t.__name__}, got {type(v).__name__} {v!r}")
    return float(v) if t is float else v


def _one_of(classes: list, v, path: str):
    """The record of the one dataclass of ``classes`` whose field names are exactly the keys of ``v``."""
    if not all(dataclasses.is_dataclass(c) for c in classes):
        raise DecodeError(f"{path}: a union of {classes!r}: only unions of dataclasses are supported by the codec")
    names = " or ".join(c.__name__ for c in classes)
    if not isinstance(v, dict):
        raise DecodeError(f"{path}: expected an object ({names}), got {type(v).__name__}")
    for cls in classes:
        if {n for n, _ in _hints(cls)} == set(v):
            return _build(cls, v, path)
    shapes = "; ".join(f"{c.__name__}: {', '.join(n for n, _ in _hints(c))}" for c in classes)
    raise DecodeError(f"{path}: fields {', '.join(sorted(v)) or '(none)'} are those of none of {names} ({shapes})")


def from_tagged_line(line, tag_key: str, classes: dict, noun: str, what: str):
    """The record of one JSON line ``{tag_key: TAG, ...fields}``, its class looked up by TAG in ``classes``.
    ``noun`` names a record in errors (with its article: "a message"), ``what`` its tag ("message type").
    Raises DecodeError: not JSON, not an
    object with ``tag_key``, an unknown tag (naming the allowed ones), or a bad field (its path)."""
    try:
        obj = json.loads(line)
    except ValueError as e:
        raise DecodeError(f"not a JSON line ({e}): {str(line)[:120]!r}") from None
    if not isinstance(obj, dict) or tag_key not in obj:
        raise DecodeError(f"{noun} is a JSON object with a {tag_key!r} key; "
                          f"got {str(line)[:120]!r}")
    tag = obj.pop(tag_key)
    cls = classes.get(tag) if isinstance(tag, str) else None
    if cls is None:
        raise DecodeError(f"unknown {what} {tag!r}; allowed: {', '.join(classes)}")
    return from_dict(cls, obj, tag)


__all__ = ["DecodeError", "from_dict", "from_tagged_line", "to_dict"]
