"""Accuracy scoreboard: predictions against published runs.

Every scenario under ``scenarios/validation/<set>/`` carries a ``reference`` (what its source
states). This script simulates each one and prints predicted versus published per row, the
step's breakdown, and the mean and maximum absolute error per set. ``nccl-tests`` scenarios
compare the collective model's bus bandwidth with a published curve, size by size (from 1 MiB,
and below 1 MiB separately). Where a reference also gives the run's peak memory per GPU
(``reference.memory``), the model's peak stage is compared with it in a section of its own.

    python benchmarks/accuracy.py                 # every set
    python benchmarks/accuracy.py --sets sc21-1f1b,korthikanti-table5 --json out.json
    python benchmarks/accuracy.py --set run.stragglers=expected   # a what-if on every set
"""

from __future__ import annotations

import argparse
import csv
import json
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))  # its sibling accuracy_layers, as a module too

from accuracy_layers import layer_rows, table4_rows, v100_layer_rows  # noqa: E402

from simulator.config.loading import load_scenario  # noqa: E402
from simulator.config.reference import MemoryFigure  # noqa: E402
from simulator.errors import UserError  # noqa: E402
from simulator.network.collectives import GroupShape, bus_factor, choose  # noqa: E402
from simulator.network.topology import Topology  # noqa: E402
from simulator.simulate import simulate  # noqa: E402

VALIDATION = ROOT / "scenarios" / "validation"
SETS = (
    "sc21-1f1b",
    "sc21-interleaved",
    "sc21-script",
    "korthikanti-table5",
    "korthikanti-table4",
    "llmfoundry-h100-80gb",
    "llmfoundry-a100-80gb",
    "llmfoundry-a100-40gb",
    "llmfoundry-h100-80gb-fp8",
    "nemo-h100-fp8",
    "nemo-b200-fp8",
    "nemo-gb200-fp8",
    "nccl-tests",
    "nccl-tests-pcie",
    "h100-eager-layers",
    "megascale-megatron",
    "bloom-176b",
    "torchtitan-a100",
    "llama3-405b",
    "nemotron-4",
    "mtnlg-530b",
    "ibm-fsdp-2024",
    "torchtitan-h100",
    "megatron-readme",
    "llama1-65b",
    "sc21-table2",
    "torchtitan-h200",
    "mi300x-fsdp",
    "dgxc-h100",
    "megatron-2019",
    "nccl-tests-heldout",
    "mlperf-gpt3-h100",
    "mlperf-llama31-405b",
    "v100-eager-layers",
    "heldout-2023",
    "heldout-2024",
    "ultrascale-nanotron-1node",
    "ultrascale-nanotron-tp",
    "ultrascale-nanotron-2node",
)


def predict_row(path: Path, overrides: list[str] | None = None) -> dict[str, Any]:
    rs = load_scenario(path, overrides)
    ref = rs.reference
    assert ref is not None and ref.value is not None, path
    res = simulate(rs, scaling=False)
    m = res.metrics
    pred = {
        "step_time_s": m.step_time_s,
        "hardware_tflops_per_gpu": m.hardware_tflops_per_gpu,
        "model_tflops_per_gpu": m.model_tflops_per_gpu,
        "tokens_per_s_per_gpu": m.tokens_per_s / m.gpus,
        "mfu": m.mfu,
    }[ref.metric]
    step = m.step_time_s
    shares = {k: v / step for k, v in m.breakdown_s.items() if v > 0.005 * step}
    return {
        "row": rs.name,
        "metric": ref.metric,
        "published": ref.value,
        "predicted": pred,
        "error": pred / ref.value - 1.0,
        "breakdown": shares,
        "outlier": ref.contradicted_by or "",
        # every published run ran, so each must fit; the peak stage's need against capacity
        "memory_gb": m.memory_gb_per_gpu,
        "capacity_gb": rs.gpu.capacity_gb,
        # where the source reports the run's peak memory per GPU: the model's peak against it
        **({"memory": memory_row(m.memory_gb_per_gpu, ref.memory)} if ref.memory else {}),
    }


