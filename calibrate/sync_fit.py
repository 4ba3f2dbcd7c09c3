"""The fabric's in-step achievable fraction: the share of the fitted collectives' bandwidth at
which the probe's DDP step, simulated, synchronises as slowly as it was measured to (a fit that
holds the probe's training job against the simulator, beside :mod:`.step_fits`)."""

from __future__ import annotations

from typing import Any

# The lowest in-step fraction calibration writes: a step synchronising 50 times slower than its
# collectives alone is a broken probe run, not a transport.
FRACTION_FLOOR = 0.02


def comm_in_step_fit(
    gpu: dict[str, Any], fabric: dict[str, Any], probe: dict[str, Any]
) -> tuple[float, str] | None:
    """The fabric's achievable fraction inside a training step: the probe's DDP step on one
    host measured with gradient synchronisation and without (``no_sync``); the difference is
    what synchronisation costs in the step (the all-reduce, DDP's bucket copies, the wait for
    the slowest rank, and on CPUs the reduction competing with the other processes). A step
    that synchronises slower than the same difference simulated with the fitted (stand-alone)
    fabric gets the fitted bandwidth scaled down until the simulation matches it. None when
    the probe did not time both, or synchronisation costs no more than predicted."""
    tr = probe.get("train") or {}
    if (
        tr.get("wrapper") != "ddp"
        or int(tr.get("nodes") or 1) != 1
        or not tr.get("compute_step_median_s")
        or not tr.get("step_time_median_s")
    ):
        return None
    from simulator.config.loading import resolve_dict
    from simulator.simulate import simulate

    from .scenario import inline_job_scenario, job_scenario, probe_comm_overlaps

    ppn = int(tr["procs_per_node"])
    overlap = probe_comm_overlaps(probe, ppn)
    inline = inline_job_scenario(tr["model"])["cluster"]

    def simulated_sync(fraction: float) -> float:
        """The step's time beyond compute, optimizer and the wait for the host at ``fraction``
        of the fits' bandwidth."""
        sc = job_scenario("x", tr["model"], ppn, 1, overlap=overlap, stragglers="speed_cv" in gpu)
        tier = dict(fabric, max_gpus=max(ppn, 2), achievable_fraction=fraction)
        sc["cluster"].update(gpu=gpu, fabric=tier)
        sc["cluster"]["storage"] = inline["storage"]
        m = simulate(resolve_dict(sc), scaling=False).metrics
        own = sum(m.breakdown_s.get(k, 0.0) for k in ("compute", "optimizer", "host"))
        return m.step_time_s - own

    pred_sync = simulated_sync(1.0)
    paired = probe.get("train_sync_cost") or {}
    meas_sync = float(
        paired.get("median_s")
        or float(tr["step_time_median_s"]) - float(tr["compute_step_median_s"])
    )
    if pred_sync <= 0 or meas_sync <= pred_sync:
        return None
    # Only the collectives' bandwidth part scales with the fraction (their α and the rest of
    # the synchronisation do not, and overlap with the backward hides a share that changes
    # with it), so the fraction is not the ratio of the totals: it is found where the simulated
    # synchronisation, which only grows as the fraction falls, meets the measured one
    # (bisection in log fraction, to 1% of the measurement).
    lo, hi = FRACTION_FLOOR, 1.0
    if simulated_sync(lo) <= meas_sync:
        frac = lo
    else:
        for _ in range(30):
            mid = (lo * hi) ** 0.5
            got = simulated_sync(mid)
            if abs(got - meas_sync) <= 0.01 * meas_sync:
                lo = hi = mid
                break
            lo, hi = (mid, hi) if got > meas_sync else (lo, mid)
        frac = (lo * hi) ** 0.5
    return frac, (
        f"synchronisation inside the probe's DDP step: {meas_sync * 1e3:.1f} ms measured ("
        + (
            f"median of {len(paired['differences_s'])} paired differences, a step with "
            "gradient sync less the step without it just before"
            if paired.get("median_s")
            else f"step {tr['step_time_median_s'] * 1e3:.1f} ms with gradient sync, "
            f"{tr['compute_step_median_s'] * 1e3:.1f} ms without"
        )
        + f"), {pred_sync * 1e3:.1f} ms "
        "simulated with the stand-alone fit: the fitted bandwidth is achieved at this fraction "
        "inside a step, the one at which the simulated synchronisation is the measured one "
        "(the collectives' α and the rest of it do not scale with it)"
    )
