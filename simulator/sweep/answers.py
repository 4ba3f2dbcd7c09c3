"""Answers from sweep rows: the Pareto front of time against cost, and the best row under
constraints (deadline, budget, GPU count, rent or own)."""

from __future__ import annotations

from typing import Any, Literal

Rows = list[dict[str, Any]]
Objective = Literal["time", "cost", "usd-per-token"]


def _budget(r: dict[str, Any]) -> float | None:
    """The token budget a row's days to train stand for (days × tokens/s × goodput)."""
    days, tps = _num(r.get("time_to_train_days")), _num(r.get("tokens_per_s"))
    if days is None or not tps:
        return None
    return days * 86400.0 * tps * (_num(r.get("goodput")) or 1.0)


def point_notes(rows: Rows) -> list[str]:
    """The notes of the points with a valid plan (``notes``: what the hardware or model as
    given cannot do there), once each: as is where every such point has it, else with the
    points that do."""
    ok = ok_rows(rows)
    where: dict[str, list[int]] = {}
    import json

    for r in ok:
        try:
            notes = json.loads(str(r.get("notes") or "[]"))
        except ValueError:  # (a cell edited by hand)
            notes = [str(r.get("notes"))]
        for note in notes if isinstance(notes, list) else [notes]:
            note = str(note)
            points = where.setdefault(note, [])
            if int(r["point"]) not in points:
                points.append(int(r["point"]))
    every = {int(r["point"]) for r in ok}
    return [
        note
        if set(pts) == every
        else f"(point{'s' if len(pts) > 1 else ''} {', '.join(map(str, sorted(pts)))}) {note}"
        for note, pts in where.items()
    ]


def run_basis(rows: Rows) -> bool:
    """Whether the rows compare on whole-run figures (days, $ for the run): only when every
    one has a token budget and it is the same budget; else per million tokens."""
    if not rows or any(_num(r.get("time_to_train_days")) is None for r in rows):
        return False
    budgets = [b for b in (_budget(r) for r in rows) if b is not None]
    return not budgets or max(budgets) <= min(budgets) * (1 + 1e-6)


def time_of(r: dict[str, Any], run: bool = True) -> float | None:
    """Days to train when the rows compare on the whole run (``run``) and the row has them,
    else wall seconds per million tokens (per token, so that points with other batch sizes,
    sequence lengths or token budgets compare; with the time lost to interruptions, as the
    days have it)."""
    v = r.get("time_to_train_days")
    if run and v not in (None, ""):
        return float(v)
    tps = _num(r.get("tokens_per_s"))
    good = _num(r.get("goodput")) or 1.0
    return 1e6 / (tps * good) if tps else None


def cost_of(r: dict[str, Any], run: bool = True) -> float | None:
    """$ for the whole run when the rows compare on it, else $ per million tokens."""
    v = r.get("usd_total")
    if run and v not in (None, ""):
        return float(v)
    return _num(r.get("usd_per_million_tokens"))


def _num(v: Any) -> float | None:
    return None if v in (None, "") else float(v)


def ok_rows(rows: Rows) -> Rows:
    return [r for r in rows if r.get("status") == "ok"]


def owned_or_rented(row: dict[str, Any], ownership: Literal["rent", "own"] | None) -> bool:
    """Whether ``row`` is the kind of cluster asked for (None: any); unpriced rows are
    neither owned nor rented."""
    if ownership is None:
        return True
    tier = row.get("tier") or ""
    return bool(tier) and (tier == "ownership") == (ownership == "own")


def pareto(rows: Rows, ownership: Literal["rent", "own"] | None = None) -> Rows:
    """The rows no other row beats on both time and cost (ties kept once), fastest first;
    only owned or only rented clusters where ``ownership`` says so."""
    ok = [r for r in ok_rows(rows) if owned_or_rented(r, ownership)]
    run = run_basis(ok)
    pts = [r for r in ok if time_of(r, run) is not None and cost_of(r, run) is not None]
    pts.sort(key=lambda r: (time_of(r, run), cost_of(r, run)))
    front: Rows = []
    best_cost = float("inf")
    for r in pts:
        c = cost_of(r, run)
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
        if not owned_or_rented(r, ownership):
            removed["ownership"] += 1
            continue
        keep.append(r)
    run = run_basis(keep)

    def t(r: dict[str, Any]) -> float:
        v = time_of(r, run)
        return float("inf") if v is None else v

    def c(r: dict[str, Any]) -> tuple[bool, float]:
        v = cost_of(r, run)
        return (v is None, 0.0 if v is None else v)  # unpriced: after every priced row

    key = {
        "time": lambda r: (t(r), *c(r)),
        "cost": lambda r: (*c(r), t(r)),
        "usd-per-token": lambda r: (
            r.get("usd_per_million_tokens") in (None, ""),
            float(r.get("usd_per_million_tokens") or 0.0),
            t(r),
        ),
    }[objective]
    return (min(keep, key=key) if keep else None), removed


__all__ = ["best", "cost_of", "ok_rows", "pareto", "run_basis", "time_of"]
