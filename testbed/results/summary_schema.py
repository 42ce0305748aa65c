"""The JSON schema of summary.json, generated from the types of testbed.results.shape.RunSummary.

:func:`json_schema` is the one schema every summary.json validates against, complete, interrupted, failed or
refused (tests/integration/test_summary_shape_of_runs.py checks real runs against it): every key of
:data:`testbed.results.shape.SUMMARY_KEYS` required, no other key, one JSON type per key (``null`` added for an
Optional one); ``transport`` an object with every key of :data:`testbed.results.shape.TRANSPORT_KEYS`;
``congestion`` an object with every key of testbed.results.congestion.CONGESTION_KEYS. :func:`summary_rows`
gives docs/tables.md's summary.json section (testbed.results.docs_tables).
"""
from __future__ import annotations

import dataclasses
import typing

from testbed.results.congestion import CONGESTION_KEYS
from testbed.results.shape import STATUSES, RunSummary, Transport, json_types

#: Python type -> JSON schema type.
_JSON_TYPE = {str: "string", bool: "boolean", int: "integer", float: "number", list: "array", dict: "object",
              type(None): "null"}


def _type_schema(hint) -> dict:
    types = json_types(hint)
    if Transport in types:
        return _object_schema(Transport)
    names = [_JSON_TYPE[t] for t in types]
    return {"type": names[0] if len(names) == 1 else names}


def _object_schema(cls) -> dict:
    hints = typing.get_type_hints(cls)
    props = {f.name: {**_type_schema(hints[f.name]), "description": f.metadata["doc"]}
             for f in dataclasses.fields(cls)}
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def json_schema() -> dict:
    """summary.json's JSON schema (draft 2020-12), from RunSummary's fields."""
    schema = _object_schema(RunSummary)
    props = schema["properties"]
    props["status"]["enum"] = list(STATUSES)
    props["congestion"]["required"] = list(CONGESTION_KEYS)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "summary.json", **schema}


def _type_name(hint) -> str:
    types = json_types(hint)
    text = " or ".join("object" if t is Transport else _JSON_TYPE[t] for t in types if t is not type(None))
    return text + (" or null" if type(None) in types else "")


def summary_rows() -> list[tuple[str, str, str]]:
    """(key, JSON type, description) per summary.json key, in file order; ``transport``'s keys as
    ``transport.KEY``."""
    rows = []
    for cls, prefix in ((RunSummary, ""), (Transport, "transport.")):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            rows.append((prefix + f.name, _type_name(hints[f.name]), f.metadata["doc"]))
    return rows
