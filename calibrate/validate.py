"""Live run vs prediction: re-runs the probe's training job at several world sizes on this
machine and simulates the same job with the calibrated profiles.

Each layout runs ``nodes × nproc`` local processes (``nodes`` > 1: groups of processes that
rendezvous over 127.0.0.1 and act as separate nodes) with the same threads per process as the
probe used, so one process is the same "device" the profile describes. Layouts that would put
more threads on the machine than it has cores are skipped (they would measure oversubscription,
not the cluster).
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from simulator.errors import UserError

from .fit import unit_seconds
from .launch import ProbeFailed, launch
from .scenario import cpu_comm_overlaps, job_scenario


def load_sidecar(profile: str) -> tuple[dict[str, Any], Path]:
    from simulator.catalog import _load, load_catalog

    _load.cache_clear()
    cat = load_catalog()
    if profile not in cat.profiles or getattr(cat.profiles[profile], "kind", "") != "gpu":
        cat.get(profile, "gpu")  # raises the usual 'unknown profile' error
    path = cat.files[profile].parent / f"{profile}.calibration.json"
    try:
        side = json.loads(path.read_text())
    except (OSError, ValueError):
        raise UserError(
            f"profile '{profile}' has no calibration record",
            file=str(path),
            hint="validate needs a profile written by `clustersim calibrate`",
        ) from None
    if not side.get("train"):
        raise UserError(
            f"calibration record of '{profile}' has no training job",
            file=str(path),
            hint="re-run the probe with its train phase, then calibrate",
        )
    return side, path


def loopback_network(profile: str) -> dict[str, Any]:
    """A network profile for 'nodes' that are process groups on this one host: the same loopback
    transport as the calibrated fabric, so its figures are the fabric's."""
    from simulator.catalog import load_catalog
    from simulator.config.hardware import FabricProfile

    fab = load_catalog().get(f"{profile}-fabric", "fabric")
    assert isinstance(fab, FabricProfile)
    src = (
        f"no inter-node probe data: the 'nodes' are process groups on one host, so this is "
        f"the intra-host fit of {profile}-fabric"
    )
    return {
        "name": f"{profile}-loopback-network",
        "kind": "network",
        "display_name": "loopback (derived from the fabric fit)",
        "technology": "ethernet_tcp",
        "port_gbps": {"value": fab.bandwidth_gbps.value * 8, "source": src + " (×8 bits)"},
        "latency_us": {"value": fab.latency_us.value, "source": src},
        "achievable_fraction": {"value": 1.0, "source": src},
        "tail_latency": {
            "sigma": {
                "value": 0.05,
                "source": "assumed (not used by the deterministic step simulation)",
            }
        },
    }


def predict(
    profile: str,
    model_cfg: dict[str, Any],
    nproc: int,
    nodes: int,
    overlap: bool = True,
    stragglers: bool = False,
    in_step_factor: tuple[float, str] | None = None,
) -> tuple[float, str]:
    """Predicted step time (and a note) of the probe job at ``nodes × nproc`` on the calibrated
    profiles; ``in_step_factor`` (value, source) replaces the profile's own."""
    from simulator.catalog import load_catalog
    from simulator.config.loading import resolve_dict
    from simulator.config.yamlio import load_text
    from simulator.simulate import simulate

    net: Any = None
    note = ""
    if nodes > 1:
        if f"{profile}-network" in load_catalog().profiles:
            net = f"{profile}-network"
        else:
            net = loopback_network(profile)
            note = "network: loopback, derived from the fabric fit"
    sc = job_scenario(profile, model_cfg, nproc, nodes, net, overlap=overlap, stragglers=stragglers)
    if in_step_factor is not None:
        gpu = load_text(load_catalog().files[profile].read_text())
        gpu["efficiency"]["in_step_factor"] = {
            "value": in_step_factor[0],
            "source": in_step_factor[1],
        }
        sc["cluster"]["gpu"] = gpu
    rs = resolve_dict(sc)
    return simulate(rs, scaling=False).metrics.step_time_s, note


