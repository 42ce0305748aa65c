"""docs/scenario-reference.md, generated from the spec models (``python -m testbed.spec.reference >
docs/scenario-reference.md``; tests/test_docs_links.py keeps the committed file equal to :func:`markdown`).

One section per model reachable from :class:`testbed.spec.scenario.ScenarioSpec` (``fabric``,
``transport``, ``workload.sizes``, ...), in the order the scenario declares them: the model's docstring
as Markdown, then one row per key with its type (rates and sizes as the spec reads them), default,
allowed values (pydantic bounds, ``Literal`` choices, the registries a name is looked up in) and the
``#:`` or trailing comment the source gives the field. Then the plugin blocks: the ``Settings`` of each
queue backend (``fabric.<name>``), congestion control (``transport.<name>``) and load-balancing policy
(keys of ``load_balance``), with their bounds (traffic.registry.setting).
"""
from __future__ import annotations

import dataclasses
import inspect
import re
import types
import typing
from typing import Any, Literal, Union

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from typing_extensions import Annotated

from testbed.spec.rest_text import markdown as md_text
from testbed.spec import units
from testbed.spec.scenario import ScenarioSpec
from traffic.registry import BOUNDS_KEY

_BOUND_TEXT = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))


def _registries() -> dict[str, list[str]]:
    """key path -> the names its registry accepts (a plain ``str`` field looked up by name)."""
    from controllers import lb
    from dataplane import queues
    from topology import KINDS
    from traffic import collectives
    from traffic.transport.cc import CONGESTION_CONTROLS
    from traffic.transport.entropy import ENTROPY_POLICIES
    from traffic.transport.selective import LOSS_RECOVERIES

    return {"fabric.kind": sorted(KINDS), "fabric.queue_backend": sorted(queues.BACKENDS),
            "transport.congestion_control": sorted(CONGESTION_CONTROLS),
            "transport.entropy": sorted(ENTROPY_POLICIES), "transport.loss_recovery": list(LOSS_RECOVERIES),
            "load_balance.policy": sorted(lb.POLICIES), "workload.collective": list(collectives.collectives()),
            "workload.algorithm": sorted({a for _, a in collectives.ALGORITHMS})}


def _kind(metadata) -> str:
    funcs = _validators(metadata)
    return "rate" if units.parse_rate in funcs else "size" if units.parse_size in funcs else ""


def _bounds(metadata, kind: str = "") -> list[str]:
    out = []
    for m in metadata:
        if isinstance(m, FieldInfo):
            out += _bounds(m.metadata, kind)
        for attr, sign in _BOUND_TEXT:
            if isinstance(m, getattr(annotated_types, attr.capitalize())):
                out.append(f"{sign} {_num(getattr(m, attr), kind)}")
        if isinstance(m, annotated_types.MinLen):
            out.append(f"at least {m.min_length} item{'s' if m.min_length != 1 else ''}")
    return out


