"""`clustersim compare`: two or more simulated scenarios side by side, with a verdict per metric
(which is better, by how much, and why: the part of the step that differs most)."""

from __future__ import annotations

import math
from typing import Any

from rich.console import Console
from rich.table import Table

from .compare_why import same_model, why
from .interruptions import UNMODELLED_FAILURES as UNMODELLED
from .report.text import duration, safe, usd

# (key, label, better: "low" or "high", format: a format string or a function)
METRICS: list[tuple[str, str, str, Any]] = [
    ("step_time_s", "step time (s)", "low", "{:.3f}"),
    ("tokens_per_s", "throughput (tokens/s)", "high", "{:,.0f}"),
    ("tokens_per_s_per_gpu", "tokens/s per GPU", "high", "{:,.0f}"),
    ("mfu", "MFU", "high", "{:.1%}"),
    ("memory_gb_per_gpu", "memory per GPU (GB)", "low", "{:.1f}"),
    ("usd_per_million_tokens", "$ per million tokens", "low", usd),
    ("goodput", "wall time making progress", "high", "{:.1%}"),
    ("time_to_train_days", "time to train", "low", duration),
    ("usd_total", "$ for the token budget", "low", usd),
    ("usd_commitment", "$ committed up front", "low", usd),
]


def _show(fmt: Any, x: float) -> str:
    return str(fmt(x)) if callable(fmt) else str(fmt.format(x))


def _values(d: dict[str, Any]) -> dict[str, float | None]:
    c = d.get("cost") or {}
    return {
        "step_time_s": d["step_time_s"],
        "tokens_per_s": d["tokens_per_s"],
        "tokens_per_s_per_gpu": d["tokens_per_s"] / d["gpus"],
        "mfu": d["mfu"],
        "memory_gb_per_gpu": d["memory_gb_per_gpu"],
        "usd_per_million_tokens": c.get("usd_per_million_tokens"),
        "goodput": d.get("goodput"),
        "time_to_train_days": d.get("time_to_train_days"),
        "usd_total": c.get("usd_total"),
        # a purchase or a reserved term; a priced on-demand or spot run commits nothing (a
        # reserved rate without its term commits an amount not known: none)
        "usd_commitment": (
            c.get("usd_commitment")
            if not c or c.get("usd_commitment") is not None or c.get("model") == "cloud:reserved"
            else 0.0
        ),
    }


# Figures of the whole run: they scale with the run's token budget.
WHOLE_RUN = ("time_to_train_days", "usd_total")
# Figures that depend on what a token costs to compute (the model) or on how many tokens a step
# takes: across other models, or (the step) other tokens per step, a lower one is not a better
# plan. MFU and memory per GPU still compare; so do tokens/s and $ per token within a model.
PER_MODEL = (
    "step_time_s",
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "usd_per_million_tokens",
    "time_to_train_days",
    "usd_total",
)


def _no_verdict(results: list[dict[str, Any]]) -> dict[str, str]:
    """The metrics that get no verdict because the scenarios are not like for like, each
    with its reason."""
    out: dict[str, str] = {}
    if not same_model(results):
        for key in PER_MODEL:
            out[key] = (
                "the scenarios train different models (MFU, memory, goodput and the money "
                "committed compare across them)"
            )
    gaps = {
        tuple(n for n in r.get("notes") or [] if n.startswith("GPU profile ") and UNMODELLED in n)
        for r in results
    }
    if len(gaps) > 1:
        out["goodput"] = (
            "their GPU profiles do not all give failure rates (see the notes), so their "
            "interruptions are not modelled alike"
        )
    tokens = {r.get("tokens_per_step") for r in results}
    if len(tokens) > 1 and None not in tokens:
        out.setdefault(
            "step_time_s",
            "the scenarios take different tokens per step; tokens/s and $ per million "
            "tokens compare them",
        )
    return out


def _cluster(r: dict[str, Any]) -> str:
    """``256×h100-sxm-80gb``: the GPUs a scenario runs on (results of older versions name no
    GPU type)."""
    return f"{r['gpus']:,}×{r.get('gpu') or 'GPUs'}"


def _layout(r: dict[str, Any]) -> str:
    lay = r.get("layout") or {}
    text = " ".join(f"{k.upper()}{lay[k]}" for k in ("tp", "pp", "dp") if k in lay)
    return text + (f" CP{lay['cp']}" if lay.get("cp", 1) > 1 else "")


