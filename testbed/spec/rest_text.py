"""Plain text from reST-marked docstrings: what ``--help`` pages and generated docs show.

Docstrings here are written for Sphinx (``:mod:`testbed.spec```, ````-b````); a terminal or a
Markdown page shows that markup as is. :func:`plain` keeps each role's text and each inline
literal's content.
"""
from __future__ import annotations

import re

#: a Sphinx role such as :mod:`x`, :data:`~a.b`, :py:func:`f`, :ref:`title <target>`: its text
_ROLE_RE = re.compile(r":(?:[a-z]+:)?[a-z]+:`~?([^`<]*?)\s*(?:<[^`>]*>)?`")
#: a reST inline literal ``x``, or the default role `x`: its content
_LITERAL_RE = re.compile(r"``([^`]+)``|(?<![\w`])`([^`]+)`(?![\w`])")
#: what :func:`plain` removes, for tests: a role, a double backquote, or any backquote at all
MARKUP_RE = re.compile(r":[a-z]+:`|``|`")


def plain(text: str) -> str:
    """``text`` without reST roles and inline literals: ``:mod:`a.b``` -> ``a.b``, ``:data:`~a.B``` ->
    ``a.B``, ````-b```` -> ``-b``, `` `x` `` -> ``x``; everything else unchanged."""
    text = _ROLE_RE.sub(lambda m: m.group(1), text)
    return _LITERAL_RE.sub(lambda m: m.group(1) or m.group(2), text)


def markdown(text: str) -> str:
    """``text`` with reST roles and inline literals as Markdown code spans: ``:mod:`a.b``` -> `` `a.b` ``,
    ````-b```` -> `` `-b` ``; a ``::`` that opens a literal block becomes ``:``."""
    text = _ROLE_RE.sub(lambda m: f"`{m.group(1)}`", text)
    text = re.sub(r"``([^`]+)``", r"`\1`", text)
    return re.sub(r"::\n", ":\n", text)
