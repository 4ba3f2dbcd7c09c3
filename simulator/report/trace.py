"""Chrome trace (Perfetto) output of a simulated step.

One process per rank class (symmetric mode) or per node (full mode), one thread per stream:
compute, tp, cp, dp, pp-fwd, pp-bwd, io. ``ph: "M"`` events name them; ``ph: "X"`` events on one
thread nest. Open the file at ui.perfetto.dev or chrome://tracing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .files import write_json


def chrome_trace(events: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": meta}


# How every trace this tool writes begins (write_json's compact separators).
TRACE_HEAD = b'{"traceEvents":'


def check_trace_target(path: str | Path) -> None:
    """Refuse an existing, non-empty ``--trace`` file that is not a trace this tool wrote: a
    trace replaces the file whole, and a scenario, a sweep spec or any other file of the user's
    must not be lost to a mistyped option."""
    p = Path(path)
    if not p.is_file() or p.stat().st_size == 0:
        return
    try:
        with open(p, "rb") as fh:
            head = fh.read(len(TRACE_HEAD))
    except OSError:
        head = b""
    if head != TRACE_HEAD:
        from ..errors import UserError

        raise UserError(
            f"'{path}' exists and is not a trace clustersim wrote; the trace would replace it",
            path="--trace",
            hint="give the trace its own file (e.g. --trace step.trace.json), or move that "
            "file away",
        )


def write_trace(path: str | Path, events: list[dict[str, Any]], meta: dict[str, Any]) -> Path:
    return write_json(path, chrome_trace(events, meta))