def _unlike(results: list[dict[str, Any]], names: list[str], clusters: list[str]) -> list[str]:
    """What makes the scenarios not like for like: another model, other tokens per step, or
    another cluster (``clusters``: each one's :func:`_cluster`)."""
    notes = []
    one_model = same_model(results)
    if len(set(clusters)) > 1:
        notes.append(
            f"the scenarios run on different clusters ({', '.join(clusters)}): step time and "
            "its parts are each cluster's own; "
            + (
                "tokens/s per GPU and MFU compare the GPUs, $ per million tokens the clusters"
                if one_model
                else "MFU compares the GPUs"
            )
        )
    if not one_model:
        shown = ", ".join(
            f"{n} {float(r.get('params') or 0) / 1e9:.3g} B"
            for n, r in zip(names, results, strict=True)
        )
        notes.append(
            f"the scenarios train different models ({shown} parameters): step time, "
            "throughput and cost per token are not like for like (MFU is)"
        )
    tokens = {r.get("tokens_per_step") for r in results}
    if len(tokens) > 1 and None not in tokens and one_model:
        notes.append(
            "the scenarios take different tokens per step (global batch × sequence): compare "
            "tokens/s and $ per million tokens rather than step time"
        )
    return notes


RESERVED_LABELS = ("metric", "best")  # the CSV's own columns


def _unique(names: list[str]) -> list[str]:
    """Scenario names as column labels, each distinct and none a column of the table's own: a
    name given twice, or named like one of those columns, gets its position (#2, #3...), and
    more positions where that label is taken too."""
    out: list[str] = []
    for i, n in enumerate(names):
        label = n
        if names.count(n) > 1 or n in RESERVED_LABELS:
            label = f"{n} #{i + 1}"
        while label in out or label in names[:i] + names[i + 1 :] or label in RESERVED_LABELS:
            label += f" #{i + 1}"
        out.append(label)
    return out


