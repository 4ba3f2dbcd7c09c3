"""User-facing errors: what went wrong, where (file and field path), and what to do.

The CLI turns a :class:`UserError` into one message on stderr and exit code 2; anything else is an
internal error (its traceback, and exit code 70: exit 1 is a negative answer, such as `check`'s
plan that does not fit).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class UserError(Exception):
    """An error the user can fix: bad input, unknown name, impossible layout."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        path: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.message = message
        self.file = file
        self.path = path
        self.hint = hint
        super().__init__(self.render())

    def render(self) -> str:
        where = ""
        if self.file:
            where = str(self.file)
        if self.path:
            where = f"{where}: {self.path}" if where else self.path
        text = f"{where}: {self.message}" if where else self.message
        if self.hint:
            text += f"\n  what to do: {self.hint}"
        return text

    def located(self, file: str | None = None, prefix: str | None = None) -> UserError:
        """A copy of this error with a file and/or a field-path prefix filled in."""
        path = self.path
        if prefix:
            path = f"{prefix}.{path}" if path else prefix
        return UserError(self.message, file=self.file or file, path=path, hint=self.hint)


def colon_hint(glued: str) -> str:
    """The hint for a YAML key written without a space after its colon ("layers:12", which
    YAML reads as one scalar, not a key and its value)."""
    key, _, rest = glued.partition(":")
    return f"YAML needs a space after a colon: write '{key}: {rest}'"


def closest(name: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """The candidates closest to ``name`` (for 'did you mean' hints)."""
    pool = sorted(set(candidates))
    key = name.strip().lower()
    # a path or file name written for a name (gpus/h20.yaml): its stem
    key = key.rsplit("/", 1)[-1].removesuffix(".yaml").removesuffix(".yml")
    by_key: dict[str, str] = {}
    for c in pool:
        by_key.setdefault(c.lower(), c)
    if key in by_key:
        return [by_key[key]]  # only the case differs
    # what the name begins ('H20' for h20-96gb), else spelling, else a part of it (case ignored)
    found = [by_key[k] for k in sorted(by_key) if k.startswith(key)]
    if not found:
        found = [by_key[k] for k in difflib.get_close_matches(key, list(by_key), n, 0.4)]
    if not found:
        found = [by_key[k] for k in sorted(by_key) if key in k or k in key]
    return found[:n]
