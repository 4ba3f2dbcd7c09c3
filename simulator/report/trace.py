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


def write_trace(path: str | Path, events: list[dict[str, Any]], meta: dict[str, Any]) -> Path:
    return write_json(path, chrome_trace(events, meta))
