"""Atomic file output: write to a temporary file beside the target, then rename.

An interrupted write leaves the previous file (or none), never a truncated one. The file gets
the permissions a plain ``open(path, "w")`` would give (the process umask, or the mode of the
file it replaces), not the private mode of the temporary file.
"""

from __future__ import annotations

import errno
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from ..errors import UserError

# The longest file name the common file systems take, in bytes (NAME_MAX).
NAME_MAX = 255


def _unshowable(c: str) -> bool:
    """A control character (C0, DEL, C1) or a bidirectional override: a file name holding one
    cannot be shown as it is."""
    o = ord(c)
    return o < 32 or 127 <= o < 160 or 0x202A <= o <= 0x202E or 0x2066 <= o <= 0x2069


def output_path(path: str | Path, option: str, folder: bool = False) -> Path:
    """Check, before any work, that ``path`` can be written as a file (or, with ``folder``,
    used as a folder): not empty, not the wrong kind of thing, its folder creatable and
    writable. One clear error naming the option otherwise."""
    raw = str(path)
    p = Path(raw)
    if not raw.strip():
        raise UserError(
            "an empty path was given",
            path=option,
            hint="give a folder" if folder else "give a file path",
        )
    if any(_unshowable(c) for c in raw):
        # a tab or an escape in a file name is a shell slip, and messages could not show it
        shown = "".join(f"\\x{ord(c):02x}" if _unshowable(c) else c for c in raw)
        raise UserError(
            f"the path {shown} holds a control character",
            path=option,
            hint="give a path of printable characters",
        )
    longest = max((len(part.encode()) for part in p.parts), default=0)
    if longest > NAME_MAX:
        raise UserError(
            f"a name in the path is {longest} bytes long, more than a file system allows "
            f"({NAME_MAX})",
            path=option,
            hint="give a shorter name",
        )
    if folder:
        if p.exists() and not p.is_dir():
            raise UserError(
                f"{raw} is a file, not a folder", path=option, hint="give a folder (or a new name)"
            )
        target = p
    else:
        if p.is_dir() or raw.endswith(("/", os.sep)):
            raise UserError(f"{raw} is a folder", path=option, hint="give a file name inside it")
        _refuse_special(p, option)
        if p.is_file() and (not os.access(p, os.W_OK) or not p.stat().st_mode & 0o222):
            # (a rename could still replace it, but a read-only file is one its owner meant
            # to keep)
            raise UserError(f"{raw} is read-only", path=option, hint="give another path")
        target = Path(os.path.realpath(p)).parent
    # Nothing is created here: a run refused after this check (a bad scenario) leaves no
    # folder behind; the writer makes the folders when it writes. What must hold is that the
    # nearest folder there now is one this user can create them in.
    base = target
    while not os.path.lexists(base) and base.parent != base:
        base = base.parent
    if not base.is_dir():
        raise UserError(
            f"cannot create the folder {target}: {base} is not a folder",
            path=option,
            hint="pick a writable path",
        )
    if not os.access(base, os.W_OK | os.X_OK):
        what = (
            f"the folder {base}" if base == target else f"cannot create the folder {target}: {base}"
        )
        raise UserError(f"{what} is not writable", path=option, hint="pick another")
    try:  # permissions can say yes where the file system says no (/proc, a read-only mount)
        import tempfile

        fd, trial = tempfile.mkstemp(dir=base, prefix=".clustersim-write-check-")
        os.close(fd)
        os.unlink(trial)
    except OSError as exc:
        raise UserError(
            f"cannot write in the folder {base}: {exc.strerror}", path=option, hint="pick another"
        ) from None
    return p


def refuse_foreign(
    path: str | Path, ours: Any, option: str, what: str, writer: str, hint: str
) -> None:
    """Refuse an existing, non-empty ``path`` that ``ours(path)`` does not recognise as
    ``what`` this tool wrote: the ``writer``'s output replaces its file whole, and a file of the
    user's must not be lost to a mistyped option."""
    p = Path(path)
    if p.is_file() and p.stat().st_size and not ours(p):
        raise UserError(
            f"'{path}' exists and is not {what}; the {writer} would replace it",
            path=option,
            hint=hint,
        )


def _refuse_special(p: Path, option: str | None = None) -> None:
    """A device, a FIFO or a socket (directly or behind a link) is not a file an atomic rename
    may replace: refuse it rather than put a regular file in its place."""
    if os.path.lexists(p) and p.exists() and not p.is_file() and not p.is_dir():
        raise UserError(
            f"{p} is not a regular file (a device, pipe or socket)",
            file=None if option else str(p),
            path=option,
            hint="give a file path",
        )


def _hint_for(exc: OSError) -> str:
    """What to do where a write failed: a full disk needs room, not another path (the file as
    it was is kept, and a sweep's finished points are in its journal)."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "free some space there and run the same command again (nothing written is lost)"
    return "pick a writable path"


def write_atomic(path: str | Path, text: str | bytes) -> Path:
    """Write ``text`` (or bytes) to ``path`` atomically; through a symbolic link, to the file it
    names (the link stays)."""
    p = Path(path)
    if p.is_dir() or not str(path).strip():
        raise UserError("cannot write: the path is a folder", file=str(p), hint="give a file name")
    _refuse_special(p)
    if p.is_symlink():
        p = Path(os.path.realpath(p))
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        # (a bounded prefix: a long file name still leaves room for the random part)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name[:200]}.", dir=p.parent)
    except OSError as exc:
        raise UserError(f"cannot write: {exc.strerror}", file=str(p), hint=_hint_for(exc)) from None
    try:
        os.fchmod(fd, _mode_for(p))
        data = text.encode("utf-8") if isinstance(text, str) else text
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise UserError(f"cannot write: {exc.strerror}", file=str(p), hint=_hint_for(exc)) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _drop_stale_temporaries(p)
    return p


# A temporary file of an earlier write of the same file that was killed outright (SIGKILL, a
# power cut) is left behind; one this old is no other writer's, which would have finished.
STALE_TEMPORARY_S = 3600.0


def _drop_stale_temporaries(p: Path) -> None:
    import re
    import time

    pattern = re.compile(re.escape(f".{p.name[:200]}.") + r"[a-z0-9_]{8}")
    cutoff = time.time() - STALE_TEMPORARY_S
    try:
        for q in p.parent.iterdir():
            if pattern.fullmatch(q.name) and q.is_file() and q.stat().st_mtime < cutoff:
                q.unlink(missing_ok=True)
    except OSError:
        pass  # tidying only: the write itself succeeded


def _mode_for(p: Path) -> int:
    try:
        return p.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def finite(obj: Any) -> Any:
    """``obj`` with every non-finite float as None: JSON has no NaN or Infinity (a fit's R² over
    identical timings, say), and strict readers refuse them."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj


def write_json(path: str | Path, obj: Any) -> Path:
    return write_atomic(path, json.dumps(obj, default=str, separators=(",", ":")) + "\n")
