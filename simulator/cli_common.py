"""Shared pieces of the command-line interface: the typer apps, the two consoles (results on
stdout, messages on stderr), output formats and the Ctrl-C note."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import Any

import typer
from rich.console import Console

from .report.files import finite

app = typer.Typer(
    name="clustersim",
    help="Capacity planner for multi-GPU training clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
profiles_app = typer.Typer(help="The hardware catalogue.", no_args_is_help=True)
app.add_typer(profiles_app, name="profiles")


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """`clustersim ... | head`: the reader has what it wanted. Stop writing and exit 0, as
        the JSON and CSV outputs do (rich's default exits 1)."""
        import os

        self.quiet = True
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(0)


def _tolerant(stream: Any) -> None:
    """A stream whose encoding cannot write the tables' characters (×, •, box lines: LC_ALL=C,
    PYTHONIOENCODING=ascii) writes a replacement for each instead of failing mid-table."""
    enc = getattr(stream, "encoding", None) or "ascii"
    try:
        "×•━→é".encode(enc)
    except (UnicodeEncodeError, LookupError):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="replace")


_tolerant(sys.stdout)
_tolerant(sys.stderr)
# (emoji off: a name such as ':smile:' is printed as written)
out = _Console(soft_wrap=False, emoji=False)
err = _Console(stderr=True, soft_wrap=True, emoji=False)


class Fmt(StrEnum):
    table = "table"
    json = "json"
    csv = "csv"


def _json(obj: Any) -> None:
    sys.stdout.write(json.dumps(finite(obj), indent=2, default=str, allow_nan=False) + "\n")


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            flat.update(_flatten(v, key + "."))
        elif isinstance(v, list):
            continue
        else:
            flat[key] = v
    return flat


# simulate's CSV row: the nested groups some runs lack (no pricing, no scaling reference) or
# fill differently (cloud or ownership cost) are written as these columns every time, empty
# where a run has no figure, so that rows of different runs concatenate.
SCALING_REFERENCE_COLUMNS = (
    "nodes",
    "gpus",
    "dp",
    "global_batch",
    "step_time_s",
    "tokens_per_s_per_gpu",
)
COST_COLUMNS = (
    "model",
    "steps",
    "usd_per_hour",
    "usd_per_gpu_hour",
    "usd_per_step",
    "usd_idle",
    "usd_idle_per_step",
    "usd_per_million_tokens",
    "usd_total",
    "usd_commitment",
    "goodput",
    "time_to_train_days",
)
COST_BREAKDOWN_COLUMNS = ("gpu_rental", "capex", "energy", "opex")


def simulate_csv_row(d: dict[str, Any]) -> dict[str, Any]:
    """One CSV row of a simulate result with the same columns for every run (the per-stage
    breakdown, one group per pipeline stage, is in the JSON only)."""
    skip = ("per_class", "scaling_reference", "cost")
    flat = _flatten({k: v for k, v in d.items() if k not in skip})
    ref = d.get("scaling_reference") or {}
    cost = d.get("cost") or {}
    breakdown = cost.get("breakdown") or {}
    flat.update({f"scaling_reference.{k}": ref.get(k) for k in SCALING_REFERENCE_COLUMNS})
    flat.update({f"cost.{k}": cost.get(k) for k in COST_COLUMNS})
    flat.update({f"cost.breakdown.{k}": breakdown.get(k) for k in COST_BREAKDOWN_COLUMNS})
    return flat


def _csv(flat: dict[str, Any]) -> None:
    _csv_rows(list(flat), [flat])


def _csv_rows(keys: list[str], rows: list[dict[str, Any]]) -> None:
    """CSV on stdout, always UTF-8: data, unlike the tables, is never written with a
    replacement for a character the terminal's encoding lacks (a name 'café×8' stays whole)."""
    import csv
    import io

    text = io.StringIO()
    w = csv.writer(text)
    w.writerow(keys)
    for r in rows:
        # booleans as JSON writes them (Python's True/False is no CSV convention)
        w.writerow(
            [str(v).lower() if isinstance(v, bool) else v for v in (r.get(k, "") for k in keys)]
        )
    data = text.getvalue()
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None or (getattr(sys.stdout, "encoding", "") or "").lower().replace("-", "") in (
        "utf8",
    ):
        sys.stdout.write(data)
        return
    sys.stdout.flush()
    buffer.write(data.encode("utf-8"))
    buffer.flush()


# What an interrupted command leaves behind, said in one line on Ctrl-C; commands that write as
# they go replace it.
_kept = ["nothing was written (every output file is written whole or not at all)"]


def os_error_text(exc: OSError) -> tuple[str, str]:
    """What an error of the file system a check did not foresee says, and what to do: the file
    (a long path shortened), and a hint for the kind of error."""
    import errno
    import os

    name = str(exc.filename) if exc.filename else ""
    if len(name) > 160:
        name = f"{name[:100]}…{name[-40:]} ({len(name)} characters)"
    what = exc.strerror or str(exc)
    try:
        os.getcwd()
    except OSError:
        return (
            f"{what}: the current folder no longer exists",
            "change to an existing folder and run the command again",
        )
    hints = {
        errno.ENOENT: "check that the paths given exist",
        errno.EACCES: f"check the permissions of {name or 'the paths given'}",
        errno.EPERM: f"check the permissions of {name or 'the paths given'}",
        errno.ENAMETOOLONG: "give a shorter path",
        errno.ENOSPC: "free space where the output goes (a file, or where the output is "
        "redirected)",
        errno.EISDIR: "give a file, not a folder",
    }
    hint = hints.get(
        exc.errno or 0,
        "check the paths given: that each exists and can be read, "
        "and that the outputs' folders can be written",
    )
    if not name and exc.errno == errno.ENOSPC:
        what += " (writing the output)"
    return (what + (f" ({name})" if name else ""), hint)
