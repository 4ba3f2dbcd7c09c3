"""Live run vs prediction: runs the probe's training job (in-sample) and workloads calibration
never saw at several world sizes on this machine, and simulates the same jobs with the
calibrated profiles, corrected for the machine's drift since the probe.

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

from .fits import unit_seconds
from .intervals import LEVEL, Z, bootstrap_median, passed, prediction_sd, robust_rel_sd, verdict
from .launch import ProbeFailed, launch
from .prediction import (
    Predicted,
    drift_reference,
    host_occupancy_factor,
    layout_prediction,
    loopback_network,
    predict,
)
from .probe_shape import load_sidecar
from .workloads import KEYS, check_names, select, workloads

__all__ = [
    "drift_reference",
    "host_occupancy_factor",
    "loopback_network",
    "predict",
    "validate",
]


def _launch_jobs(
    jobs: list[dict[str, Any]],
    nproc: int,
    nodes: int,
    threads: int,
    steps: int,
    speed: dict[str, Any],
    timeout: float,
    workdir: Path,
) -> list[dict[str, Any]]:
    """One live run: every job in ``jobs`` on ``nodes × nproc`` processes, each preceded by the
    probe's speed work."""
    spec = workdir / "jobs.json"
    spec.write_text(json.dumps(jobs))
    out = workdir / f"jobs-{nodes}x{nproc}.json"
    args = ["--phases", "jobs", "--jobs", str(spec), "--threads", str(threads)]
    args += ["--train-steps", str(steps), "--speed-blocks", "6"]
    if speed.get("shape") and speed.get("reps"):
        args += ["--speed-shape", ",".join(str(int(x)) for x in speed["shape"])]
        args += ["--speed-reps", str(int(speed["reps"]))]
    try:
        launch(out, nproc, nodes, args, timeout=timeout * max(1, len(jobs)))
    except ProbeFailed as exc:
        raise UserError(
            f"live run at {nodes}×{nproc} processes failed: {exc}",
            hint="see the message; re-run with a larger --timeout if it hung",
        ) from None
    res = list(json.loads(out.read_text())["jobs"])
    # The run's speed: every check it made (one before each job), so that one check's noise
    # does not move a job's correction; a drift slower than a run (a minute) is still seen.
    units = [unit_seconds(r["speed_block_times_s"], int(r["speed_reps"])) for r in res]
    for r in res:
        r["run_unit_s"] = statistics.median(units)
    return res


def _layouts(
    nprocs: list[int], nodes_list: list[int], threads: int, cores: int
) -> list[dict[str, Any]]:
    if any(n < 1 for n in nprocs + nodes_list):
        raise UserError(
            "process and node counts must be at least 1", path="--nproc/--nodes", hint="e.g. 1,2"
        )
    out: list[dict[str, Any]] = []
    for nodes in sorted(set(nodes_list)):
        for nproc in sorted(set(nprocs)):
            world = nodes * nproc
            lay: dict[str, Any] = {"nodes": nodes, "nproc_per_node": nproc, "world_size": world}
            if world * threads > cores:
                lay["skipped"] = (
                    f"{world} processes × {threads} thread(s) > {cores} "
                    "cores (would measure oversubscription)"
                )
            out.append(lay)
    return out


def _sigmas(side: dict[str, Any]) -> tuple[dict[str, float], str]:
    """Relative error of each part of a prediction, from the calibration's own residuals:
    compute from the GEMM curve's residuals and the scatter of the in-step factor's steps;
    communication from the all-reduce fit's."""
    cf = side.get("compute_fit") or {}
    tr = side.get("train") or {}
    steps = [t for r in tr.get("compute_step_times_s") or [] for t in r]
    step_se = robust_rel_sd(steps) / max(1, len(steps)) ** 0.5 if steps else 0.0
    halves = [t for r in tr.get("compute_half_step_times_s") or [] for t in r]
    if halves and len(halves) == len(steps) and cf.get("gemm_weight_bandwidth"):
        # the factor then comes from the paired differences: their scatter is its own
        diffs = [a - b for a, b in zip(steps, halves, strict=True)]
        step_se = (step_se**2 + robust_rel_sd(diffs) ** 2 / len(diffs)) ** 0.5
    gemm = float(cf.get("rms_rel_err") or 0.0)
    comm = 0.0
    for f in side.get("fits") or []:
        if f.get("op") == "all_reduce":
            comm = max(comm, float(f.get("rms_rel_err") or 0.0))
    compute = (gemm**2 + step_se**2) ** 0.5
    what = (
        f"compute ±{compute:.0%} (GEMM fit residuals {gemm:.0%}, "
        f"in-step factor ±{step_se:.1%}); communication ±{comm:.0%} (all-reduce fit residuals)"
    )
    return {"compute": compute, "comm": comm}, what


