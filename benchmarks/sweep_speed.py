"""Sweep speed: valid layouts simulated per minute (a script that prints figures, not a test).

Sweeps Llama-3 8B over 1-64 nodes of 8 H100 with every TP, PP, micro-batch, ZeRO stage and
recomputation choice ('auto', keep all), on the default local process pool, and prints how many
plans were enumerated, how many were valid and simulated, the wall time and the layouts per
minute. Goal (issue 14): at least 3,000 valid layouts per minute on this 2-core machine.

Usage::

    python benchmarks/sweep_speed.py [--workers N] [--executor local|serial|ray]
    python benchmarks/sweep_speed.py --base llama3-70b-64xh100 --all-auto --nodes 4 \
        --keep fastest --executor serial     # one point of 70B, every plan (about 20 s)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulator.sweep.run import run_sweep  # noqa: E402
from simulator.sweep.spec import load_spec, points  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--executor", default="local")
    ap.add_argument("--nodes", default="1,2,4,8,16,32,64")
    ap.add_argument(
        "--keep",
        choices=("all", "fastest", "cheapest"),
        default="all",
        help="'fastest' or 'cheapest' simulates only the plans whose floor can still win "
        "(sweep.bounds): prints how many valid plans were decided per minute",
    )
    ap.add_argument(
        "--base", default="net-ib-ndr-256xh100", help="bundled scenario the sweep varies"
    )
    ap.add_argument("--all-auto", action="store_true", help="parallelism: auto (CP, schedule too)")
    args = ap.parse_args()
    spec = {
        "name": "sweep-speed",
        "base": str(ROOT / "scenarios" / f"{args.base}.yaml"),
        "axes": [{"cluster.nodes": [int(n) for n in args.nodes.split(",")]}],
        "parallelism": {
            "tp": "auto",
            "pp": "auto",
            "micro_batch": "auto",
            "sharding": "auto",
            "recompute": "auto",
        },
        "keep": args.keep,
    }
    if args.all_auto:
        spec["parallelism"] = "auto"
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "spec.yaml"
        p.write_text(yaml.safe_dump(spec))
        s, base, _ = load_spec(p)
        pts = points(s)
        t0 = time.perf_counter()
        rows = run_sweep(s, base, pts, Path(tmp) / "out.csv", args.executor, args.workers)
        wall = time.perf_counter() - t0
    firsts = {r["point"]: r for r in rows}
    if args.keep != "all":
        valid = sum(int(r.get("plans_valid") or 0) for r in firsts.values())
        sims = sum(int(r.get("plans_simulated") or 0) for r in firsts.values())
        print(f"machine: {os.cpu_count()} cores; executor {args.executor}; keep {args.keep}")
        print(f"points (clusters): {len(pts)}; valid plans: {valid}; simulated: {sims}")
        print(f"wall time: {wall:.1f} s; valid plans decided per minute: {60 * valid / wall:,.0f}")
        return 0
    ok = [r for r in rows if r.get("status") == "ok"]
    enumerated = sum(
        int(r.get("plans_valid") or 0)
        + int(r.get("plans_dropped_memory") or 0)
        + int(r.get("plans_dropped_invalid") or 0)
        for r in firsts.values()
    )
    mem = sum(int(r.get("plans_dropped_memory") or 0) for r in firsts.values())
    print(f"machine: {os.cpu_count()} cores; executor {args.executor}")
    print(f"points (clusters): {len(pts)}; plans enumerated: {enumerated}")
    print(f"valid layouts simulated: {len(ok)}; dropped: {mem} do not fit in memory, ", end="")
    print(f"{enumerated - len(ok) - mem} invalid (degrees that do not divide)")
    print(f"wall time: {wall:.1f} s; valid layouts per minute: {60 * len(ok) / wall:,.0f}")
    print(f"plans examined per minute (valid or dropped): {60 * enumerated / wall:,.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
