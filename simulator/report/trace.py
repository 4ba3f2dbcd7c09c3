"""Chrome trace (Perfetto) output of a simulated step.

One process per rank class (symmetric mode) or per node (full mode), one thread per stream:
compute, tp, cp, dp, pp-fwd, pp-bwd, io. ``ph: "M"`` events name them; ``ph: "X"`` events on one
thread nest. Open the file at ui.perfetto.dev or chrome://tracing; a name ending in ``.gz`` is
written gzip-compressed, as Perfetto also opens it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .files import refuse_foreign, write_atomic, write_json


def chrome_trace(events: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": meta}


# How every trace this tool writes begins (write_json's compact separators) and what its last
# bytes hold: the step's metadata, which a trace written by another tool does not carry.
TRACE_HEAD = b'{"traceEvents":['
TRACE_TAIL = b'"otherData":{"scenario":'


def check_trace_target(path: str | Path) -> None:
    """Refuse an existing ``--trace`` file that is not a trace this tool wrote (a scenario, a
    sweep spec or any other file of the user's)."""

    def ours(p: Path) -> bool:
        try:
            if _gzipped(p):
                import gzip

                with gzip.open(p, "rb") as fz:
                    if fz.read(len(TRACE_HEAD)) != TRACE_HEAD:
                        return False
                    tail = b""
                    while chunk := fz.read(1 << 20):  # streamed: a big archive stays on disk
                        tail = (tail + chunk)[-4096:]
                return TRACE_TAIL in tail
            with open(p, "rb") as fh:
                if fh.read(len(TRACE_HEAD)) != TRACE_HEAD:
                    return False
                fh.seek(max(0, p.stat().st_size - 4096))
                return TRACE_TAIL in fh.read()
        except (OSError, EOFError):  # (gzip's errors are OSErrors; a cut stream, EOFError)
            return False

    refuse_foreign(
        path,
        ours,
        "--trace",
        "a trace clustersim wrote",
        "trace",
        "give the trace its own file (e.g. --trace step.trace.json), or move that file away",
    )


def _gzipped(path: Path) -> bool:
    return path.suffix.lower() == ".gz"


def write_trace(path: str | Path, events: list[dict[str, Any]], meta: dict[str, Any]) -> Path:
    if _gzipped(Path(path)):
        import gzip
        import json

        text = json.dumps(chrome_trace(events, meta), default=str, separators=(",", ":"))
        return write_atomic(path, gzip.compress((text + "\n").encode(), mtime=0))
    return write_json(path, chrome_trace(events, meta))
