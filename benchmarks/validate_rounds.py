"""Validation loop rounds: probe → calibrate → validate, N times in a row on this machine, and
the per-row raw and drift-corrected errors with a summary (a script that prints figures, not a
test). Issue 15's goal: every out-of-sample row within 10% after drift correction in five
consecutive rounds, and the weak-scaling gap within 5 points.

Usage::

    python benchmarks/validate_rounds.py [--rounds 5] [--nproc 2] [--keep DIR]

Runs in a temporary folder (its calibrated profiles do not touch the repository); ``--keep``
copies each round's probe file and validate report there. One round takes about 2.5 minutes
on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


def run(args: list[str], cwd: Path) -> str:
    exe = shutil.which("clustersim")
    if exe is None:
        sys.exit("the clustersim console script is not on PATH (pip install -e '.[probe]')")
    r = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"clustersim {' '.join(args)} failed:\n{r.stderr}")
    return r.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--keep", default=None, help="folder for each round's probe and report")
    a = ap.parse_args()
    reports: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="clustersim-rounds-") as tmp:
        cwd = Path(tmp)
        for i in range(1, a.rounds + 1):
            probe = cwd / f"probe-{i}.json"
            run(["probe", "--nproc", str(a.nproc), "--out", str(probe)], cwd)
            run(["calibrate", str(probe), "--name", "rounds"], cwd)
            nprocs = ",".join(str(n) for n in range(1, a.nproc + 1))
            out = run(
                ["validate", "--profile", "rounds", "--nproc", nprocs, "--format", "json"], cwd
            )
            rep = json.loads(out)
            reports.append(rep)
            if a.keep:
                keep = Path(a.keep)
                keep.mkdir(parents=True, exist_ok=True)
                shutil.copy(probe, keep / probe.name)
                (keep / f"validate-{i}.json").write_text(out)
            print(f"round {i}")
            for r in rep["rows"]:
                if "measured_s" not in r:
                    continue
                tag = "*" if r["in_sample"] else " "
                print(
                    f"  {r['workload']:<12}{tag} {r['nodes']}x{r['nproc_per_node']}  "
                    f"meas {r['measured_s'] * 1e3:6.1f} ms  raw {r['error_pct']:+6.1f}%  "
                    f"drift {r['drift_pct'] or 0:+6.1f}%  corr {r['corrected_error_pct']:+6.1f}%  "
                    f"scaling {r['measured_scaling']:.2f}/{r['predicted_scaling']:.2f}  "
                    f"{r['verdict']}"
                )
            sys.stdout.flush()
    rows = [r for rep in reports for r in rep["rows"] if "measured_s" in r]
    oos = [r for r in rows if not r["in_sample"]]
    ins = [r for r in rows if r["in_sample"]]
    gaps = [abs(r["scaling_gap_points"]) for r in oos if "scaling_gap_points" in r]
    raw = [abs(r["error_pct"]) for r in oos]
    cor = [abs(r["corrected_error_pct"]) for r in oos]
    print(f"\n{a.rounds} rounds, {len(oos)} out-of-sample rows (* = in-sample, not counted)")
    print(
        f"  mean |error| raw {statistics.mean(raw):.1f}% -> corrected {statistics.mean(cor):.1f}%"
    )
    print(
        f"  within 10%: raw {sum(x <= 10 for x in raw)}, corrected {sum(x <= 10 for x in cor)}; "
        f"pass (within 10% or intervals overlap): {sum(r['verdict'] != 'fail' for r in oos)}"
    )
    ins_err = statistics.mean(abs(r["corrected_error_pct"]) for r in ins)
    print(f"  in-sample mean |corrected error| {ins_err:.1f}%")
    if gaps:
        print(f"  weak-scaling gap: mean {statistics.mean(gaps):.1f}, max {max(gaps):.1f} points")
    print(
        "  goal: every out-of-sample row within 10% corrected: "
        + ("met" if all(x <= 10 for x in cor) else "not met")
        + "; scaling within 5 points: "
        + ("met" if gaps and max(gaps) <= 5 else "not met")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
