"""How a sweep names a layout: the degrees printed multiply to its GPU count (context
parallelism included), and the plots tell two providers' rows of one tier apart."""

from __future__ import annotations

import re
from typing import Any

from simulator.report.plots import _label
from simulator.report.sweep_cells import sweep_cells

ROW: dict[str, Any] = {
    "point": 0,
    "gpus": 32,
    "gpu": "h100-sxm-80gb",
    "tp": 4,
    "pp": 4,
    "cp": 2,
    "dp": 1,
    "schedule": "interleaved",
    "virtual_stages": 5,
    "micro_batch": 1,
    "sharding": "zero1",
    "recompute": "none",
    "pricing": "azure-nd-h100-v5",
    "tier": "reserved",
    "mfu": 0.5,
}


def _product(label: str) -> int:
    out = 1
    for d in re.findall(r"\b(?:TP|CP|PP|DP)(\d+)", label):
        out *= int(d)
    return out


def test_the_printed_degrees_multiply_to_the_gpu_count() -> None:
    cell = sweep_cells(ROW)[1]
    assert "CP2" in cell and "(interleaved ×5)" in cell
    assert _product(cell) == ROW["gpus"]
    assert _product(_label(ROW)) == ROW["gpus"]
    assert "CP" not in sweep_cells({**ROW, "cp": 1, "dp": 2})[1]


def test_plot_labels_name_the_price_profile() -> None:
    other = {**ROW, "pricing": "gcp-a3-h100"}
    assert _label(ROW) != _label(other) and "gcp-a3-h100 reserved" in _label(other)
