"""Making user text safe for a terminal.

Names, descriptions and paths come from files a user (or someone else) wrote. Before they reach
rich they are stripped of control and format characters (escape sequences, bidirectional
overrides, lone surrogates) and escaped, so that ``[red]x[/red]`` prints as written and ``[/]``
cannot break the markup. JSON and CSV output does not pass through here: it stays exact.
"""

from __future__ import annotations

import math
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
        # a byte of a path that is not UTF-8 (Python's surrogateescape) shows as \xff, so a
        # message never names another file than the one meant
        f"\\x{ord(ch) - 0xDC00:02x}" if 0xDC80 <= ord(ch) <= 0xDCFF else ch
        for ch in s
        if ch in _KEEP
        or ch.isprintable()
        or unicodedata.category(ch) == "Zs"
        or 0xDC80 <= ord(ch) <= 0xDCFF
    )


def safe(text: object) -> str:
    """``text`` ready to embed in rich markup: :func:`plain`, then markup-escaped."""
    return escape(plain(text))


def usd(v: float) -> str:
    """Dollars: whole from $1,000, to the cent from $1, else to three significant figures (a
    fraction of a cent per step still shows, without an exponent)."""
    if v == 0 or not math.isfinite(v):
        return f"{v:g}"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 1:
        return f"{v:,.2f}"
    return f"{v:.{2 - math.floor(math.log10(abs(v)))}f}"


def duration(days: float) -> str:
    """A run's length: days from one day up, else hours, else minutes."""
    if days >= 1:
        return f"{days:,.1f} days"
    if days * 24 >= 1:
        return f"{days * 24:.1f} hours"
    return f"{days * 1440:.1f} minutes"
