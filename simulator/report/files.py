"""Atomic file output: write to a temporary file beside the target, then rename.

An interrupted write leaves the previous file (or none), never a truncated one. The file gets
the permissions a plain ``open(path, "w")`` would give (the process umask, or the mode of the
file it replaces), not the private mode of the temporary file.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from ..errors import UserError


def write_atomic(path: str | Path, text: str) -> Path:
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    except OSError as exc:
        raise UserError(
            f"cannot write: {exc.strerror}", file=str(p), hint="pick a writable path"
        ) from None
    try:
        os.fchmod(fd, _mode_for(p))
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


def _mode_for(p: Path) -> int:
    try:
        return p.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_json(path: str | Path, obj: Any) -> Path:
    return write_atomic(path, json.dumps(obj, indent=1, default=str) + "\n")
