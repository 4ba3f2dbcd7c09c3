"""PNG plots of sweep results (matplotlib, Agg backend, imported only when a plot is asked for):
the scaling curve, cost against time to train with the Pareto front, and the idle breakdown per
layout."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..sweep.answers import cost_of, ok_rows, pareto, run_basis, time_of
from .files import write_atomic
from .sweep_cells import degrees

Rows = list[dict[str, Any]]

IDLE = [
    ("compute_s", "compute"),
    ("optimizer_s", "optimizer"),
    ("idle_host_s", "host (kernel issue)"),
    ("idle_comm_tp_s", "TP comm"),
    ("idle_comm_cp_s", "CP comm"),
    ("idle_comm_dp_s", "DP comm"),
    ("idle_comm_pp_s", "PP comm"),
    ("idle_pp_bubble_s", "pipeline bubble"),
    ("idle_data_stall_s", "data stall"),
    ("idle_imbalance_s", "waiting on other stages or ranks"),
    ("idle_straggler_s", "stragglers"),
    ("idle_overlap_s", "DP comm overlap slowdown"),
    ("idle_offload_s", "activation offload wait"),
]


# Written into each PNG's tEXt chunk, so that a later --plot replaces only plots it made.
SOFTWARE = "clustersim"
FILES = ("scaling", "cost-time", "idle")  # {sweep name}-{file}.png


def plot_paths(folder: Path, name: str) -> list[Path]:
    """The PNG files a sweep named ``name`` writes into ``folder``."""
    return [folder / f"{name}-{f}.png" for f in FILES]


def is_our_plot(path: Path) -> bool:
    """Whether ``path`` is a PNG this tool wrote (its Software text says so)."""
    try:
        with path.open("rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return head.startswith(b"\x89PNG") and b"Software\x00" + SOFTWARE.encode() in head


def _save(fig: Any, path: Path) -> Path:
    """The figure as a PNG, written atomically and marked as this tool's."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, metadata={"Software": SOFTWARE})
    _plt().close(fig)
    write_atomic(path, buf.getvalue())
    return path


def _plt() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise UserError(
            "plots need matplotlib", hint='pip install "clustersim[plot]", or drop --plot'
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _label(r: dict[str, Any]) -> str:
    """A layout as the plots name it: GPUs, degrees, and the price (profile and tier, so that
    two providers' reserved rows are told apart)."""
    price = " ".join(str(x) for x in (r.get("pricing"), r.get("tier")) if x)
    return f"{r['gpus']}×{r['gpu']} {degrees(r)}" + (f" {price}" if price else "")


def _plan(r: dict[str, Any]) -> tuple[Any, ...]:
    """What makes two rows the same plan, beyond their GPU count."""
    keys = ("tp", "pp", "cp", "schedule", "micro_batch", "sharding", "recompute")
    return tuple(str(r.get(k)) for k in keys)


def series_names(ok: Rows) -> list[str]:
    """Each row's curve: its GPU and network, and the value of every axis that varies at one
    GPU count (a bandwidth, a price), so such points are not merged; an axis that only sets
    the size (nodes, GPUs per node) does not split the curves."""
    apart = [
        k
        for k in dict.fromkeys(k for r in ok for k in r if k.startswith("axis_"))
        if any(
            len({str(r.get(k)) for r in ok if int(r["gpus"]) == g}) > 1
            for g in {int(r["gpus"]) for r in ok}
        )
    ]
    return [
        f"{r['gpu']} / {r['network'] or r['fabric']}"
        + "".join(f", {k.removeprefix('axis_').rsplit('.', 1)[-1]}={r.get(k)}" for k in apart)
        for r in ok
    ]


def scaling(rows: Rows, path: Path, title: str) -> Path:
    """Throughput and scaling efficiency against GPU count (log2 axes), with the ideal line;
    one curve per GPU type and network, the fastest row at each GPU count."""
    plt = _plt()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.8))
    by_gpu: dict[str, dict[int, dict[str, Any]]] = {}
    ok = ok_rows(rows)
    for r, series in zip(ok, series_names(ok), strict=True):
        cur = by_gpu.setdefault(series, {}).get(int(r["gpus"]))
        if cur is None or float(r["tokens_per_s"]) > float(cur["tokens_per_s"]):
            by_gpu[series][int(r["gpus"])] = r
    for gpu, pts in sorted(by_gpu.items()):
        n = sorted(pts)
        tput = [float(pts[k]["tokens_per_s"]) for k in n]
        (line,) = ax.plot(n, tput, marker="o", label=gpu)
        ideal = [tput[0] * k / n[0] for k in n]
        ax.plot(n, ideal, linestyle="--", color=line.get_color(), alpha=0.5)
        eff = [100 * (t / k) / (tput[0] / n[0]) for t, k in zip(tput, n, strict=True)]
        ax2.plot(n, eff, marker="o", label=gpu, color=line.get_color())
        # Each point is the fastest plan at its size: where it is another layout than the
        # smallest size's, name it (an efficiency above 100% is the smaller cluster forced
        # into a slower plan, not superlinear scaling).
        first = _plan(pts[n[0]])
        for k, e in zip(n, eff, strict=True):
            if _plan(pts[k]) != first or (k == n[0] and any(x > 100.5 for x in eff)):
                ax2.annotate(
                    degrees(pts[k]).rsplit(" DP", 1)[0],
                    (k, e),
                    textcoords="offset points",
                    xytext=(4, 4),
                    fontsize=7,
                    color=line.get_color(),
                )
    for a in (ax, ax2):
        a.set_xscale("log", base=2)
        a.set_xlabel("GPUs")
        a.grid(True, which="both", alpha=0.3)
    ax.set_yscale("log", base=2)
    ax.set_ylabel("throughput (tokens/s, log scale)")
    ax.set_title("throughput (dashed: ideal linear scaling)")
    ax2.set_ylabel("scaling efficiency (% of the smallest layout, per GPU)")
    ax2.set_title("scaling efficiency (labels: a plan other than the smallest size's)")
    ax2.axhline(100, color="grey", linestyle="--", alpha=0.5)
    ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, path)


