"""What `clustersim sweep` prints once its rows are in: the count of points and plans, why
points failed, the Pareto front of time against cost, and the best layout under the given
constraints (or, where none meets them, what the sweep can do without them)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.table import Table

from .cli_common import err, out
from .errors import UserError
from .report.sweep_cells import sweep_cells
from .report.text import safe
from .sweep.answers import best as pick
from .sweep.answers import pareto

Rows = list[dict[str, Any]]


def is_sweep_answer(path: Path) -> bool:
    """Whether ``path`` holds an answer file ``sweep --answer`` wrote (a JSON object naming the
    sweep, its output and its Pareto front), which another run may replace."""
    import json

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and {"sweep", "out", "pareto_front"} <= doc.keys()


def answer(
    rows: Rows,
    n_points: int,
    out_file: str,
    spec_file: str,
    best: str | None,
    deadline_days: float | None,
    budget_usd: float | None,
    max_gpus: int | None,
    own: bool | None,
    base_fault: Callable[[str], tuple[str, str] | None] = lambda reason: None,
) -> tuple[Rows, dict[str, Any] | None, dict[str, int]]:
    """Print the sweep's answers; the Pareto front, the best row (None without --best or
    where no row meets the constraints) and how many rows each constraint removed.
    ``base_fault(reason)``: the base scenario's file and the field a reason every point failed
    for names, where no point sets that field (None otherwise)."""
    removed: dict[str, int] = {}
    ok = [r for r in rows if r.get("status") == "ok"]
    failed: dict[str, int] = {}
    for r in rows:
        if r.get("status") != "ok":
            failed[str(r["status"])] = failed.get(str(r["status"]), 0) + 1
    # Per point, not per row (with --all a point has a row per plan, each with its counts).
    per_point = {r["point"]: int(r.get("plans_dropped_memory") or 0) for r in rows}
    dropped_mem = sum(per_point.values())
    ok_points = len({r["point"] for r in ok})
    out.print(
        f"{n_points} points, {len(rows)} rows written to {safe(out_file)} ({ok_points} points "
        f"with a valid plan); plans dropped as not fitting in memory: {dropped_mem}"
    )
    if n_points and not ok:
        # Nothing to answer with: a typo in an axis, a profile that does not exist, or a model
        # that fits nowhere in the sweep. The rows saying why are in the output file.
        reason, _n = max(failed.items(), key=lambda kv: kv[1])
        # (a price for another GPU is an axis's doing, whatever field it names: hint below)
        one = len(failed) == 1 and "cluster.pricing" not in reason
        fault = base_fault(reason) if one else None
        if fault is not None:
            base_file, field = fault
            raise UserError(
                f"every point of the sweep fails the same way, at a field no axis sets: "
                f"{reason} (the rows in {out_file} say so too)",
                file=base_file,
                path=field,
                hint=f"fix {field} in the base scenario, which every point inherits",
            )
        hint = (
            "check the axes' field paths and profile names (clustersim schema --sweep), "
            "or give the model more GPUs"
        )
        if "cluster.pricing" in reason:
            hint = (
                "an axis that changes the GPU changes its price too: give both in one axis "
                "entry, {cluster.gpu: NAME, cluster.pricing.profile: PRICE} (clustersim "
                "profiles lists them), or drop cluster.pricing from the base"
            )
        raise UserError(
            f"no point of the sweep has a valid plan, {n_points} point(s): {reason} (each "
            f"point's row in {out_file} says why)",
            file=spec_file,
            path="axes",
            hint=hint,
        )
    for reason, n in sorted(failed.items()):
        out.print(f"  {n} point(s): {safe(reason)}")
    from .sweep.answers import point_notes

    for note in point_notes(rows):
        err.print(f"note: {safe(note)}")
    ownership = None if own is None else ("own" if own else "rent")
    front = pareto(rows, ownership)  # type: ignore[arg-type]
    from .sweep.answers import run_basis, time_of

    run = not ok or run_basis(ok)
    if not run:
        out.print(
            "note: the points do not share one token budget (run.tokens), so they are compared "
            "per million tokens: seconds and $ per million tokens, not days and $ for the run"
        )
    t = Table(
        title=("Pareto front: time to train against total cost" if run else "Pareto front: "
               "seconds against $ per million tokens")
        + ("" if own is None else (", owned clusters" if own else ", rented clusters"))
    )  # fmt: skip
    cols = ("point", "layout", "tier") + (("days", "US$") if run else ("s/M tokens",))
    for col in (*cols, "$/M tokens", "MFU"):
        t.add_column(col, justify="right" if col not in ("layout", "tier") else "left")
    for r in front:
        c = sweep_cells(r)[:-1]
        sec = time_of(r, False) or 0.0
        t.add_row(*(c if run else [*c[:3], f"{sec:,.0f}" if sec >= 100 else f"{sec:.3g}", *c[5:]]))
    unpriced = sum(1 for r in ok if r.get("usd_per_million_tokens") in (None, ""))
    if front:
        out.print(t)
        if unpriced:
            out.print(f"note: {unpriced} point(s) without a price are not on the front")
    elif ok and not any(r.get("usd_per_million_tokens") not in (None, "") for r in ok):
        out.print(
            "no Pareto front: no point is priced, and the front weighs time against cost "
            "(give the base scenario a cluster.pricing, or an axis over it)"
        )
    elif ok:
        out.print(
            "no Pareto front: no point with a valid plan is "
            + ("an owned" if own else "a rented")
            + " cluster"
        )
    committed = [r for r in front if r.get("usd_commitment") not in (None, "")]
    if committed:
        out.print(
            "note: US$ charges the run only its own hours of an owned cluster's life or of a "
            "reserved term (as if other work uses the rest: cluster.pricing.utilisation); "
            "committed up front: "
            + ", ".join(f"point {r['point']} ${float(r['usd_commitment']):,.0f}" for r in committed)
        )
    chosen = None
    if best in ("cost", "usd-per-token") and not any(r.get("usd_per_million_tokens") for r in ok):
        raise UserError(
            f"--best {best} needs prices, and no point of the sweep has one",
            file=spec_file,
            path="--best",
            hint="give the base scenario a cluster.pricing (or an axis over it), or use "
            "--best time",
        )
    if budget_usd is not None and not any(r.get("usd_total") not in (None, "") for r in ok):
        raise UserError(
            "--budget-usd compares what the whole run costs, and no point of the sweep has a price",
            file=spec_file,
            path="--budget-usd",
            hint="give the base scenario a cluster.pricing (or an axis over it)",
        )
    if best:
        chosen, removed = pick(rows, best, deadline_days, budget_usd, max_gpus, ownership)  # type: ignore[arg-type]
        if chosen is None:
            why = ", ".join(f"{k}: {v}" for k, v in removed.items() if v)
            out.print(f"[red]no layout meets the constraints[/red] (removed by {why or 'none'})")
            # What the sweep can do, for the constraint that bound.
            for label, objective in (("fastest", "time"), ("cheapest", "cost")):
                near, _ = pick(rows, objective)  # type: ignore[arg-type]
                if near is not None:
                    out.print(
                        f"  {label} without them: "
                        + " | ".join(c for c in sweep_cells(near, True) if c)
                    )
        else:
            out.print(
                "[bold]best[/bold] ("
                + best
                + "): "
                + " | ".join(safe(c) for c in sweep_cells(chosen, True) if c)
            )
            held = chosen.get("usd_commitment")
            if budget_usd is not None and held not in (None, "") and float(held) > budget_usd:
                out.print(
                    f"note: point {chosen['point']} meets --budget-usd with what its run is "
                    f"charged, but commits ${float(held):,.0f} up front (a purchase price or a "
                    "reserved term's whole rent), above the budget; on-demand and spot tiers "
                    "commit nothing"
                )
    return front, chosen, removed