def memory_row(predicted_gb: float, fig: MemoryFigure) -> dict[str, Any]:
    """The model's peak memory per GPU (the peak stage's, framework reserve included) against
    a published peak (:class:`simulator.config.reference.MemoryFigure`), both in GB."""
    return {
        "published_gb": fig.gb,
        "predicted_gb": predicted_gb,
        "error": predicted_gb / fig.gb - 1.0,
        "measures": fig.measures,
    }


def nccl_rows(path: Path, overrides: list[str] | None = None) -> list[dict[str, Any]]:
    rs = load_scenario(path, overrides)
    ref = rs.reference
    assert ref is not None and ref.curve is not None, path
    topo = Topology(rs)
    shape = GroupShape(rs.gpus, rs.nodes)
    out = []
    for rec in csv.DictReader((path.parent / ref.curve).open()):
        size = float(rec["message_bytes"])
        if size < 2**16:
            continue
        algo, _, t = choose(
            ref.collective,
            shape,
            size,
            topo.fabric_tier(),
            topo.network_tier(0, "dp") if rs.nodes > 1 else None,
            (ref.nccl_algo,) if ref.nccl_algo else None,
        )
        bus = size / t * bus_factor(ref.collective, rs.gpus) / 1e9
        pub = float(rec["busbw_gbps"])
        out.append(
            {
                "row": f"{rs.name} {size / 2**20:g} MiB",
                "metric": "busbw_gbps",
                "published": pub,
                "predicted": bus,
                "error": bus / pub - 1.0,
                "breakdown": {"algorithm": algo},
                "large": size >= 2**20,
                # the source's own in-place run contradicts this point (SOURCES.md)
                "outlier": rec.get("outlier") or "",
            }
        )
    return out


def summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    errs = [abs(r["error"]) for r in rows]
    return {
        "rows": len(rows),
        "mean_abs": statistics.fmean(errs) if errs else 0.0,
        "max_abs": max(errs) if errs else 0.0,
        "mean_signed": statistics.fmean(r["error"] for r in rows) if rows else 0.0,
        "no_fit": sum(1 for r in rows if _over(r)),
    }


def _over(row: dict[str, Any]) -> bool:
    """A published run the memory model says does not fit on its GPU."""
    return "memory_gb" in row and row["memory_gb"] > row["capacity_gb"]


def run(sets: list[str], overrides: list[str] | None = None) -> dict[str, Any]:
    """Every row of ``sets``; ``overrides`` (``PATH=VALUE``, as ``clustersim --set``) apply to
    every scenario file, so a what-if (``run.stragglers=expected``) is scored on every set.
    The eager-layer rows are built from the device run's shapes and take none."""
    report: dict[str, Any] = {}
    for name in sets:
        t0 = time.perf_counter()
        rows: list[dict[str, Any]] = []
        if name == "h100-eager-layers":
            rows = layer_rows()
        elif name == "korthikanti-table4":
            rows = table4_rows(overrides)
        elif name == "v100-eager-layers":
            rows = v100_layer_rows()
        for path in sorted((VALIDATION / name).glob("*.yaml")):
            if name.startswith("nccl-tests"):
                rows += nccl_rows(path, overrides)
            else:
                rows.append(predict_row(path, overrides))
        if name.startswith("nccl-tests"):
            kept = [r for r in rows if not r["outlier"]]
            report[name] = {
                "rows": rows,
                "summary": summary([r for r in kept if r["large"]]),
                "summary_small": summary([r for r in kept if not r["large"]]),
            }
        else:
            kept = [r for r in rows if not r.get("outlier")]
            report[name] = {"rows": rows, "summary": summary(kept)}
            mem = [r["memory"] for r in rows if "memory" in r]
            if mem:
                report[name]["summary_memory"] = summary(mem)
        report[name]["seconds"] = time.perf_counter() - t0
    return report


def _fmt_breakdown(b: dict[str, Any]) -> str:
    if "algorithm" in b:
        return str(b["algorithm"])
    if "fwd_err" in b:
        return f"forward {b['fwd_err']:+.1%} backward {b['bwd_err']:+.1%}"
    top = sorted(b.items(), key=lambda kv: -kv[1])[:4]
    return " ".join(f"{k} {v:.0%}" for k, v in top)