def validate(
    profile: str,
    nprocs: list[int],
    nodes_list: list[int],
    steps: int = 8,
    timeout: float = 120.0,
    log: Any = None,
    repeats: int = 3,
    progress: Callable[[int, int], None] | None = None,
    workload_names: list[str] | None = None,
) -> dict[str, Any]:
    """Live runs vs predictions for the probe's job (in-sample) and workloads calibration never
    saw (:mod:`calibrate.workloads`), at each layout.

    Each repeat runs every layout once (one launch per layout, the layouts and the jobs within
    a launch rotated each repeat, so that no job always follows the same other one); before each
    job every process runs the probe's speed work, and the job's prediction is rescaled by how
    much slower or faster that work runs in the live run (median of its checks) than right
    before the probe timed its in-step factor (drift correction); where the probe's own job
    ran, every other row by how much slower or faster that job runs than predicted at the
    smallest layout (:func:`_anchor`).
    The
    measured step time is the median over every timed step of every repeat, with a bootstrap
    interval over repeats and steps; the prediction's interval comes from the calibration fits'
    residuals. A row passes when its corrected error is within 10% or the intervals overlap."""
    check_names(workload_names)
    side, path = load_sidecar(profile)
    base = {k: side["train"]["model"][k] for k in KEYS}
    threads = int(side.get("threads_per_process") or 1)
    cores = os.cpu_count() or 1
    if repeats < 1 or steps < 1:
        raise UserError(
            "--repeats and --steps must be at least 1", path="--repeats/--steps", hint="e.g. 3"
        )
    wls = select(workloads(base), workload_names)
    layouts = _layouts(nprocs, nodes_list, threads, cores)
    todo = [lay for lay in layouts if "skipped" not in lay]
    if not todo:
        raise UserError(
            "no layout can run here: " + "; ".join(lay["skipped"] for lay in layouts),
            path="--nproc/--nodes",
            hint="give fewer processes, or calibrate from a probe run with fewer threads "
            "per process (clustersim probe --threads)",
        )
    speed = dict(side.get("speed_variation") or {})
    if speed.get("note") and log:  # calibrate's warning, where the corrections rest on it
        log(f"warning: drift reference: {speed['note']}")
    # Every prediction before any live run: a calibrated profile missing or broken (a deleted
    # fabric file) is refused now, not after minutes of live jobs.
    try:
        preds = {
            (w.name, _key(lay)): layout_prediction(profile, side, w.cfg, lay, speed)
            for w in wls
            for lay in todo
        }
    except UserError as exc:
        where = f"{exc.path}: " if exc.path else ""
        raise UserError(
            f"the profiles calibrated as '{profile}' cannot be simulated ({where}{exc.message})",
            file=str(path),
            hint="re-run `clustersim calibrate` into the folder that holds its profiles, or "
            "restore the profile file it names",
        ) from None
    if not speed.get("shape"):  # older calibrations: the probe job's MLP shape
        speed["shape"] = [base["batch"] * base["seq"], base["hidden"]]
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    order: list[str] = []
    total, done_units = repeats * len(todo), 0
    with tempfile.TemporaryDirectory(prefix="clustersim-validate-") as tmp:
        for rep in range(repeats):
            k = rep % len(todo) if todo else 0
            j = rep % len(wls)
            jobs = [w.job() for w in wls[j:] + wls[:j]]
            for lay in todo[k:] + todo[:k]:
                key = _key(lay)
                order.append(key)
                if log:
                    log(
                        f"live run {rep + 1}/{repeats}: {lay['nodes']} node(s) × "
                        f"{lay['nproc_per_node']} process(es), {len(jobs)} job(s)…"
                    )
                if progress:
                    progress(done_units, total)
                done_units += 1
                for res in _launch_jobs(
                    jobs,
                    lay["nproc_per_node"],
                    lay["nodes"],
                    threads,
                    steps,
                    speed,
                    timeout,
                    Path(tmp),
                ):
                    runs.setdefault((res["name"], key), []).append(res)
    sigmas, sigma_what = _sigmas(side)
    rows: list[dict[str, Any]] = []
    for w in wls:
        for lay in layouts:
            row = {"workload": w.name, "in_sample": w.in_sample, **lay}
            rows.append(row)
            if "skipped" in lay:
                continue
            key = _key(lay)
            row.update(_row(side, lay, preds[(w.name, key)], runs[(w.name, key)], speed, sigmas))
    _anchor(rows)
    _scaling(rows)
    done = [r for r in rows if "measured_s" in r]
    out = [r for r in done if not r["in_sample"]]
    return {
        "profile": profile,
        "calibration": str(path),
        "model": base,
        "workloads": [
            {"name": w.name, "in_sample": w.in_sample, "what": w.what, **w.cfg} for w in wls
        ],
        "threads_per_process": threads,
        "cores": cores,
        "steps": steps,
        "repeats": repeats,
        "run_order": order,
        "interval_level": LEVEL,
        "prediction_errors": sigma_what,
        "drift_work": speed.get("work"),
        "drift_reference_note": speed.get("note"),
        "scaling": "weak (batch per process fixed); reference: the smallest run of each workload",
        "rows": rows,
        "max_abs_error_pct": max((abs(r["error_pct"]) for r in done), default=None),
        "out_of_sample": {
            "rows": len(out),
            "passed": sum(passed(r["verdict"]) for r in out),
            "max_abs_corrected_error_pct": max(
                (abs(r["corrected_error_pct"]) for r in out), default=None
            ),
            "max_scaling_gap_points": max(
                (abs(r["scaling_gap_points"]) for r in out if "scaling_gap_points" in r),
                default=None,
            ),
            # how wide the corrected prediction's interval is, as ± % of it: where it is wide a
            # row passes by overlap whatever its error
            "max_interval_half_width_pct": max(
                (_half_width_pct(r) for r in out if "predicted_interval_s" in r), default=None
            ),
        },
    }