def _num(v: Any, kind: str = "") -> str:
    """A number as the scenario would write it: rates with an SI suffix (``10M``), sizes in KiB/MiB
    when whole, other integers with thousands separators."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if kind == "rate" and isinstance(v, int):
        for unit, div in (("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3)):
            if v >= div and v % div == 0:
                return f"{v // div}{unit}"
    if kind == "size" and isinstance(v, int):
        for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("GB", 10**9), ("MB", 10**6),
                          ("KB", 10**3)):
            if v >= div and v % div == 0:
                return f"{v // div}{unit}"
    return f"{v:,}" if isinstance(v, int) else f"{v:g}"


def _validators(metadata) -> set:
    return {getattr(m, "func", None) for m in metadata}


def _type(ann: Any, metadata=(), in_union: bool = False) -> tuple[str, list[str]]:
    """(type text, allowed texts) of an annotation with its field metadata."""
    allowed = list(dict.fromkeys(_bounds(metadata, _kind(metadata))))
    funcs = _validators(metadata)
    off = units.off_to_none in funcs or units.off_refusing_zero in funcs
    if typing.get_origin(ann) is Annotated:
        inner, *meta = typing.get_args(ann)
        text, more = _type(inner, meta, in_union)
        return text, allowed + more
    if units.parse_rate in funcs:
        return "rate (bit/s, or like `10M`)", allowed
    if units.parse_size in funcs:
        return "size (bytes, or like `64KiB`, `100KB`)", allowed
    origin = typing.get_origin(ann)
    if origin is Literal:
        values = ", ".join(f"`{a}`" for a in typing.get_args(ann))
        return (values if in_union else "one of " + values), allowed
    if origin in (Union, types.UnionType):
        parts, nullable = [], False
        for a in typing.get_args(ann):
            if a is type(None):
                nullable = True
                continue
            text, more = _type(a, (), True)
            parts.append(text)
            allowed += more
        text = " or ".join(dict.fromkeys(parts))
        if nullable:
            text += " or `off`" if off else " or null"
        return text, allowed
    if origin in (tuple, list):
        args = [a for a in typing.get_args(ann) if a is not Ellipsis]
        return "list of " + (_type(args[0])[0] if args else "values"), allowed
    if origin is dict:
        k, v = typing.get_args(ann)
        return f"mapping of {_type(k)[0]} to {_type(v)[0]}", allowed
    if inspect.isclass(ann) and issubclass(ann, BaseModel):
        return "mapping", allowed
    return {int: "integer", float: "number", str: "string", bool: "`true` or `false`"}.get(ann, str(ann)), allowed


def _default(f: FieldInfo) -> str:
    """The default as the scenario would write it; ``required``, ``absent`` (None), ``(section)``."""
    if f.is_required():
        return "required"
    d = f.default if f.default is not PydanticUndefined else f.default_factory()
    if isinstance(d, BaseModel):
        return "(section)"
    if d is None:
        return "absent"
    if d in ((), {}, []):
        return "empty"
    if isinstance(d, bool):
        return "`true`" if d else "`false`"
    text = _type(f.annotation, f.metadata)[0]
    kind = "size" if text.startswith("size") else "rate" if text.startswith("rate") else ""
    return f"`{_num(d, kind)}`"


def _comments(cls: type) -> dict[str, str]:
    """field name -> its ``#:`` comment lines above it, or its trailing ``# ...`` comment, in ``cls``'s source."""
    try:
        src = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    out, pending = {}, []
    for line in src[1:]:
        m = re.match(r"^    #: ?(.*)$", line)
        if m:
            pending.append(m.group(1))
            continue
        m = re.match(r"^    ([a-z_][a-z0-9_]*)\s*:", line)
        if m:
            trailing = re.search(r"\s#\s+(.*)$", line)
            text = " ".join(pending) or (trailing.group(1) if trailing else "")
            if text:
                out[m.group(1)] = md_text(text)
        pending = []
    return out


def _doc(obj) -> str:
    doc = inspect.getdoc(obj) or ""
    if obj.__doc__ is None or (inspect.isclass(obj) and "__doc__" not in vars(obj)):
        return ""
    return md_text(doc)  # reST literal blocks (``::`` and an indented block) stay indented: Markdown code


def _models(model: type[BaseModel], path: str, seen: list) -> None:
    seen.append((path, model))
    for name, f in model.model_fields.items():
        for a in _walk(f.annotation):
            if inspect.isclass(a) and issubclass(a, BaseModel):
                _models(a, f"{path}.{name}" if path else name, seen)
                break


def _walk(ann):
    yield ann
    for a in typing.get_args(ann):
        yield from _walk(a)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _model_section(path: str, model: type[BaseModel], registries: dict, first_path: dict | None = None) -> list[str]:
    title = f"`{path}`" if path else "top level"
    is_list = path in ("faults", "workload.pattern.flows", "jobs")
    lines = [f"## {title}", ""]
    doc = _doc(model)
    if doc:
        lines += [doc, ""]
    if is_list:
        lines += ["A list: each item is a mapping with these keys.", ""]
    comments = _comments(model)
    for base in model.__mro__[1:]:
        if inspect.isclass(base) and issubclass(base, BaseModel) and base is not BaseModel:
            comments = {**_comments(base), **comments}
    lines += ["| key | type | default | allowed | note |", "|---|---|---|---|---|"]
    for name, f in model.model_fields.items():
        key = f"{path}.{name}" if path else name
        text, allowed = _type(f.annotation, f.metadata)
        if key in registries:
            allowed = ["one of " + ", ".join(f"`{n}`" for n in registries[key])] + allowed
        note = comments.get(name, "")
        sub = next((a for a in _walk(f.annotation) if inspect.isclass(a) and issubclass(a, BaseModel)), None)
        if sub is not None:
            target = (first_path or {}).get(sub, key)  # a model listed once: the first path naming it
            note = (note + "; " if note else "") + f"keys: section `{target}`" + (" below" if target == key else "")
        lines.append(f"| `{name}` | {_cell(text)} | {_cell(_default(f))} | {_cell(', '.join(allowed))} | "
                     f"{_cell(note)} |")
    return lines + [""]


