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
# The steady spread of one device's repeated timings and between same-model devices: the
# catalogue's GPUs take 0.02 (SC22's 8% mean variation across production GPUs as ~4 sigma).
# An interquartile spread several times that is not the device: something else ran beside
# the probe, and as speed_cv it would book a fifth of every step to stragglers.
BUSY_CV = 0.15


def contention_warning(sidecar: dict[str, Any]) -> str | None:
    """Why a calibration looks measured on a busy machine, or with timings that spread far
    more than a device's own variation does (None if neither): the first when its processes
    ran far slower together than alone, the second when only the spread is wide (a clock
    that changed state mid-probe, or a neighbour's load)."""
    cf = sidecar.get("compute_fit") or {}
    together = float(cf.get("in_step_factor") or 0.0)
    alone = float(cf.get("in_step_factor_alone") or 0.0)
    cv = (sidecar.get("speed_variation") or {}).get("cv")
    slow = together > 0 and alone > 0 and together / alone > BUSY_RATIO
    wide = cv is not None and cv > BUSY_CV
    if not (slow or wide):
        return None
    fix = (
        f"; as the profile's speed_cv that spread (a device's own is about {0.02:.0%}) books "
        "stragglers into every simulated step: re-probe, or simulate with run.stragglers: off"
        if wide
        else ""
    )
    if not slow:
        return (
            f"the probe's repeated timings varied by {cv:.0%}, far more than a device's steady "
            f"variation: something else ran beside it, or its clocks changed state{fix}"
        )
    spread = f", and its repeated timings varied by {cv:.0%}" if cv is not None else ""
    return (
        f"the probe looks measured on a busy machine (its processes ran "
        f"{together / alone:.2f}x slower together than alone{spread}): the profiles describe "
        f"that load, not the machine; re-run the probe while nothing else runs{fix}"
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
    for path in getattr(cal, "removed", []):
        out.print(f"removed {safe(str(path))} (the earlier calibration's; this probe has none)")
    if hint:
        out.print(safe(hint))


__all__ = ["contention_warning", "print_calibration"]