def _half_width_pct(r: dict[str, Any]) -> float:
    lo, hi = r["predicted_interval_s"]
    return 100.0 * (hi - lo) / 2.0 / r["corrected_predicted_s"]


def _key(lay: dict[str, Any]) -> str:
    return f"{lay['nodes']}x{lay['nproc_per_node']}"


def _row(
    side: dict[str, Any],
    lay: dict[str, Any],
    predicted: Predicted,
    lives: list[dict[str, Any]],
    speed: dict[str, Any],
    sigmas: dict[str, float],
) -> dict[str, Any]:
    nproc, world = lay["nproc_per_node"], lay["world_size"]
    pred, notes, shares = predicted[0], list(predicted[1]), predicted[2]
    all_steps = [t for live in lives for t in live["step_times_s"]]
    meas = statistics.median(all_steps)
    ci = bootstrap_median([live["step_times_s"] for live in lives])
    run_medians = [live["step_time_median_s"] for live in lives]
    units = [live["run_unit_s"] for live in lives]
    blocks = [
        t / int(live["speed_reps"])
        for live in lives
        for r in live["speed_block_times_s"]
        for t in r
    ]
    ref = drift_reference(speed, world if side.get("hosts") == 1 else nproc)
    drift = statistics.median(units) / ref if ref else None
    corrected = pred * drift if drift else pred
    if drift is None:
        notes.append(
            "drift not corrected: the calibration has no speed reference for this many "
            "busy processes"
        )
    comm = sum(v for k, v in shares.items() if k.startswith("comm"))
    fit_sd = prediction_sd({"compute": 1.0 - comm, "comm": comm}, sigmas)
    drift_sd = robust_rel_sd(blocks) / max(1, len(blocks)) ** 0.5 if drift else 0.0
    sd = (fit_sd**2 + drift_sd**2) ** 0.5
    pi = (corrected * (1 - Z * sd), corrected * (1 + Z * sd))
    err = (corrected - meas) / meas
    row: dict[str, Any] = {
        "prediction_fit_sd": fit_sd,
        "measured_s": meas,
        "measured_interval_s": list(ci),
        "predicted_s": pred,
        "error_pct": 100.0 * (pred - meas) / meas,
        "drift_pct": None if drift is None else 100.0 * (drift - 1.0),
        "corrected_predicted_s": corrected,
        "predicted_interval_s": list(pi),
        "corrected_error_pct": 100.0 * err,
        "verdict": verdict(err, ci, pi),
        "comm_share": comm,
        "run_medians_s": run_medians,
        "run_spread_pct": 100.0 * (max(run_medians) - min(run_medians)) / meas,
        "measured_steps_s": all_steps,
    }
    if notes:
        row["note"] = "; ".join(notes)
    return row


