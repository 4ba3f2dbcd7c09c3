"""What `clustersim calibrate` prints: the alpha-beta fits, the compute, attention and drift
figures, the in-sample check and the files written; and the warning a probe measured on a busy
machine earns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from .text import safe

# The probe's processes together against one alone: a host's cores share memory bandwidth
# and caches, so some slowdown is the machine (about 1.06 on this project's 2-core VM), but
# well past that the host was running something else while it measured.
BUSY_RATIO = 1.5


def contention_warning(sidecar: dict[str, Any]) -> str | None:
    """Why a calibration looks measured on a busy machine (None if it does not): its
    processes ran far slower together than alone."""
    cf = sidecar.get("compute_fit") or {}
    together, alone = cf.get("in_step_factor"), cf.get("in_step_factor_alone")
    if not (together and alone and together / alone > BUSY_RATIO):
        return None
    cv = (sidecar.get("speed_variation") or {}).get("cv")
    spread = f", and its repeated timings varied by {cv:.0%}" if cv is not None else ""
    return (
        f"the probe looks measured on a busy machine (its processes ran "
        f"{together / alone:.2f}x slower together than alone{spread}): the profiles describe "
        "that load, not the machine; re-run the probe while nothing else runs"
    )


def print_calibration(
    out: Console,
    cal: Any,
    probe_file: str,
    check: dict[str, Any] | None,
    files: list[Path],
    replaced: bool,
    hint: str | None,
) -> None:
    """The table and lines of a calibration (``cal``: calibrate.fit.Calibration)."""
    t = Table(title=f"alpha-beta fits ({probe_file})")
    for col in ("collective", "group", "n", "α (µs)", "1/β (GB/s)", "R²", "rms rel err", "points"):
        t.add_column(col, justify="right" if col not in ("collective", "group") else "left")
    for f in cal.fits:
        t.add_row(
            f.op,
            f.group,
            str(f.n),
            f"{f.alpha_s * 1e6:.1f}",
            f"{f.bandwidth_gbps:.3g}",
            f"{f.r2:.3f}",
            f"{f.rms_rel_err:.0%}",
            str(f.points),
        )
    out.print(t)
    for f in cal.fits:
        if f.note:
            out.print(safe(f"{f.op} ({f.group}): {f.note}"))
    cf = cal.sidecar["compute_fit"]
    out.print(
        f"compute: peak {cf['peak_tflops'] * 1e3:.1f} GFLOP/s ({cf['dtype']}), "
        f"matmul_max {cf['matmul_max']:.2f}, matmul_half_flops "
        f"{cf['matmul_half_flops']:.3g} (R²={cf['r2']:.2f})"
        + (
            f"; in a training step the operations take {cf['in_step_factor']:.2f}× as long"
            if cf.get("in_step_factor")
            else ""
        )
    )
    if cf.get("note"):
        out.print(safe(f"compute: {cf['note']}"))
    att = cal.sidecar.get("attention_fit")
    if att:
        out.print(
            f"attention: max {att['max']:.2f} of the peak, half at {att['half_seq']:.0f} "
            f"tokens of sequence (R²={att['r2']:.2f}, rms {att['rms_rel_err']:.0%})"
        )
    speed = cal.sidecar.get("speed_variation") or {}
    if speed.get("note"):
        out.print(safe(f"drift reference: {speed['note']}"))
    if check:
        out.print(
            f"in-sample check (the probe's own training step, world size "
            f"{check['world_size']}): measured {check['measured_s'] * 1e3:.0f} ms, "
            f"predicted {check['predicted_s'] * 1e3:.0f} ms ({check['error_pct']:+.1f}%)"
        )
    for path in files:
        out.print(f"{'replaced' if replaced else 'wrote'} {safe(str(path))}")
    if hint:
        out.print(safe(hint))


__all__ = ["contention_warning", "print_calibration"]
