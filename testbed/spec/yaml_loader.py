"""Scenario YAML read as written: YAML 1.2 numbers and booleans, traps refused, bounded errors.

PyYAML implements YAML 1.1, where ``0100000`` is octal 32768, ``1:30`` is
base 60 (90), ``1e5`` is a string while ``1.0e+5`` is a float, and
``yes``/``no``/``on``/``off`` are booleans. :func:`load_yaml`
resolves plain scalars by the YAML 1.2 core schema instead, refuses the
ambiguous forms naming the key path and the literal, refuses alias
expansion bombs and duplicate keys, and clips every message to
:data:`MAX_ERROR_CHARS`.
"""
from __future__ import annotations

import copy
import re
from typing import Any

import yaml


class ScenarioError(ValueError):
    """A scenario file is malformed; the message names each bad key path."""


#: most values a scenario may expand to once YAML aliases are followed (alias bombs)
MAX_EXPANDED_VALUES = 10_000
#: longest error message (an error never repeats a huge value)
MAX_ERROR_CHARS = 3000

_AMBIGUOUS_TAG = "tag:testbed,2026:ambiguous-number"
#: YAML 1.2 core schema integers plus explicit hex/binary; a leading zero is ambiguous (below)
_INT_RE = re.compile(r"^(?:[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+|[-+]?0b[01_]+)$")
#: floats need a dot or an exponent; the exponent sign is optional (YAML 1.2): 1e5 == 1.0e+5
_FLOAT_RE = re.compile(r"^(?:[-+]?(?:[0-9][0-9_]*\.[0-9_]*|\.[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)?"
                       r"|[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")
#: YAML 1.1 reads these as octal (0100000 -> 32768) or base 60 (1:30 -> 90): refused
_LEADING_ZERO_RE = re.compile(r"^[-+]?0[0-9_]+$")
_SEXAGESIMAL_RE = re.compile(r"^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$")
#: only true/false are booleans (YAML 1.2); yes/no/on/off stay strings, so ``off`` can mean "disabled"
_BOOL_RE = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")


class _Ambiguous:
    """A plain scalar that YAML 1.1 would turn into a number the user did not write."""

    def __init__(self, literal: str):
        self.literal = literal

    def explain(self) -> str:
        lit = self.literal
        digits = lit.lstrip("+-").replace("_", "")
        if _SEXAGESIMAL_RE.match(lit) and ":" in lit:
            total = 0.0
            for part in digits.split(":"):
                total = total * 60 + float(part)
            yaml11 = f"{total:g}"
            what = "a base-60 (sexagesimal) number"
        else:
            yaml11 = str(int(digits, 8)) if set(digits) <= set("01234567") else f"the string {lit!r}"
            what = "a number with a leading zero (octal in YAML 1.1)"
        return (f"{lit} is {what}: YAML 1.1 reads it as {yaml11}, not what it looks like; "
                f"write the value in plain decimal without a leading zero or ':' "
                f"(or quote it with a unit, e.g. '100KB')")

    def __repr__(self) -> str:
        return self.literal