def _settings_section(title: str, cls: type, how: str) -> list[str]:
    lines = [f"### {title}", "", how, ""]
    doc = _doc(cls)
    if doc:
        lines += [doc, ""]
    hints = typing.get_type_hints(cls)
    comments = _comments(cls)
    lines += ["| key | type | default | allowed | note |", "|---|---|---|---|---|"]
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        text = ("rate (bit/s, or like `10M`)" if f.name.endswith("_bps") else
                "size (bytes, or like `64KiB`)" if f.name.endswith("_bytes") else _type(t)[0])
        bounds = f.metadata.get(BOUNDS_KEY, {})
        kind = "rate" if f.name.endswith("_bps") else "size" if f.name.endswith("_bytes") else ""
        allowed = [f"{sign} {_num(bounds[k], kind)}" for k, sign in _BOUND_TEXT if k in bounds]
        default = f.default if f.default is not dataclasses.MISSING else "required"
        if isinstance(default, bool):
            default = "true" if default else "false"
        lines.append(f"| `{f.name}` | {_cell(text)} | `{_num(default, kind)}` | {_cell(', '.join(allowed))} | "
                     f"{_cell(comments.get(f.name, ''))} |")
    return lines + [""]


def _plugin_sections() -> list[str]:
    from controllers import lb
    from dataplane import queues
    from testbed.spec import plugins
    from traffic.transport.cc import CONGESTION_CONTROLS

    out = ["## Plugin blocks", "",
           "Keys a registered plugin declares in its `Settings` (traffic.registry.setting), checked like every "
           "other key (testbed/spec/plugins.py). A block is allowed only with its plugin chosen.", ""]
    for name, backend in sorted(queues.BACKENDS.items()):
        if plugins.keys(backend.Settings):
            out += _settings_section(f"`fabric.{name}`", backend.Settings,
                                     f"With `fabric.queue_backend: {name}` (dataplane/queues/).")
    for name, cc in sorted(CONGESTION_CONTROLS.items()):
        if plugins.keys(cc.Settings):
            out += _settings_section(f"`transport.{name}`", cc.Settings,
                                     f"With `transport.congestion_control: {name}`: values in the run's own "
                                     "(dilated) units; a key left out takes its published value scaled by "
                                     "the dilation (manifest.json `congestion_control` lists each).")
    for name in sorted(lb.POLICIES):
        cls = lb.settings_class(name)
        if plugins.keys(cls):
            out += _settings_section(f"`load_balance` with `policy: {name}`", cls,
                                     f"Keys next to `policy: {name}` in `load_balance` (controllers/lb/).")
    return out


def markdown() -> str:
    """docs/scenario-reference.md: every scenario key with type, default, allowed values and note."""
    registries = _registries()
    sections: list = []
    _models(ScenarioSpec, "", sections)
    lines = ["# Scenario reference", "",
             "Generated from the spec models in `testbed/spec/` (`python -m testbed.spec.reference > "
             "docs/scenario-reference.md`); do not edit by hand. What the keys do, with examples: "
             "[scenarios.md](scenarios.md). A key not listed is refused, naming its path and the allowed "
             "keys. `off` (or null) switches a limit off where the type says so; rates take bit/s or `10M`, "
             "`10Mbit`, `1.5G`; sizes take bytes or `64KiB`, `4MiB`, `100KB`.", ""]
    seen_models = set()
    first_path: dict = {}
    for path, model in sections:
        first_path.setdefault(model, path)
    for path, model in sections:
        if model in seen_models and path != "":
            continue
        seen_models.add(model)
        lines += _model_section(path, model, registries, first_path)
    lines += _plugin_sections()
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).rstrip("\n") + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