def host_occupancy_factor(side: dict[str, Any], busy: int) -> tuple[float, str, str] | None:
    """(in-step factor, its source, a note) for a layout that keeps ``busy`` processes on this
    host when the probe kept more: the profile's factor was measured with every one of the
    probe's processes computing; with fewer, the host's caches and memory bus are less shared.
    Linear between the probe's step run by one process alone and by all at once."""
    cf = side.get("compute_fit") or {}
    full, alone = cf.get("in_step_factor"), cf.get("in_step_factor_alone")
    procs = int(side.get("procs_per_node") or 1) if side.get("hosts") == 1 else 0
    if not full or not alone or procs <= 1 or busy >= procs:
        return None
    f = alone + (full - alone) * (busy - 1) / (procs - 1)
    what = (
        f"{busy} of the probe's {procs} processes on this host: between the probe's step "
        f"without communication run by one process alone ({alone:.3f}) and by all at once "
        f"({full:.3f})"
    )
    return f, what, f"host {busy}/{procs} busy: in-step factor {f:.2f} (all busy: {full:.2f})"


def run_live(
    model_cfg: dict[str, Any],
    nproc: int,
    nodes: int,
    threads: int,
    steps: int,
    timeout: float,
    workdir: Path,
) -> dict[str, Any]:
    out = workdir / f"train-{nodes}x{nproc}.json"
    args = [
        "--phases",
        "train",
        "--threads",
        str(threads),
        "--train-steps",
        str(steps),
        "--layers",
        str(model_cfg["layers"]),
        "--hidden",
        str(model_cfg["hidden"]),
        "--batch",
        str(model_cfg["batch"]),
        "--seq",
        str(model_cfg["seq"]),
    ]
    try:
        launch(out, nproc, nodes, args, timeout=timeout)
    except ProbeFailed as exc:
        raise UserError(
            f"live run at {nodes}×{nproc} processes failed: {exc}",
            hint="see the message; re-run with a larger --timeout if it hung",
        ) from None
    return json.loads(out.read_text())["train"]


def speed_check(procs: int, threads: int, timeout: float, workdir: Path) -> float:
    """Seconds per unit of the probe's speed-variation work, measured now the way the probe
    measured it (same processes at once, same threads)."""
    out = workdir / "speed.json"
    try:
        launch(out, procs, 1, ["--phases", "speed", "--threads", str(threads)], timeout=timeout)
    except ProbeFailed as exc:
        raise UserError(
            f"speed check failed: {exc}", hint="re-run with a larger --timeout if it hung"
        ) from None
    sv = json.loads(out.read_text())["speed_variation"]
    return unit_seconds(sv["block_times_s"], int(sv["reps"]))