def compare_results(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per metric: every scenario's value, the best one, and a one-line verdict. A scenario
    whose plan does not fit in GPU memory cannot run as simulated, so it is never named best
    (its figures are shown, and listed under ``not_fitting``)."""
    names = _unique([r["scenario"] for r in results])
    vals = [_values(r) for r in results]
    fits = [bool(r.get("fits", True)) for r in results]
    not_fitting = [n for n, f in zip(names, fits, strict=True) if not f]
    clusters = [_cluster(r) for r in results]
    notes = _unlike(results, names, clusters)
    budgets = {r.get("run_tokens") for r in results if r.get("run_tokens") is not None}
    unlike = _no_verdict(results)
    rows = []
    for key, label, better, fmt in METRICS:
        column = [v[key] for v in vals]
        present = [(i, x) for i, x in enumerate(column) if x is not None]
        fitting = [(i, x) for i, x in present if fits[i]]
        # memory is compared among the plans that fit where two do (a plan that does not fit
        # is never named best), else across all, so that it still says which needs least
        if key != "memory_gb_per_gpu" or len(fitting) >= 2:
            present = fitting
        reason = unlike.get(key)
        if reason is None and key in WHOLE_RUN and len(budgets) > 1:
            reason = (
                "the scenarios train on different token budgets (run.tokens); $ per million "
                "tokens and tokens/s compare them"
            )
        if reason is not None and len(present) >= 2:
            rows.append(
                {
                    "metric": key,
                    "label": label,
                    "values": column,
                    "formatted": [None if x is None else _show(fmt, x) for x in column],
                    "best": None,
                    "verdict": f"{label}: no verdict, {reason}",
                }
            )
            continue
        if len(present) < 2:
            given = [i for i, x in enumerate(column) if x is not None]
            if key != "memory_gb_per_gpu" and given:
                lacking = "a price" if key.startswith("usd") else "this figure"
                if present and sum(fits) > 1:
                    # others fit but give no figure (an unpriced scenario): nothing to rank
                    verdict = (
                        f"{label}: no verdict, only {names[present[0][0]]} gives it of those "
                        f"that fit (the others have no {lacking.removeprefix('a ')})"
                    )
                    best = None
                elif present:
                    verdict = (
                        f"{label}: {names[present[0][0]]} is the only one that fits in GPU memory"
                    )
                    best = names[present[0][0]]
                elif len(given) >= 2:
                    verdict = f"{label}: no verdict, none of the scenarios fits in GPU memory"
                    best = None
                else:
                    verdict = f"{label}: no verdict, only {names[given[0]]} has {lacking}"
                    best = None
                rows.append(
                    {
                        "metric": key,
                        "label": label,
                        "values": column,
                        "formatted": [None if x is None else _show(fmt, x) for x in column],
                        "best": best,
                        "verdict": verdict,
                    }
                )
            continue
        pick = min if better == "low" else max
        bi, bx = pick(present, key=lambda p: p[1])
        wi, wx = (max if better == "low" else min)(present, key=lambda p: p[1])
        ratio = (wx / bx) if better == "low" and bx else (bx / wx if wx else float("inf"))
        tie = bi == wi or abs(ratio - 1) < 1e-9
        # others level with the best: no single best
        level = [i for i, x in present if abs(x - bx) <= 1e-9 * max(abs(bx), 1e-30)]
        if tie:
            verdict = f"{label}: the same for all" + (" that fit" if not_fitting else "")
        elif len(level) > 1:
            verdict = (
                f"{label}: {' and '.join(names[i] for i in level)} tie for best at "
                f"{_show(fmt, bx)}, against {_show(fmt, wx)} for {names[wi]}"
            )
        elif not fits[bi]:
            # (memory, compared across all where fewer than two fit)
            verdict = (
                f"{label}: {names[bi]} needs least, {_show(fmt, bx)}, but does not fit in GPU "
                "memory"
            )
        else:
            word = "lower" if better == "low" else "higher"
            # (against a best of zero no ratio says anything)
            by = f"{ratio:.2f}× {word}; " if math.isfinite(ratio) and bx else ""
            verdict = (
                f"{label}: {names[bi]} is best, {_show(fmt, bx)} against {_show(fmt, wx)} "
                f"for {names[wi]} ({by}{word} is better)"
            )
            if key != "memory_gb_per_gpu":
                verdict += f"; why: {why(results[bi], results[wi], key)}"
        rows.append(
            {
                "metric": key,
                "label": label,
                "values": column,
                "formatted": [None if x is None else _show(fmt, x) for x in column],
                "best": None if len(level) > 1 or not fits[bi] else names[bi],
                "verdict": verdict,
            }
        )
    return {
        "scenarios": names,
        "clusters": clusters,
        "layouts": [_layout(r) for r in results],
        "fits": fits,
        "not_fitting": not_fitting,
        "notes": notes,
        "metrics": rows,
    }


def compare_csv_rows(rep: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    """The comparison as CSV: one row per metric, a column per scenario, the best one."""
    keys = ["metric", *rep["scenarios"], "best"]
    rows = [
        {"metric": key, **dict(zip(rep["scenarios"], rep[key + "s"], strict=True))}
        for key in ("cluster", "layout")
    ]
    rows.append({"metric": "fits", **dict(zip(rep["scenarios"], rep["fits"], strict=True))})
    for m in rep["metrics"]:
        rows.append(
            {
                "metric": m["metric"],
                **dict(zip(rep["scenarios"], m["values"], strict=True)),
                "best": m["best"] or "",
            }
        )
    return keys, rows


def print_compare(rep: dict[str, Any], console: Console) -> None:
    t = Table(title="compare")
    t.add_column("metric", style="cyan")
    for n in rep["scenarios"]:
        t.add_column(safe(n), justify="right")
    t.add_row("cluster", *(safe(c) for c in rep["clusters"]))
    t.add_row("layout", *(safe(c) for c in rep["layouts"]), end_section=True)
    for m in rep["metrics"]:
        cells = []
        for n, f in zip(rep["scenarios"], m["formatted"], strict=True):
            text = safe(f if f is not None else "-")
            cells.append(f"[bold green]{text}[/bold green]" if n == m["best"] else text)
        t.add_row(safe(m["label"]), *cells)
    t.add_row("fits in GPU memory", *("yes" if f else "[red]no[/red]" for f in rep["fits"]))
    console.print(t)
    for note in rep.get("notes", []):
        console.print("• note: " + safe(note), highlight=False)
    for n in rep["not_fitting"]:
        console.print(
            f"• {safe(n)} does not fit in GPU memory: it cannot run as simulated, so it is "
            "named best for nothing (clustersim check says what to change)",
            highlight=False,
        )
    for m in rep["metrics"]:
        console.print("• " + safe(m["verdict"]), highlight=False)


__all__ = ["compare_csv_rows", "compare_results", "print_compare"]
