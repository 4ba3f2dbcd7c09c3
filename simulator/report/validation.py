"""The ``validate`` table: measured against predicted step time per workload and layout, raw
and drift-corrected, with intervals and each row's verdict."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from .text import safe

# A prediction interval wider than this (± % of the prediction) makes "the intervals overlap"
# a pass for any error the bands care about (10%).
WIDE_INTERVAL_PCT = 25.0


def _ms(x: float) -> str:
    return f"{x * 1e3:.1f}"


def print_validation(out: Console, rep: dict[str, Any]) -> None:
    level = f"{rep['interval_level']:.0%}"
    t = Table(
        title=f"validate {safe(rep['profile'])}: measured vs predicted step time "
        f"({rep['threads_per_process']} thread(s) per process)"
    )
    cols = (
        "workload",
        "layout",
        f"meas. ms [{level}]",
        "pred. ms",
        "raw err",
        "drift",
        f"corr. pred. ms [{level}]",
        "corr. err",
        "scal. meas./pred.",
        "verdict",
    )
    for c in cols:
        # A narrow terminal or a pipe (80 columns) wraps cells instead of cutting them to "…".
        t.add_column(
            c, justify="left" if c in ("workload", "verdict") else "right", overflow="fold"
        )
    notes: list[str] = []
    for r in rep["rows"]:
        name = r["workload"] + (" (in-sample)" if r["in_sample"] else "")
        layout = f"{r['nodes']}×{r['nproc_per_node']}"
        if "skipped" in r:
            t.add_row(name, layout, *["-"] * 7, "skipped*")
            notes.append(f"* {layout} skipped: {r['skipped']}")
            continue
        lo, hi = r["measured_interval_s"]
        plo, phi = r["predicted_interval_s"]
        mark = ""
        if r.get("note"):
            mark = " †"
            notes.append(f"† {r['workload']} {layout}: {r['note']}")
        verdict = r["verdict"]
        style = "red" if verdict == "fail" else "green"
        t.add_row(
            safe(name),
            layout,
            f"{_ms(r['measured_s'])} [{_ms(lo)}–{_ms(hi)}]",
            _ms(r["predicted_s"]),
            f"{r['error_pct']:+.1f}%",
            "-" if r["drift_pct"] is None else f"{r['drift_pct']:+.1f}%",
            f"{_ms(r['corrected_predicted_s'])} [{_ms(plo)}–{_ms(phi)}]",
            f"{r['corrected_error_pct']:+.1f}%",
            f"{r['measured_scaling']:.2f}/{r['predicted_scaling']:.2f}",
            f"[{style}]{verdict}[/{style}]{mark}",
        )
    out.print(t)
    for n in notes:
        out.print(safe(n))
    oos = rep["out_of_sample"]
    if oos["rows"]:
        gap = oos["max_scaling_gap_points"]
        out.print(
            f"out-of-sample: {oos['passed']} of {oos['rows']} rows pass; largest corrected "
            f"|error| {oos['max_abs_corrected_error_pct']:.1f}%"
            + (f"; largest scaling gap {gap:.1f} points" if gap is not None else "")
        )
        if rep.get("drift_reference_note"):
            out.print(safe(f"warning: drift reference: {rep['drift_reference_note']}"))
        wide = oos.get("max_interval_half_width_pct")
        if wide is not None and wide > WIDE_INTERVAL_PCT:
            out.print(
                f"warning: prediction intervals reach ±{wide:.0f}%, so a row passes by overlap "
                "whatever its error: the calibration's timings scattered (a busy machine, or "
                "too short a probe); re-probe on a quiet machine with a longer --time-budget "
                "and judge the rows by their errors"
            )
    out.print(
        safe(
            f"measured: median of {rep['repeats']} interleaved run(s) × {rep['steps']} steps, "
            f"{level} bootstrap interval over runs and steps"
            + (
                f" (from {rep['repeats'] * rep['steps']} timings it says little: use "
                "--repeats 3 and --steps 4 or more)"
                if rep["repeats"] * rep["steps"] < 10 or rep["repeats"] < 3
                else ""
            )
            + ". Errors are (predicted - measured) / measured: + means predicted slower. "
            f"Drift: how much slower (+) or "
            "faster (−) the probe's own job runs now than predicted at the smallest layout, "
            "one factor for every other row; for that row (and where that job did not run), "
            f"before each job every process runs the probe's reference work "
            f"({rep['drift_work']}) and the drift is how much slower or faster it runs now "
            "than during the probe. The prediction is rescaled by the drift. "
            f"Prediction interval ({level}) from the calibration's residuals: "
            f"{rep['prediction_errors']}. A row passes within 10% or when the intervals "
            f"overlap. Scaling is {rep['scaling']}."
        )
    )


CSV_KEYS = [
    "workload",
    "in_sample",
    "nodes",
    "nproc_per_node",
    "world_size",
    "measured_s",
    "measured_low_s",
    "measured_high_s",
    "predicted_s",
    "predicted_low_s",
    "predicted_high_s",
    "error_pct",
    "drift_pct",
    "unit_drift_pct",
    "drift_reference",
    "corrected_predicted_s",
    "corrected_error_pct",
    "verdict",
    "measured_scaling",
    "predicted_scaling",
    "note",
    "skipped",
]


def validation_csv_rows(rep: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    """validate's rows as CSV: the intervals as low/high columns, and the row's note."""
    rows = []
    for r in rep["rows"]:
        row = dict(r)
        for name in ("measured", "predicted"):
            lo, hi = r.get(f"{name}_interval_s") or ("", "")
            row[f"{name}_low_s"], row[f"{name}_high_s"] = lo, hi
        rows.append(row)
    return CSV_KEYS, rows