def _resolvers() -> dict:
    """SafeLoader's implicit resolvers with int, float and bool replaced (see the regexes above)."""
    out: dict = {}
    for first, pairs in yaml.SafeLoader.yaml_implicit_resolvers.items():
        keep = [(t, r) for t, r in pairs
                if t not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool")]
        if keep:
            out[first] = keep
    adds = [(_AMBIGUOUS_TAG, _LEADING_ZERO_RE, "-+0"), (_AMBIGUOUS_TAG, _SEXAGESIMAL_RE, "-+0123456789"),
            ("tag:yaml.org,2002:int", _INT_RE, "-+0123456789"),
            ("tag:yaml.org,2002:float", _FLOAT_RE, "-+0123456789."),
            ("tag:yaml.org,2002:bool", _BOOL_RE, "tTfF")]
    for tag, regex, firsts in adds:
        for ch in firsts:
            # ambiguous forms first: a leading-zero literal must not fall through to int or timestamp
            pairs = out.setdefault(ch, [])
            if tag == _AMBIGUOUS_TAG:
                pairs.insert(0, (tag, regex))
            else:
                pairs.append((tag, regex))
    return out


class _ScenarioLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 numbers and booleans, no ambiguous forms, no duplicate keys.

    - integers are decimal (or explicit ``0x``/``0b``); ``0100000`` (octal in YAML 1.1)
      and ``1:30`` (base 60 in YAML 1.1) load as :class:`_Ambiguous` and are refused by
      :func:`load_scenario` naming the key path and the literal;
    - ``1e5`` is a float like ``1.0e+5`` (YAML 1.1 leaves it a string), so sizes and
      rates written with exponents are read alike;
    - only true/false are booleans; ``off``/``on``/``yes``/``no`` stay strings;
    - a key given twice in one mapping is an error (PyYAML keeps the last silently).
    """

    yaml_implicit_resolvers = _resolvers()

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, _Ambiguous):
                key = key.literal
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {clip(repr(key), 80)} appears twice in one mapping", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


_ScenarioLoader.add_constructor(_AMBIGUOUS_TAG, lambda loader, node: _Ambiguous(node.value))


def _expanded_values(node, memo: dict, stack: set) -> int:
    """Values ``node`` stands for once every alias is copied out (shared nodes counted each time)."""
    key = id(node)
    if key in memo:
        return memo[key]
    if key in stack:
        raise ScenarioError("a YAML alias refers to the collection that contains it (recursive anchor)")
    stack.add(key)
    total = 1
    if isinstance(node, yaml.SequenceNode):
        for child in node.value:
            total += _expanded_values(child, memo, stack)
    elif isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            total += _expanded_values(k, memo, stack) + _expanded_values(v, memo, stack)
    stack.discard(key)
    memo[key] = total = min(total, MAX_EXPANDED_VALUES + 1)
    return total


def _ambiguous_paths(data: Any, path: str = "") -> list[str]:
    """One line per :class:`_Ambiguous` value in ``data``: ``key.path: explanation``."""
    out = []
    if isinstance(data, _Ambiguous):
        out.append(f"{path or '(top level)'}: {data.explain()}")
    elif isinstance(data, dict):
        for k, v in data.items():
            name = k.literal if isinstance(k, _Ambiguous) else str(k)
            out += _ambiguous_paths(v, f"{path}.{name}" if path else name)
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += _ambiguous_paths(v, f"{path}.{i}" if path else str(i))
    return out


def clip(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"... ({len(text) - limit} more characters not shown)"


def load_yaml(text: str, source: str = "scenario") -> Any:
    """Parse scenario YAML with :class:`_ScenarioLoader`; raise ScenarioError naming the problem.

    Refuses alias expansion bombs (more than :data:`MAX_EXPANDED_VALUES` values once
    aliases are followed) and ambiguous YAML 1.1 numbers (leading zero, base 60),
    each named by key path and literal.
    """
    loader = _ScenarioLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_values(node, {}, set()) > MAX_EXPANDED_VALUES:
            raise ScenarioError(f"{source}: YAML aliases expand to more than {MAX_EXPANDED_VALUES} values; "
                                f"a scenario is a few dozen keys: use fewer or less nested aliases")
        data = loader.construct_document(node)
    except RecursionError:
        raise ScenarioError(f"{source}: nested too deeply to be a scenario") from None
    except yaml.YAMLError as e:
        raise ScenarioError(clip(f"{source}: not valid YAML: {e}")) from None
    finally:
        loader.dispose()
    bad = _ambiguous_paths(data)
    if bad:
        raise ScenarioError(clip(f"{source}: invalid scenario:\n  " + "\n  ".join(bad)))
    return data


def merge(base: Any, over: Any) -> Any:
    """``over`` deep-merged into a copy of ``base`` (YAML data: a suite's overrides into a scenario): mappings
    key by key, anything else (a list, a number) replaced."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = copy.deepcopy(base)
        for k, v in over.items():
            out[k] = merge(out[k], v) if k in out else copy.deepcopy(v)
        return out
    return copy.deepcopy(over)


def did_you_mean(key: str, allowed: list[str]) -> str:
    """`` (did you mean K?)`` for the allowed key closest to ``key`` (dashes read as underscores) or the first
    one it begins, else ''."""
    import difflib

    k = key.replace("-", "_").lower()
    close = difflib.get_close_matches(k, allowed, n=1, cutoff=0.7) or [
        a for a in allowed if k and a.replace("_", "").startswith(k.replace("_", ""))][:1]
    return f" (did you mean {close[0]}?)" if close else ""
