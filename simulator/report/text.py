"""Making user text safe for a terminal.

Names, descriptions and paths come from files a user (or someone else) wrote. Before they reach
rich they are stripped of control and format characters (escape sequences, bidirectional
overrides, lone surrogates) and escaped, so that ``[red]x[/red]`` prints as written and ``[/]``
cannot break the markup. JSON and CSV output does not pass through here: it stays exact.
"""

from __future__ import annotations

import unicodedata

from rich.markup import escape

_KEEP = {"\n", "\t"}


def plain(text: object) -> str:
    """``text`` without control, format, surrogate or unassigned characters (newlines and tabs
    kept)."""
    s = str(text)
    if s.isprintable():
        return s
    return "".join(
        ch for ch in s if ch in _KEEP or ch.isprintable() or unicodedata.category(ch) == "Zs"
    )


def safe(text: object) -> str:
    """``text`` ready to embed in rich markup: :func:`plain`, then markup-escaped."""
    return escape(plain(text))
