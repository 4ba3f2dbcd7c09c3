"""A sweep's output file: its formats (CSV, JSON lines, Parquet), the rows a re-run reads back
(only sound ones: an edited or damaged row is evaluated again), the journal finished points are
appended to, the final atomic write sorted by point, and the copy ``--replace`` keeps of the
file it replaces until the new run finishes."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..report.files import write_atomic
from .plans import COLUMNS
from .spec import SweepSpec

Rows = list[dict[str, Any]]
TEXT_COLUMNS = frozenset(
    {"point_key", "sweep", "status", "gpu", "fabric", "network", "software", "pricing", "tier"}
    | {"schedule", "sharding", "recompute", "notes"}
)


def columns(spec: SweepSpec) -> list[str]:
    axes = [f"axis_{next(iter(a))}" for a in spec.axes]
    return COLUMNS[:4] + axes + COLUMNS[4:]


def _fmt(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return "jsonl"
    if suffix == ".parquet":
        return "parquet"
    return "csv"


def journal(path: Path) -> Path:
    return path.with_name(path.name + ".partial.jsonl") if _fmt(path) == "parquet" else path


def _parse(value: str) -> Any:
    if value == "":
        return None
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


# Columns of counts and figures: a resumed row must hold a finite, non-negative number (or
# nothing, as a point without a valid plan has) in each, or its point is evaluated again.
NUMBER_COLUMNS = frozenset(COLUMNS) - TEXT_COLUMNS - {"sweep", "sequence_parallel"}


# What every evaluated ("ok") row holds, and what a priced one holds besides: a row missing
# one (a blanked cell, a deleted column) cannot stand for its point.
OK_FIGURES = (
    "memory_gb_per_gpu",
    "step_time_s",
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "mfu",
    "model_tflops_per_gpu",
    "goodput",
    *(c for c in COLUMNS if c.startswith("idle_") or c in ("compute_s", "optimizer_s")),
)
PRICED_FIGURES = ("usd_per_gpu_hour", "usd_per_million_tokens")


# Columns of whole counts: a resumed row holds an integer there (an edited 1.5 is damage).
INT_COLUMNS = frozenset(
    {"point", "point_rows", "gpus_per_node", "nodes", "gpus", "nics_per_node", "tp", "pp"}
    | {"dp", "cp", "micro_batch", "micro_batches", "virtual_stages", "plans_valid"}
    | {"plans_simulated", "plans_dropped_memory", "plans_dropped_invalid"}
)
# What an evaluated row names (never blank): the reports index them.
OK_NAMES = ("sweep", "gpu", "fabric", "software", "schedule", "sharding", "recompute")
# The columns every sweep output starts with: a file without them all is not one.
HEAD = ("sweep", "point", "point_key", "point_rows", "status")
_DAMAGED = "\x00damaged"  # marks a row that does not parse (a CSV row's cells miscounted)
_KEY = re.compile(r'"point_key": "([0-9a-f]+)"')  # a damaged JSON line's key, as we write it


def sound(row: Any, cols: list[str] | None = None) -> bool:
    """Whether a row read back from ``--out`` can stand for its point: a mapping with every
    column of ``cols`` (axis columns aside: a point is relabelled as the spec has it now),
    whose number columns hold numbers (an edited or damaged file may hold text, NaN, a
    fraction of a count or a negative time), with every figure an evaluated point has."""
    if not isinstance(row, dict) or _DAMAGED in row:
        return False
    if cols is not None and any(c not in row for c in cols if not c.startswith("axis_")):
        return False  # a column deleted (or an older clustersim's file): evaluated again
    n = row.get("point_rows")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        return False
    if not isinstance(row.get("status"), str) or not isinstance(row.get("point_key"), str):
        return False
    if any(not isinstance(row[c], str) for c in TEXT_COLUMNS if row.get(c) is not None):
        return False  # a JSON line edited to "status": 5 or "gpu": [] is damaged
    for c in NUMBER_COLUMNS:
        v = row.get(c)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return False
        if not math.isfinite(v) or v < 0 or (c in INT_COLUMNS and v != int(v)):
            return False
    return row.get("status") != "ok" or _evaluated(row)


def _evaluated(row: dict[str, Any]) -> bool:
    """An evaluated ("ok") row names its parts, holds every figure (and a priced one its
    cost), a step that takes time, and a layout whose GPUs add up."""
    if any(not isinstance(row.get(c), str) or not row[c] for c in OK_NAMES):
        return False
    wanted = list(OK_FIGURES)
    if row.get("pricing"):
        wanted += PRICED_FIGURES
        if row.get("time_to_train_days") is not None:
            wanted += ("usd_total", "usd_idle")
    if any(row.get(c) is None for c in wanted):
        return False
    if not (row["step_time_s"] > 0 and row["tokens_per_s"] > 0):
        return False
    counts = [row.get(c) for c in ("tp", "pp", "dp", "cp", "nodes", "gpus_per_node", "gpus")]
    if all(isinstance(v, int) for v in counts):
        tp, pp, dp, cp, nodes, per, gpus = (int(v) for v in counts)  # type: ignore[arg-type]
        return gpus == tp * pp * dp * cp == nodes * per
    return True


def read_all(path: Path) -> list[Any]:
    """Every row in ``path``, sound or not (a torn last line from an interruption, or a line
    that is not JSON, aside): the journal of an unfinished Parquet sweep, else the finished
    file. A CSV row with too few or too many cells is marked damaged."""
    j = journal(path)
    if not j.exists():
        if j != path and path.exists():
            try:
                import pyarrow.parquet as pq

                return list(pq.read_table(path).to_pylist())
            except Exception:  # not readable as Parquet (or no pyarrow): evaluate afresh
                return []
        return []
    raw = j.read_bytes()
    rows: list[Any] = []
    if _fmt(j) == "csv":
        # A torn last line (no newline yet) is dropped as bytes: it may end inside a multi-byte
        # character; a damaged byte elsewhere spoils only its own row's values. A byte-order
        # mark (a spreadsheet's "CSV UTF-8") is no part of the first column's name.
        written = raw[: raw.rfind(b"\n") + 1].decode("utf-8-sig", errors="replace")
        for r in csv.DictReader(io.StringIO(written)):
            if None in r or any(v is None for v in r.values()):
                rows.append({"point_key": r.get("point_key"), _DAMAGED: True})
                continue
            # Text columns stay text: a point key such as '004201359279' or '37876569e336'
            # is not a number.
            rows.append({k: v if k in TEXT_COLUMNS else _parse(v) for k, v in r.items()})
    else:
        lines = raw.decode("utf-8-sig", errors="replace").splitlines()
        torn = not raw.endswith(b"\n")  # an interruption's last line, still being written
        for i, line in enumerate(lines):
            try:
                rows.append(json.loads(line))
            except (ValueError, RecursionError):  # damaged (or an integer past Python's limit)
                if line.strip() and not (torn and i == len(lines) - 1):
                    # damaged: evaluated again where its key names a point of the run, else a
                    # row the run would drop (counted), as a damaged CSV row is
                    key = _KEY.search(line)
                    rows.append({"point_key": key.group(1) if key else None, _DAMAGED: True})
    return rows


def read_rows(path: Path, cols: list[str] | None = None) -> Rows:
    """The rows of ``path`` (:func:`read_all`) that can stand for their points."""
    return [r for r in read_all(path) if sound(r, cols)]


def unmatched(rows: list[Any], keys: set[str]) -> int:
    """How many of ``rows``, sound or not, stand for no point of ``keys``: a run may drop
    them only when told to (``--replace``)."""
    return sum(
        1
        for r in rows
        if not isinstance(r, dict)
        or not isinstance(r.get("point_key"), str)
        or r["point_key"] not in keys
    )


def check_output(path: Path) -> None:
    """Refuse an existing ``--out`` file that is not a clustersim sweep output (its rows would
    be replaced): a sweep resumes only from its own CSV, JSON lines or Parquet rows."""
    j = journal(path)
    target = j if j.exists() else path
    if not target.is_file() or target.stat().st_size == 0:
        return
    ok = read = False
    try:
        if _fmt(target) == "parquet":
            import pyarrow.parquet as pq

            names = pq.read_schema(target).names
            read = True  # a Parquet file, whole: another program's if not ours
            ok = set(HEAD) <= set(names)
        else:
            # the first line alone: damage further on (a crash's binary tail) leaves the file
            # ours, its sound rows kept by read_rows
            with open(target, "rb") as fh:
                first = fh.readline(1 << 20).decode("utf-8-sig")  # a header is a few KB
            if _fmt(target) == "csv":
                ok = set(HEAD) <= set(next(csv.reader([first]), []))
            elif not first.endswith("\n") and first.startswith('{"sweep": '):
                ok = True  # our first row, torn by an interruption: resumed without it
            else:
                line = json.loads(first)
                ok = isinstance(line, dict) and set(HEAD) <= set(line)
    except Exception:  # unreadable, not UTF-8, not JSON, no pyarrow: not ours to replace
        ok = False
    if not ok and _fmt(target) == "parquet" and not _has_pyarrow():
        raise UserError(
            f"'{target}' is a Parquet file, which needs pyarrow to read (and to write)",
            path="--out",
            hint='pip install "clustersim[parquet]", or write .csv or .jsonl',
        )
    if not ok:
        try:
            with open(target, "rb") as fh:
                damaged = _fmt(target) == "parquet" and not read and fh.read(4) == b"PAR1"
        except OSError:  # unreadable: named as not a sweep output, like any other
            damaged = False
        what = (
            "is a damaged Parquet file (cut short?), not a clustersim sweep output it can resume"
            if damaged
            else "is not a clustersim sweep output"
        )
        raise UserError(
            f"'{target}' exists and {what}; a sweep would replace it",
            path="--out",
            hint="give another --out, or move that file away",
        )


def _has_pyarrow() -> bool:
    import importlib.util

    return importlib.util.find_spec("pyarrow") is not None


def complete_points(rows: Rows) -> dict[str, Rows]:
    """Rows grouped by point key, only the points whose every row is present."""
    by: dict[str, Rows] = {}
    for r in rows:
        by.setdefault(str(r.get("point_key")), []).append(r)
    return {k: v for k, v in by.items() if v and len(v) == int(v[0].get("point_rows") or 0)}


def _csv_text(cols: list[str], rows: Rows, header: bool) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    if header:
        w.writeheader()
    for r in rows:
        w.writerow({c: ("" if r.get(c) is None else r.get(c)) for c in cols})
    return buf.getvalue()


def _jsonl_text(cols: list[str], rows: Rows) -> str:
    return "".join(json.dumps({c: r.get(c) for c in cols}) + "\n" for r in rows)


def text(path: Path, cols: list[str], rows: Rows, header: bool = True) -> str:
    """``rows`` as the text of ``path``'s format (CSV, else JSON lines)."""
    return _csv_text(cols, rows, header) if _fmt(path) == "csv" else _jsonl_text(cols, rows)