def main(argv: list[str] | None = None) -> int:
    if hasattr(signal, "SIGPIPE"):  # `accuracy.py | head` ends quietly
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sets", default=",".join(SETS))
    p.add_argument("--json", default=None, help="write the full report here")
    p.add_argument("--worst", type=int, default=3, help="rows to print per set (worst first)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override applied to every scenario (as clustersim --set); repeatable",
    )
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    chosen = [s for s in args.sets.split(",") if s]
    unknown = [s for s in chosen if s not in SETS]
    if unknown or not chosen:
        what = f"unknown set {unknown[0]!r}" if unknown else "no set named"
        print(f"error: --sets: {what}; sets: {', '.join(SETS)}", file=sys.stderr)
        return 2
    try:
        report = run(chosen, args.overrides)
    except UserError as exc:  # a --set that does not apply: one message, as the CLI gives it
        print(f"error: {exc.render()}", file=sys.stderr)
        return 2
    print(
        f"{'set':24} {'rows':>5} {'mean |err|':>11} {'max |err|':>10} {'mean err':>9} "
        f"{'no fit':>7} {'s':>6}"
    )
    for name, rep in report.items():
        s = rep["summary"]
        print(
            f"{name:24} {s['rows']:5d} {s['mean_abs']:11.1%} {s['max_abs']:10.1%} "
            f"{s['mean_signed']:+9.1%} {s['no_fit']:7d} {rep['seconds']:6.1f}"
        )
        if "summary_small" in rep and rep["summary_small"]["rows"]:
            s = rep["summary_small"]
            print(
                f"{'  (below 1 MiB)':24} {s['rows']:5d} {s['mean_abs']:11.1%} "
                f"{s['max_abs']:10.1%} {s['mean_signed']:+9.1%}"
            )
    print()
    for name, rep in report.items():
        kept = [r for r in rep["rows"] if not r.get("outlier")]
        worst = sorted(kept, key=lambda r: -abs(r["error"]))[: args.worst]
        for r in worst:
            print(
                f"{name:22} {r['row'][:44]:44} pub {r['published']:9.4g} pred "
                f"{r['predicted']:9.4g} {r['error']:+7.1%}  {_fmt_breakdown(r['breakdown'])}"
            )
    odd = [(n, r) for n, rep in report.items() for r in rep["rows"] if r.get("outlier")]
    if odd:
        print("\npublished points their source contradicts (left out of the summaries):")
        for name, r in odd:
            print(
                f"{name:22} {r['row'][:44]:44} pub {r['published']:9.4g} pred "
                f"{r['predicted']:9.4g} {r['error']:+7.1%}  {r['outlier']}"
            )
    over = [(n, r) for n, rep in report.items() for r in rep["rows"] if _over(r)]
    if over:
        print("\npublished runs the memory model says do not fit (each ran):")
        for name, r in over:
            print(
                f"{name:22} {r['row'][:44]:44} needs {r['memory_gb']:6.1f} GB of "
                f"{r['capacity_gb']:6.1f} GB"
            )
    mem_sets = {n: rep for n, rep in report.items() if "summary_memory" in rep}
    if mem_sets:
        print("\npeak memory per GPU against the peaks sources report (GB, model: peak stage):")
        for name, rep in mem_sets.items():
            s = rep["summary_memory"]
            print(
                f"{name:24} {s['rows']:5d} {s['mean_abs']:11.1%} {s['max_abs']:10.1%} "
                f"{s['mean_signed']:+9.1%}"
            )
        for name, rep in mem_sets.items():
            for r in rep["rows"]:
                if "memory" in r:
                    mr = r["memory"]
                    print(
                        f"{name:22} {r['row'][:44]:44} pub {mr['published_gb']:6.1f} pred "
                        f"{mr['predicted_gb']:6.1f} {mr['error']:+7.1%}  peak {mr['measures']}"
                    )
    print(f"\ntotal {time.perf_counter() - t0:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
