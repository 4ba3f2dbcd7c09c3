"""Answers from sweep rows: the Pareto front of time against cost, and the best row under
constraints (deadline, budget, GPU count, rent or own)."""

from __future__ import annotations

from typing import Any, Literal

Rows = list[dict[str, Any]]
Objective = Literal["time", "cost", "usd-per-token"]


def time_of(r: dict[str, Any]) -> float | None:
    """Days to train when the scenario has a token budget, else wall seconds per million
    tokens (per token, so that points with other batch sizes or sequence lengths compare;
    with the time lost to interruptions, as the days have it)."""
    v = r.get("time_to_train_days")
    if v not in (None, ""):
        return float(v)
    tps = _num(r.get("tokens_per_s"))
    good = _num(r.get("goodput")) or 1.0
    return 1e6 / (tps * good) if tps else None


def cost_of(r: dict[str, Any]) -> float | None:
    """$ for the whole run when there is a token budget, else $ per million tokens."""
    v = r.get("usd_total")
    return float(v) if v not in (None, "") else _num(r.get("usd_per_million_tokens"))


def _num(v: Any) -> float | None:
    return None if v in (None, "") else float(v)


def ok_rows(rows: Rows) -> Rows:
    return [r for r in rows if r.get("status") == "ok"]


def pareto(rows: Rows) -> Rows:
    """The rows no other row beats on both time and cost (ties kept once), fastest first."""
    pts = [r for r in ok_rows(rows) if time_of(r) is not None and cost_of(r) is not None]
    pts.sort(key=lambda r: (time_of(r), cost_of(r)))
    front: Rows = []
    best_cost = float("inf")
    for r in pts:
        c = cost_of(r)
        assert c is not None
        if c < best_cost:
            front.append(r)
            best_cost = c
    return front


def best(
    rows: Rows,
    objective: Objective,
    deadline_days: float | None = None,
    budget_usd: float | None = None,
    max_gpus: int | None = None,
    ownership: Literal["rent", "own"] | None = None,
) -> tuple[dict[str, Any] | None, dict[str, int]]:
    """The best row meeting every constraint, and how many rows each constraint removed."""
    removed = {"deadline": 0, "budget": 0, "max_gpus": 0, "ownership": 0}
    keep = []
    for r in ok_rows(rows):
        days, usd = r.get("time_to_train_days"), r.get("usd_total")
        if deadline_days is not None and (days in (None, "") or float(days) > deadline_days):
            removed["deadline"] += 1
            continue
        if budget_usd is not None and (usd in (None, "") or float(usd) > budget_usd):
            removed["budget"] += 1
            continue
        if max_gpus is not None and int(r["gpus"]) > max_gpus:
            removed["max_gpus"] += 1
            continue
        tier = r.get("tier") or ""
        # Unpriced rows are neither owned nor rented.
        if ownership is not None and (not tier or (tier == "ownership") != (ownership == "own")):
            removed["ownership"] += 1
            continue
        keep.append(r)
    key = {
        "time": lambda r: (time_of(r), cost_of(r) or 0.0),
        "cost": lambda r: (cost_of(r) is None, cost_of(r) or 0.0, time_of(r)),
        "usd-per-token": lambda r: (
            r.get("usd_per_million_tokens") in (None, ""),
            float(r.get("usd_per_million_tokens") or 0.0),
            time_of(r),
        ),
    }[objective]
    return (min(keep, key=key) if keep else None), removed


__all__ = ["best", "cost_of", "ok_rows", "pareto", "time_of"]