def cost_time(rows: Rows, path: Path, title: str, best: dict[str, Any] | None = None) -> Path:
    """Every layout's cost against its time to train, the Pareto front joined, the best
    labelled."""
    plt = _plt()
    # One basis for every point: whole-run figures only where every point has the same budget.
    days = run_basis(ok_rows(rows))
    ok = [r for r in ok_rows(rows) if time_of(r, days) is not None and cost_of(r, days) is not None]
    fig, ax = plt.subplots(figsize=(10.5, 5.5))
    for tier in sorted({str(r.get("tier") or "unpriced") for r in ok}):
        sel = [r for r in ok if str(r.get("tier") or "unpriced") == tier]
        ax.scatter(
            [time_of(r, days) for r in sel], [cost_of(r, days) for r in sel], label=tier, alpha=0.7
        )
    front = pareto(ok)
    if front:
        xs, ys = [time_of(r, days) for r in front], [cost_of(r, days) for r in front]
        ax.plot(xs, ys, color="black", linewidth=1.2)
        ax.scatter(
            xs,
            ys,
            s=140,
            facecolors="none",
            edgecolors="black",
            linewidths=1.5,
            label="Pareto front (no layout is both faster and cheaper)",
        )
    if best is not None:
        ax.annotate(
            "best: " + _label(best),
            (time_of(best, days), cost_of(best, days)),
            xytext=(15, 15),
            textcoords="offset points",
            arrowprops={"arrowstyle": "->"},
        )
    ax.set_xlabel("time to train (days)" if days else "seconds per million tokens")
    ax.set_ylabel("total cost (US$)" if days else "US$ per million tokens")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if ok:
        # Beside the axes: inside, the legend hid a point of the buy-or-rent sweep.
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        ax.text(0.5, 0.5, "no point has a price", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    return _save(fig, path)


def idle_breakdown(rows: Rows, path: Path, title: str, limit: int = 30) -> Path:
    """Where each layout's step goes, stacked, as a share of the step (the ``limit`` fastest)."""
    plt = _plt()
    ok = sorted(ok_rows(rows), key=lambda r: float(r["step_time_s"]))[:limit]
    fig, ax = plt.subplots(figsize=(max(8, 0.45 * len(ok) + 3), 5.5))
    bottom = [0.0] * len(ok)
    for col, name in IDLE:
        share = [100 * float(r.get(col) or 0.0) / float(r["step_time_s"]) for r in ok]
        if not any(share):
            continue
        ax.bar(range(len(ok)), share, bottom=bottom, label=name)
        bottom = [b + s for b, s in zip(bottom, share, strict=True)]
    ax.set_xticks(range(len(ok)), [_label(r) for r in ok], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("share of the step (%)")
    ax.set_ylim(0, 100)
    ax.set_title(title)
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    return _save(fig, path)


__all__ = ["cost_time", "idle_breakdown", "scaling"]