def validate(
    profile: str,
    nprocs: list[int],
    nodes_list: list[int],
    steps: int = 8,
    timeout: float = 120.0,
    log: Any = None,
    repeats: int = 3,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Live runs vs predictions. Each layout runs ``repeats`` times, the layouts interleaved
    (1×1, 1×2, 2×1, then 1×2, 2×1, 1×1, …: rotated each repeat), so a machine whose speed
    drifts over minutes (a shared VM) is measured evenly across layouts; the measured step time
    is the median over every timed step of every repeat, and the spread of the per-run medians
    is reported beside it.

    Drift: before each repeat the probe's reference work (its speed-variation blocks) runs again
    as the probe ran it, and how much slower or faster it is now than during the probe is
    reported: a diagnostic for a machine whose speed changes (re-probe if it is large). The
    prediction always uses the profile as calibrated."""
    side, path = load_sidecar(profile)
    tr = side["train"]
    model_cfg = {k: tr["model"][k] for k in ("layers", "hidden", "heads", "vocab", "seq", "batch")}
    threads = int(side.get("threads_per_process") or 1)
    cores = os.cpu_count() or 1
    if any(n < 1 for n in nprocs + nodes_list):
        raise UserError("process and node counts must be at least 1", path="--nproc/--nodes")
    if repeats < 1 or steps < 1:
        raise UserError("--repeats and --steps must be at least 1", path="--repeats/--steps")
    rows: list[dict[str, Any]] = []
    todo: list[dict[str, Any]] = []
    for nodes in sorted(set(nodes_list)):
        for nproc in sorted(set(nprocs)):
            world = nodes * nproc
            row: dict[str, Any] = {
                "nodes": nodes,
                "nproc_per_node": nproc,
                "world_size": world,
                "threads_per_process": threads,
            }
            rows.append(row)
            if world * threads > cores:
                row["skipped"] = (
                    f"{world} processes × {threads} thread(s) > {cores} "
                    "cores (would measure oversubscription)"
                )
            else:
                todo.append(row)
    runs: dict[int, list[dict[str, Any]]] = {id(r): [] for r in todo}
    speed = side.get("speed_variation") or {}
    ref_unit = speed.get("unit_s")
    checks: list[float] = []
    order: list[str] = []
    checking = bool(ref_unit and todo and int(speed.get("procs") or 1) * threads <= cores)
    total = repeats * (len(todo) + int(checking))
    units = 0
    with tempfile.TemporaryDirectory(prefix="clustersim-validate-") as tmp:
        for rep in range(repeats):
            if checking:
                if progress:
                    progress(units, total)
                units += 1
                if log:
                    log(f"speed check {rep + 1}/{repeats} (the probe's reference work)…")
                checks.append(
                    speed_check(int(speed.get("procs") or 1), threads, timeout, Path(tmp))
                )
            # Rotated each repeat, so that no layout always runs right after the same other one
            # (on a shared VM, a run's speed depends on what ran just before it).
            k = rep % len(todo) if todo else 0
            for row in todo[k:] + todo[:k]:
                nodes, nproc = row["nodes"], row["nproc_per_node"]
                order.append(f"{nodes}x{nproc}")
                if log:
                    log(f"live run {rep + 1}/{repeats}: {nodes} node(s) × {nproc} process(es)…")
                if progress:
                    progress(units, total)
                units += 1
                runs[id(row)].append(
                    run_live(model_cfg, nproc, nodes, threads, steps, timeout, Path(tmp))
                )
    for row in todo:
        nodes, nproc, world = row["nodes"], row["nproc_per_node"], row["world_size"]
        # Every process of a layout runs on this host.
        overlap = cpu_comm_overlaps(str(side.get("device_type")), world, threads, cores)
        # the profile has a speed_cv exactly when its calibration measured speed variation
        factor = host_occupancy_factor(side, world)
        pred, note = predict(
            profile, model_cfg, nproc, nodes, overlap, bool(speed), factor[:2] if factor else None
        )
        if factor:
            note = "; ".join(filter(None, [note, factor[2]]))
        if not overlap:
            note = "; ".join(filter(None, [note, "no comm/compute overlap: every core computes"]))
        lives = runs[id(row)]
        all_steps = [t for live in lives for t in live["step_times_s"]]
        meas = statistics.median(all_steps)
        run_medians = [live["step_time_median_s"] for live in lives]
        row.update(
            {
                "measured_s": meas,
                "predicted_s": pred,
                "error_pct": 100.0 * (pred - meas) / meas,
                "run_medians_s": run_medians,
                "run_spread_pct": 100.0 * (max(run_medians) - min(run_medians)) / meas,
                "measured_steps_s": all_steps,
            }
        )
        if note:
            row["note"] = note
    drift = statistics.median(checks) / ref_unit - 1.0 if checks and ref_unit else None
    done = [r for r in rows if "measured_s" in r]
    if done:
        ref = min(done, key=lambda r: r["world_size"])
        for r in done:
            # weak scaling (fixed batch per process): per-process throughput vs the smallest run
            r["measured_scaling"] = ref["measured_s"] / r["measured_s"]
            r["predicted_scaling"] = ref["predicted_s"] / r["predicted_s"]
    return {
        "profile": profile,
        "calibration": str(path),
        "model": model_cfg,
        "threads_per_process": threads,
        "cores": cores,
        "steps": steps,
        "repeats": repeats,
        "run_order": order,
        "drift_pct": None if drift is None else 100.0 * drift,
        "drift_checks_unit_s": checks,
        "drift_reference_unit_s": ref_unit,
        "drift_work": speed.get("work"),
        "scaling": "weak (batch per process fixed); reference: the smallest run",
        "rows": rows,
        "max_abs_error_pct": max((abs(r["error_pct"]) for r in done), default=None),
    }
