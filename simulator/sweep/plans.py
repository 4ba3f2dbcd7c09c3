"""Automatic parallelism: every valid plan of the 'auto' fields for one cluster, and the row a
simulated plan gives.

A plan is valid when the scenario resolves (degrees divide the GPUs, heads, layers and batch)
and fits in memory (the memory model `check` prints); the others are dropped and counted by
reason. Each valid plan is simulated in symmetric mode; ``keep`` picks the fastest, the
cheapest, or all of them. To keep the fastest or the cheapest, plans run from the lowest floor
under their step (:mod:`.bounds`) up, and one whose floor already loses to the best found is
not simulated: the same plan is kept, with far fewer simulations (``plans_simulated``).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from ..config.loading import apply_sets, resolve_dict
from ..config.scenario import ResolvedScenario
from ..cost import compute_cost, usd_per_hour_floor
from ..engine.sim import CATEGORIES
from ..errors import UserError
from ..interruptions import run_report
from ..simulate import simulate
from ..workload.memory import memory_report
from .bounds import step_floor
from .spec import Point
from .variants import plan_variants

COLUMNS = [
    "sweep",
    "point",
    "point_key",
    "point_rows",
    "status",
    "gpu",
    "gpus_per_node",
    "nodes",
    "gpus",
    "fabric",
    "network",
    "nics_per_node",
    "software",
    "pricing",
    "tier",
    "tp",
    "pp",
    "dp",
    "cp",
    "sequence_parallel",
    "micro_batch",
    "micro_batches",
    "schedule",
    "virtual_stages",
    "sharding",
    "recompute",
    "memory_gb_per_gpu",
    "step_time_s",
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "mfu",
    "model_tflops_per_gpu",
    "usd_per_gpu_hour",
    "usd_per_million_tokens",
    "goodput",
    "time_to_train_days",
    "usd_total",
    "usd_idle",
    "usd_commitment",
    *[f"idle_{c}_s" if c not in ("compute", "optimizer") else f"{c}_s" for c in CATEGORIES],
    "plans_valid",
    "plans_simulated",
    "plans_dropped_memory",
    "plans_dropped_invalid",
    "notes",
]


_FIELD = re.compile(r"[a-z_][a-z0-9_]*(\.[a-z0-9_]+)*")  # a field path, as UserError's


def _refusals(invalid: Counter[str], total: int) -> str:
    """Why the plans were refused, by the field each reason names (``parallelism.pp: PP=3
    ...``), commonest first, three at most, each with its commonest message: the stage
    counts that do not split the layers give one reason per count, which alone would hide the
    field the user can act on (the batch)."""
    fields: Counter[str] = Counter()
    example: dict[str, tuple[int, str]] = {}
    for why, n in invalid.items():
        head, sep, _ = why.partition(": ")
        field = head if sep and _FIELD.fullmatch(head) else why
        fields[field] += n
        if n > example.get(field, (0, ""))[0]:
            example[field] = (n, why)
    parts = []
    for field, n in fields.most_common(3):
        why = example[field][1]
        parts.append(
            f"{why} ({n} of {total} plans)"
            if why == field or example[field][0] == n
            else f"{field} ({n} of {total} plans; e.g. {why.partition(': ')[2]})"
        )
    shown = sum(n for _, n in fields.most_common(3))
    return "; ".join(parts) + ("; others for other reasons" if shown < total else "")


# Per process: the same cluster and plan under another price needs no new simulation.
_SIMULATED: dict[str, tuple[dict[str, Any], float, float]] = {}


def _simulate_unpriced(rs: ResolvedScenario) -> tuple[dict[str, Any], float, float]:
    """``simulate`` of ``rs`` without its cost, its idle fraction and the share of time its
    GPUs draw computing power (``Metrics.drawing_fraction``) (cached by the resolved
    scenario with its pricing and token budget left out: the rest of ``run``, stragglers for
    one, changes the step; resolved, so that a profile read from another folder or edited
    since is never answered from the cache)."""
    key = rs.model_dump_json(
        exclude={
            "price": True,
            "price_tier": True,
            "price_utilisation": True,
            "raw": True,
            "override_notes": True,
            "run": {"tokens"},
        }
    )
    hit = _SIMULATED.get(key)
    if hit is None:
        res = simulate(rs.model_copy(update={"price": None}), scaling=False)
        met = res.metrics
        hit = _SIMULATED[key] = (res.as_dict(), met.idle_fraction, met.drawing_fraction)
        if len(_SIMULATED) > 4096:
            _SIMULATED.pop(next(iter(_SIMULATED)))
    return hit


def _row_common(sweep: str, point: Point, rs: ResolvedScenario) -> dict[str, Any]:
    lay = rs.layout()
    sh = rs.parallelism.sharding
    price = rs.price
    return {
        "sweep": sweep,
        "point": point.index,
        "point_key": point.key,
        **{f"axis_{k}": v for k, v in point.labels.items()},
        # what the hardware or model as given cannot do (a fabric above the GPU's own
        # NVLink, say), as simulate says it
        "notes": json.dumps(notes) if (notes := rs.model_notes()) else "",
        "gpu": rs.gpu.name,
        "gpus_per_node": rs.gpus_per_node,
        "nodes": rs.nodes,
        "gpus": rs.gpus,
        "fabric": rs.fabric.name,
        "network": rs.network.name if rs.network else "",
        "nics_per_node": rs.nics_per_node,
        "software": rs.software.name,
        "pricing": price.name if price else "",
        "tier": ("ownership" if price.kind == "ownership_price" else rs.price_tier)
        if price
        else "",
        "tp": rs.tp,
        "pp": rs.pp,
        "dp": rs.dp,
        "cp": rs.cp,
        "sequence_parallel": rs.parallelism.sequence_parallel,
        "micro_batch": rs.training.micro_batch,
        "micro_batches": lay["micro_batches"],
        "schedule": lay["schedule"],
        "virtual_stages": rs.parallelism.virtual_stages,
        "sharding": (f"zero{sh.stage}" if sh.kind == "zero" else f"fsdp_{sh.strategy}")
        + (f" (as zero{rs.zero_stage})" if rs.zero_stage != rs.parallelism.zero_stage else ""),
        "recompute": rs.parallelism.recompute,
    }


def _simulated_row(sweep: str, point: Point, rs: ResolvedScenario) -> dict[str, Any]:
    """The row of one simulated plan: its configuration, figures and cost."""
    d, idle, drawing = _simulate_unpriced(rs)
    # Interruptions with this point's price (spot adds preemptions to GPU failures).
    run = run_report(rs, d["step_time_s"])
    cost = compute_cost(rs, d["step_time_s"], min(1.0, max(0.0, idle)), drawing, run=run)
    c = cost.as_dict() if cost else {}
    row = _row_common(sweep, point, rs)
    row.update(
        status="ok",
        memory_gb_per_gpu=d["memory_gb_per_gpu"],
        step_time_s=d["step_time_s"],
        tokens_per_s=d["tokens_per_s"],
        tokens_per_s_per_gpu=d["tokens_per_s"] / rs.gpus,
        mfu=d["mfu"],
        model_tflops_per_gpu=d["model_tflops_per_gpu"],
        usd_per_gpu_hour=c.get("usd_per_gpu_hour"),
        usd_per_million_tokens=c.get("usd_per_million_tokens"),
        goodput=run.goodput,
        time_to_train_days=run.time_to_train_days,
        usd_total=c.get("usd_total"),
        usd_idle=c.get("usd_idle"),
        usd_commitment=c.get("usd_commitment"),
    )
    for cat in CATEGORIES:
        col = f"{cat}_s" if cat in ("compute", "optimizer") else f"idle_{cat}_s"
        row[col] = d["breakdown_s"].get(cat, 0.0)
    return row


def _key_floor(rs: ResolvedScenario, floor: float, keep: str) -> tuple[Any, ...]:
    """No more than the key (``_fastest`` or ``_cheapest``) of a plan whose step is at least
    ``floor`` seconds, field by field: its step over goodput is at least the floor (goodput is
    at most 1), and so is its cost per token at the lowest hourly price its cluster can have
    (an owned one drawing idle power). A plan whose floor key already sorts after the best
    key found cannot win."""
    if keep == "fastest":
        return (floor, floor)
    if rs.price is None:
        return (True, 0.0, floor)
    usd = usd_per_hour_floor(rs) * floor / 3600.0 / rs.training.tokens_per_step * 1e6
    return (False, usd, floor)


def evaluate_point(
    sweep: str, base: dict[str, Any], point: Point, auto: list[str], keep: str
) -> list[dict[str, Any]]:
    """The rows of one point: its kept plan(s), or one row saying why none fits."""
    try:
        data = apply_sets(base, point.sets, None)
    except UserError as err:
        return [_failed(sweep, point, f"invalid: {err.message}", Counter())]
    drops: Counter[str] = Counter()
    rows: list[dict[str, Any]] = []
    invalid: Counter[str] = Counter()
    try:
        variants = plan_variants(data, auto)
    except UserError as err:
        return [_failed(sweep, point, f"invalid: {err.message}", Counter())]
    fitting: list[ResolvedScenario] = []
    for variant in variants:
        try:
            rs = resolve_dict(variant)
        except UserError as err:
            drops["invalid"] += 1
            invalid[f"{err.path}: {err.message}" if err.path else err.message] += 1
            continue
        if not memory_report(rs).fits:  # (not check: its levers are not wanted here)
            drops["memory"] += 1
            continue
        fitting.append(rs)
    plans: list[tuple[float, int, ResolvedScenario]] = [
        (0.0, i, rs) for i, rs in enumerate(fitting)
    ]
    if keep != "all" and len(fitting) > 1:
        # From the lowest floor up, so that the winner comes early and the rest are skipped
        # once their floor exceeds it (sweep.bounds): the answer an exhaustive search gives.
        plans = sorted(
            ((step_floor(rs), i, rs) for i, rs in enumerate(fitting)), key=lambda p: p[0]
        )
    best: tuple[Any, ...] | None = None
    simulated = 0
    order: dict[int, int] = {}  # id of a row: its plan's place in the enumeration
    for floor, index, rs in plans:
        if best is not None and _key_floor(rs, floor, keep) > best:
            continue
        try:
            row = _simulated_row(sweep, point, rs)
        except UserError as err:  # e.g. a price tier the profile does not offer
            return [_failed(sweep, point, f"invalid: {err.message}", drops)]
        simulated += 1
        rows.append(row)
        order[id(row)] = index
        if keep != "all":
            key = (_fastest if keep == "fastest" else _cheapest)(row)
            if best is None or key < best:
                best = key
    if not rows:
        if drops["memory"]:
            reason = f"no plan fits in memory ({drops['memory']} tried)"
        elif not invalid:
            # No plan to try: the point's cluster itself is refused (a count of no GPUs, say).
            try:
                resolve_dict(data)
                reason = "invalid: no parallelism plan for this cluster"
            except UserError as err:
                reason = "invalid: " + (f"{err.path}: {err.message}" if err.path else err.message)
        else:
            # The commonest reasons the plans were refused (with one plan, its reason): three,
            # so that a reason the enumeration adds many plans for (stage counts that do not
            # split the layers) does not hide the one the user can act on (the batch).
            if len(variants) == 1:
                reason = f"invalid: {invalid.most_common(1)[0][0]}"
            else:
                reason = "no valid plan: " + _refusals(invalid, drops["invalid"])
        return [_failed(sweep, point, reason, drops)]
    if keep != "all":
        # Exact ties go to the plan enumerated first, as an exhaustive search's min gives them
        # (a skipped plan never ties: its floor is strictly past the best).
        rank_of = _fastest if keep == "fastest" else _cheapest
        rows = [min(rows, key=lambda r: (rank_of(r), order[id(r)]))]
    valid = len(variants) - drops["memory"] - drops["invalid"]
    for r in rows:
        r.update(
            point_rows=len(rows),
            plans_valid=valid,
            plans_simulated=simulated,
            plans_dropped_memory=drops["memory"],
            plans_dropped_invalid=drops["invalid"],
        )
    return rows


def _useful_step_s(r: dict[str, Any]) -> float:
    """Wall seconds per step that counts: the step over goodput (restarts, lost work and
    checkpoint writes included), as the days to train count it; a plan whose restarts read
    more (ZeRO-1 reads the weights once per replica) can lose to a slower step."""
    return float(r["step_time_s"]) / float(r.get("goodput") or 1.0)


def _fastest(r: dict[str, Any]) -> tuple[float, float]:
    return (_useful_step_s(r), float(r["step_time_s"]))


def _cheapest(r: dict[str, Any]) -> tuple[bool, float, float]:
    usd = r["usd_per_million_tokens"]
    return (usd is None, usd or 0.0, _useful_step_s(r))


def _failed(sweep: str, point: Point, reason: str, drops: Counter[str]) -> dict[str, Any]:
    return {
        "sweep": sweep,
        "point": point.index,
        "point_key": point.key,
        "point_rows": 1,
        "status": reason,
        **{f"axis_{k}": v for k, v in point.labels.items()},
        "plans_valid": 0,
        "plans_simulated": 0,
        "plans_dropped_memory": drops["memory"],
        "plans_dropped_invalid": drops["invalid"],
    }


__all__ = ["COLUMNS", "evaluate_point", "plan_variants"]
