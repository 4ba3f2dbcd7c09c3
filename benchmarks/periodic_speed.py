"""Symmetric-mode speed with steady-state extrapolation, against the event-by-event engine
(a script that prints figures, not a test).

For each case: CPU seconds of the event-by-event simulation (``run_engine``) and of the fast
one (``run_periodic``, what ``simulate`` uses), measured in the same run (best of ``-n``), the
speed-up, the path taken (``walk``: the max-plus walk of the whole step; ``extr``: event-engine
samples extrapolated; ``full``: every micro-batch event by event), and the largest difference
in step time or any idle category (as a share of the step). Then the cost of a default
``simulate`` (with its scaling reference) relative to the scenario alone, and the CPU time of a
cold ``clustersim simulate`` process.

Usage::

    python benchmarks/periodic_speed.py            # all cases, best of 3
    python benchmarks/periodic_speed.py -n 1
"""

from __future__ import annotations

import argparse
import glob
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from simulator.config.loading import load_scenario, resolve_dict  # noqa: E402
from simulator.config.scenario import ResolvedScenario  # noqa: E402
from simulator.engine.direct import run_direct  # noqa: E402
from simulator.engine.periodic import run_periodic  # noqa: E402
from simulator.engine.sim import run_engine  # noqa: E402
from simulator.metrics import compute_metrics  # noqa: E402
from simulator.simulate import simulate  # noqa: E402

LLAMA70B_TP4_PP8 = {
    "name": "llama3-70b-64xh100-tp4-pp8-512mb",
    "cluster": {
        "gpu": "h100-sxm-80gb",
        "gpus_per_node": 8,
        "nodes": 8,
        "fabric": "nvlink4-nvswitch",
        "network": {"profile": "ib-ndr-400", "nics_per_node": 8},
    },
    "model": "llama3-70b",
    "training": {"seq_len": 8192, "global_batch": 1024, "micro_batch": 1},
    "parallelism": {
        "tp": 4,
        "pp": 8,
        "sequence_parallel": True,
        "sharding": {"kind": "zero", "stage": 1},
        "recompute": "selective",
    },
}


def best(fn, n: int) -> tuple[float, object]:
    out, t = None, float("inf")
    for _ in range(n):
        t0 = time.process_time()
        out = fn()
        t = min(t, time.process_time() - t0)
    return t, out


def case(name: str, rs: ResolvedScenario, n: int) -> None:
    t_exact, exact = best(lambda: run_engine(rs), n)
    t_fast, fast = best(lambda: run_periodic(rs), n)
    me, mf = compute_metrics(rs, exact), compute_metrics(rs, fast)  # type: ignore[arg-type]
    err = (
        max(
            [abs(mf.step_time_s - me.step_time_s)]
            + [abs(mf.breakdown_s[k] - v) for k, v in me.breakdown_s.items()]
        )
        / me.step_time_s
    )
    if run_direct(rs) is not None:
        how = "walk"  # the max-plus walk gave the whole step
    elif fast.events < exact.events:  # type: ignore[attr-defined]
        how = "extr"  # event-engine samples, extrapolated
    else:
        how = "full"
    print(
        f"{name[:44]:44s} {rs.micro_batches:5d} {rs.pp:3d} {t_exact:9.3f} {t_fast:9.3f} "
        f"{t_exact / max(t_fast, 1e-9):8.1f}x {how:>5s} {err:9.1e}"
    )


def cold_cli() -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, "-m", "simulator.cli", "simulate", "scenarios/llama3-8b-8xh100.yaml"]
        + ["--format", "json"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=3, help="repeats (best of)")
    args = ap.parse_args()
    print(
        f"{'case':44s} {'m':>5s} {'pp':>3s} {'exact s':>9s} {'fast s':>9s} {'speed-up':>9s}"
        f" {'path':>5s} {'max err':>9s}"
    )
    case(LLAMA70B_TP4_PP8["name"], resolve_dict(LLAMA70B_TP4_PP8), args.n)
    files = sorted(glob.glob(os.path.join(ROOT, "scenarios", "*.yaml")))
    files += sorted(glob.glob(os.path.join(ROOT, "scenarios/validation/sc21-*/*1008*.yaml")))
    for f in files:
        case(os.path.basename(f)[:-5], load_scenario(f), args.n)
    rs = load_scenario(os.path.join(ROOT, "scenarios", "llama3-70b-64xh100.yaml"))
    t_alone, _ = best(lambda: simulate(rs, scaling=False), args.n)
    t_default, _ = best(lambda: simulate(rs), args.n)
    print(
        f"\ndefault simulate (with its scaling reference) / scenario alone, llama3-70b-64xh100: "
        f"{t_default:.3f} s / {t_alone:.3f} s = {t_default / t_alone:.2f}x"
    )
    print(f"cold `clustersim simulate llama3-8b-8xh100 --format json`: {cold_cli():.2f} s CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