def _anchor(rows: list[dict[str, Any]]) -> None:
    """Drift from the reference job: the probe's own job (the work calibration fitted its
    in-step factor on), measured over predicted at the smallest layout it ran at, is how fast
    this machine runs that job now against the calibration. Every other row's prediction is
    rescaled by that one factor instead of by the speed work's checks (kept as
    ``unit_drift_pct``): on a shared machine one job's step follows another's far more closely
    than a short GEMM check does. One factor for every layout, so that what the model gets
    wrong between layouts (communication, a busier host) is still seen, in the errors and in
    the scaling gaps."""
    refs = [r for r in rows if r.get("in_sample") and "measured_s" in r]
    if not refs:
        return
    a = min(refs, key=lambda r: (r["world_size"], r["nodes"]))
    drift = a["measured_s"] / a["predicted_s"]
    lo, hi = a["measured_interval_s"]
    drift_sd = (hi - lo) / (2 * Z * a["measured_s"])
    where = f"{a['workload']} at {a['nodes']}x{a['nproc_per_node']}"
    for r in rows:
        if r is a or "measured_s" not in r:
            continue
        sd = (r["prediction_fit_sd"] ** 2 + drift_sd**2) ** 0.5
        corrected = r["predicted_s"] * drift
        err = (corrected - r["measured_s"]) / r["measured_s"]
        pi = (corrected * (1 - Z * sd), corrected * (1 + Z * sd))
        r.update(
            unit_drift_pct=r["drift_pct"],
            drift_pct=100.0 * (drift - 1.0),
            drift_reference=where,
            corrected_predicted_s=corrected,
            predicted_interval_s=list(pi),
            corrected_error_pct=100.0 * err,
            verdict=verdict(err, tuple(r["measured_interval_s"]), pi),
        )


def _scaling(rows: list[dict[str, Any]]) -> None:
    """Weak scaling per workload: per-process throughput against its smallest measured run,
    measured and predicted, and the gap in points. Where the reference job set one drift
    factor for the rows (:func:`_anchor`), the prediction's is the model's own (raw
    predictions: the shared factor cancels, and the reference row's own speed-check drift is
    no part of how the model scales); without it each row carries the drift of its own run,
    as the measured ratio does, so the corrected predictions are compared."""
    anchored = any("drift_reference" in r for r in rows)
    key = "predicted_s" if anchored else "corrected_predicted_s"
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if "measured_s" in r:
            by.setdefault(r["workload"], []).append(r)
    for group in by.values():
        ref = min(group, key=lambda r: r["world_size"])
        for r in group:
            r["measured_scaling"] = ref["measured_s"] / r["measured_s"]
            r["predicted_scaling"] = ref[key] / r[key]
            if r is not ref:
                r["scaling_gap_points"] = 100.0 * (r["predicted_scaling"] - r["measured_scaling"])
