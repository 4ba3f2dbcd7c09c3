"""A sweep's rows as its command prints them: one line of cells per layout."""

from __future__ import annotations

from typing import Any

from .text import safe


def _schedule(r: dict[str, Any]) -> str:
    """The pipeline schedule where there is a pipeline: '' for 1F1B, else its name."""
    if int(r.get("pp") or 1) == 1 or r.get("schedule") in (None, "", "1f1b"):
        return ""
    if r.get("schedule") == "interleaved":
        return f" (interleaved ×{r.get('virtual_stages')})"
    return f" ({r.get('schedule')})"


def degrees(r: dict[str, Any], schedule: bool = False) -> str:
    """The plan's parallel degrees, whose product is its GPU count: 'TP4 CP2 PP4 DP1' (CP
    where there is context parallelism), with the pipeline schedule after PP if asked."""
    cp = int(r.get("cp") or 1)
    sched = _schedule(r) if schedule else ""
    return f"TP{r['tp']}" + (f" CP{cp}" if cp > 1 else "") + f" PP{r['pp']}{sched} DP{r['dp']}"


def _days(d: float) -> str:
    if d >= 10:
        return f"{d:,.1f}"
    return f"{d:.3g}" if d >= 0.001 else "<0.001"


def sweep_cells(r: dict[str, Any], labelled: bool = False) -> list[str]:
    days, usd, per_m, committed = (
        r.get("time_to_train_days"),
        r.get("usd_total"),
        r.get("usd_per_million_tokens"),
        r.get("usd_commitment"),
    )
    return [
        str(r["point"]),
        safe(
            f"{r['gpus']}×{r['gpu']} {degrees(r, schedule=True)} "
            f"mb{r['micro_batch']} {r['sharding']} {r['recompute']}"
        ),
        safe(r.get("tier") or "-"),
        # (three significant figures below ten days: a 31-minute run is 0.0215, not 0.0)
        "-" if days in (None, "") else _days(float(days)),
        "-" if usd in (None, "") else f"{float(usd):,.0f}",
        "-" if per_m in (None, "") else f"{float(per_m):.3f}",
        f"{100 * float(r['mfu']):.1f}%",
        ("" if committed in (None, "") else f"committed ${float(committed):,.0f}")
        if labelled
        else ("-" if committed in (None, "") else f"{float(committed):,.0f}"),
    ]


__all__ = ["degrees", "sweep_cells"]