def _sorted(rows: Rows) -> Rows:
    return sorted(rows, key=lambda r: (int(r["point"]), r.get("step_time_s") or 0.0))


def append(path: Path, cols: list[str], rows: Rows) -> None:
    j = journal(path)
    body = text(j, cols, rows, header=not j.exists() or j.stat().st_size == 0)
    with open(j, "a", encoding="utf-8") as fh:
        fh.write(body)
        fh.flush()
        os.fsync(fh.fileno())


def finish(path: Path, cols: list[str], rows: Rows) -> Rows:
    """The final file, sorted by point (and by plan within a point), written atomically; the
    rows in that order."""
    rows = _sorted(rows)
    if _fmt(path) != "parquet":
        write_atomic(path, text(path, cols, rows))
    else:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise UserError(
                "Parquet output needs pyarrow",
                file=str(path),
                hint='pip install "clustersim[parquet]", or write .csv or .jsonl',
            ) from None
        table = pa.Table.from_pylist([{c: r.get(c) for c in cols} for r in rows])
        tmp = path.with_name(f".{path.name}.tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, path)
        journal(path).unlink(missing_ok=True)
    return rows


def replaced_copy(path: Path) -> Path:
    """Where ``--replace`` keeps ``path`` as it was until the run that replaces it finishes."""
    return path.with_name(path.name + ".replaced")


def replaced_owner(out: Path) -> Path:
    """The note of which run kept ``out``'s ``.replaced`` copies (its points' keys' digest)."""
    return out.with_name(out.name + ".replaced.run")


def run_id(keys: set[str]) -> str:
    """A run as :func:`keep_until_finished` notes it: its points' keys' digest."""
    import hashlib

    return hashlib.sha1("\n".join(sorted(keys)).encode()).hexdigest()


def keep_until_finished(out: Path, run_id: str) -> None:
    """Copy the output (and a Parquet sweep's journal) as they are now, noted as run
    ``run_id``'s."""
    import shutil

    for f in dict.fromkeys((out, journal(out))):
        # (run_sweep refuses to start where such a copy exists already)
        if f.is_file():
            shutil.copy2(f, replaced_copy(f))
    write_atomic(replaced_owner(out), run_id + "\n")


def is_owner(out: Path, run_id: str) -> bool:
    """Whether ``out``'s ``.replaced`` copies were kept by run ``run_id``."""
    owner = replaced_owner(out)
    try:
        return owner.is_file() and owner.read_text().strip() == run_id
    except (OSError, UnicodeDecodeError):
        return False


def release_kept(out: Path, run_id: str) -> None:
    """Remove the copies :func:`keep_until_finished` kept for run ``run_id`` (this run, or
    this run before it was interrupted), now that it has finished; a ``.replaced`` file that
    another run kept, or that is the user's own, stays."""
    owner = replaced_owner(out)
    if not is_owner(out, run_id):
        return
    for f in dict.fromkeys((out, journal(out))):
        replaced_copy(f).unlink(missing_ok=True)
    owner.unlink(missing_ok=True)


__all__ = [
    "TEXT_COLUMNS",
    "Rows",
    "append",
    "check_output",
    "columns",
    "complete_points",
    "finish",
    "is_owner",
    "journal",
    "keep_until_finished",
    "read_all",
    "read_rows",
    "release_kept",
    "replaced_copy",
    "replaced_owner",
    "run_id",
    "sound",
    "text",
    "unmatched",
]
