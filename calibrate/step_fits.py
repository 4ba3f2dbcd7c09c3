"""Fits that hold the probe's training job against the simulator's own view of it: the
memory-bound operations' and the optimizer's bandwidth fractions (the simulator's byte counts
over the measured times), the kernel count behind the per-operation overhead and the in-step
compute factor (the fabric's in-step achievable fraction is :mod:`.sync_fit`'s)."""

from __future__ import annotations

import copy
import statistics
from typing import Any, NamedTuple

# Which probe measurement times which of the simulator's memory-bound operations (by name), and
# whether the measurement covers the operation's forward and backward together.
JOB_OP_OF = {
    "attn_norm": "layernorm",
    "mlp_norm": "layernorm",
    "final_norm": "layernorm",
    "activation": "gelu",
    "residual_add": "add",
    "cross_entropy": "cross_entropy",
}
FWD_BWD = {"layernorm", "gelu", "cross_entropy"}  # timed forward+backward; "add": one add


def job_memory_fit(
    probe: dict[str, Any], copy_gbps: float, op_s: float, tier: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """Bandwidth fractions from the probe's timings of the training job's own memory-bound
    operations and optimizer step, with bytes counted as the simulator counts them (so the
    simulated time of those operations is the measured one); ``tier``: the cache the copies
    showed (:func:`calibrate.fits.fit_cache`), which the operations that fit it run in."""
    jo, tr = probe.get("job_ops"), probe.get("train")
    if not jo or not tr:
        return None
    from simulator.config.loading import resolve_dict
    from simulator.engine.compute import tiered_seconds
    from simulator.workload.memory import buffer_bytes_per_param, optimizer_bytes_per_param
    from simulator.workload.ops import backward_ops, head_ops, layer_ops

    from .scenario import inline_job_scenario

    rs = resolve_dict(inline_job_scenario(tr["model"]))
    layers = rs.model.layers
    cache_b = tier["cache_mb"] * 1e6 if tier else 0.0
    cache_bps = tier["cache_gbps"] * 1e9 if tier else 0.0
    nbytes = 0.0
    ideal = 0.0  # the operations' time at the copies' bandwidths
    secs = 0.0
    used: dict[str, int] = {}
    for reps, fwd in ((layers, layer_ops(rs)), (1, head_ops(rs))):
        for ops in (fwd, backward_ops(fwd)):
            for op in ops:
                if op.kind != "memory":
                    continue
                key = JOB_OP_OF.get(op.name.removesuffix("_bwd"))
                if key is None or key not in jo:
                    continue
                nbytes += reps * op.bytes
                ideal += reps * tiered_seconds(
                    op.bytes, copy_gbps * 1e9, cache_b, cache_bps, op.footprint
                )
                is_bwd = op.name.endswith("_bwd")
                if key in FWD_BWD:
                    # one measurement covers forward and backward: charge it with the forward
                    if is_bwd:
                        continue
                    secs += reps * max(jo[key]["time_s"] - 2 * op_s, 1e-9)
                else:
                    secs += reps * max(jo[key]["time_s"] - op_s, 1e-9)
                used[key] = used.get(key, 0) + reps
    if nbytes <= 0 or secs <= 0:
        return None
    frac = min(1.0, ideal / secs)
    out: dict[str, Any] = {
        "memory_fraction": frac,
        "memory_what": (
            "the training job's own memory-bound operations on its shapes ("
            + ", ".join(f"{jo[k]['op']} ×{n}" for k, n in sorted(used.items()))
            + f"): {nbytes / 1e6:.1f} MB as the simulator counts them in {secs * 1e3:.2f} ms "
            f"(less per-op overhead), against {ideal * 1e3:.2f} ms at copy {copy_gbps:.3g} GB/s"
            + (f" ({tier['cache_gbps']:.3g} GB/s in cache)" if tier else "")
        ),
    }
    o = jo.get("optimizer")
    if o and o.get("params"):
        # the probe's job is unsharded: its shard is the whole buffer
        per_param = optimizer_bytes_per_param(rs) + buffer_bytes_per_param(rs)
        ob = o["params"] * per_param
        secs = max(o["time_s"] - op_s, 1e-9)
        tiny = optimizer_tensor_fit(o, jo.get("optimizer_tensors"), per_param, op_s)
        if tiny is not None and ob / tiny[2] > copy_gbps * 1e9:
            tiny = None  # faster than copies: the split is noise; one bandwidth for it all
        if tiny is not None:
            out["optimizer_us_per_tensor"], out["optimizer_tensor_what"] = tiny[0], tiny[1]
            secs = tiny[2]
        out["optimizer_fraction"] = min(1.0, ob / secs / (copy_gbps * 1e9))
        out["optimizer_what"] = (
            f"{o['op']}: {o['time_s'] * 1e3:.2f} ms for {ob / 1e6:.0f} MB counted as the "
            f"simulator counts optimizer traffic (each tensor once), over copy {copy_gbps:.3g} GB/s"
            + (f" ({secs * 1e3:.2f} ms of it moving bytes, the rest per tensor)" if tiny else "")
        )
    return out


def optimizer_tensor_fit(
    job: dict[str, Any], tiny: dict[str, Any] | None, per_param: float, op_s: float
) -> tuple[float, str, float] | None:
    """(µs per parameter tensor, its source, seconds the job's optimizer step spends moving
    bytes) from the step timed over the job's parameters and over many tiny tensors: two
    equations, time = bytes/bandwidth + tensors × per-tensor cost; None where the probe did not
    time both, or where they do not show a per-tensor cost."""
    if not tiny or not job.get("tensors") or not tiny.get("tensors"):
        return None
    import numpy as np

    a = [[job["params"] * per_param, job["tensors"]], [tiny["params"] * per_param, tiny["tensors"]]]
    b = [job["time_s"] - op_s, tiny["time_s"] - op_s]
    try:
        inv_bw, per_tensor = (float(x) for x in np.linalg.solve(a, b))
    except np.linalg.LinAlgError:  # the two steps are one equation: no split
        return None
    if per_tensor <= 0 or inv_bw <= 0:
        return None
    what = (
        f"{tiny['op']}: {tiny['time_s'] * 1e3:.2f} ms, beside {job['op']} "
        f"({job['tensors']} tensors) in {job['time_s'] * 1e3:.2f} ms: time = bytes/bandwidth "
        "+ tensors × this (less one per-op overhead each)"
    )
    return per_tensor * 1e6, what, job["params"] * per_param * inv_bw


def step_kernels(model_cfg: dict[str, Any]) -> int:
    """Kernels of one training step (forward and backward, no optimizer) of the probe
    transformer ``model_cfg`` as the simulator counts them: one per operation, two per backward
    GEMM (its data and weight gradients)."""
    from simulator.config.loading import resolve_dict
    from simulator.workload.ops import backward_ops, embedding_ops, head_ops, layer_ops

    from .scenario import inline_job_scenario

    rs = resolve_dict(inline_job_scenario(model_cfg))
    n = 0
    for reps, fwd in ((1, embedding_ops(rs)), (rs.model.layers, layer_ops(rs)), (1, head_ops(rs))):
        for op in fwd + backward_ops(fwd):
            if op.kind != "collective":
                n += reps * (2 if op.kind == "gemm" and op.backward else 1)
    return n


def launch_fit(probe: dict[str, Any], bare_s: float) -> tuple[float, str]:
    """Per-operation overhead (µs) and its source: from the probe's training step at a size
    where the operations do next to no work, over the kernels the simulator counts for that
    step (Python module calls, autograd and backward dispatch included); else the bare time of
    a one-element add."""
    so = probe.get("step_overhead") or {}
    if so.get("time_s") and so.get("model"):
        n = step_kernels(so["model"])
        per = max(float(so["time_s"]) / max(1, n), bare_s)
        return per * 1e6, (
            f"{so['what']}: {so['time_s'] * 1e3:.2f} ms over the {n} operations the simulator "
            f"counts for that step (a bare one-element add takes {bare_s * 1e6:.1f} µs)"
        )
    return bare_s * 1e6, "time of a one-element in-place add (per-op dispatch overhead)"


def simulated_compute_s(gpu: dict[str, Any], model_cfg: dict[str, Any]) -> float:
    """Compute-stream time (compute + optimizer, and the wait for the host to issue kernels,
    which the probe's timing holds too) of one step of the probe job on one device of the (not
    yet written) GPU profile ``gpu``."""
    from simulator.config.loading import resolve_dict
    from simulator.simulate import simulate

    from .scenario import inline_job_scenario

    sc = inline_job_scenario(model_cfg)
    sc["cluster"]["gpu"] = gpu
    bd = simulate(resolve_dict(sc), scaling=False).metrics.breakdown_s
    return bd.get("compute", 0.0) + bd.get("optimizer", 0.0) + bd.get("host", 0.0)


# The most of the step the two-batch fit may call batch-independent beyond the simulator's own
# fixed costs (6-11 ms of a 120 ms step on the 2-core VM, 2026-11-24): more is taken for noise
# in the difference of the two sizes, which would load the weight term of wider models.
MAX_EXCESS = 0.25


class StepFit(NamedTuple):
    """The in-step fit: the factor on every compute-stream operation and its source, the same
    factor for the step run by one process per host (None if not timed), and, where the step
    was timed at two batch sizes, the weight-streaming bandwidth fraction and its source."""

    factor: float
    what: str
    alone: float | None
    weight_fraction: float | None = None
    weight_what: str = ""


def _with_weight(gpu: dict[str, Any], fraction: float) -> dict[str, Any]:
    out = copy.deepcopy(gpu)
    out["efficiency"]["gemm_weight_bandwidth"] = {
        "value": fraction,
        "source": "trial value of the in-step fit",
    }
    return out


def _fraction_for(gpu: dict[str, Any], model: dict[str, Any], target: float) -> float | None:
    """The weight-streaming fraction at which the simulated step takes ``target`` seconds
    (the simulated step falls as the fraction rises; a weight a GEMM streams leaves its own
    traffic, so the relation is not exactly 1/fraction); None if even streaming at memory
    bandwidth takes longer."""
    from scipy.optimize import brentq

    def gap(inv: float) -> float:
        return simulated_compute_s(_with_weight(gpu, 1.0 / inv), model) - target

    if gap(1.0) >= 0.0:
        return None
    hi = 2.0
    while gap(hi) < 0.0:
        hi *= 2.0
        if hi > 1e6:  # a fraction below 1e-6 is out of every profile's range
            return None
    return 1.0 / float(brentq(gap, 1.0, hi, xtol=1e-12, rtol=1e-12))


def _weight_fit(
    gpu: dict[str, Any], train: dict[str, Any], simulated: float
) -> tuple[float, float, str] | tuple[None, None, str]:
    """(factor, weight fraction, source) from the step timed at the job's batch and at half
    of it, steps alternating: the factor from how much the step shrinks with the batch (the
    simulated step's difference between the two batches against the paired measured one), the
    weights' streaming from what is left at the full batch; (None, None, why) where the data
    do not support it (the single-factor fit stands)."""
    full, half = train.get("compute_step_times_s"), train.get("compute_half_step_times_s")
    hb = int(train.get("half_batch") or 0)
    if not full or not half or hb <= 0:
        return None, None, "the probe timed the step at one batch size"
    if [len(r) for r in full] != [len(r) for r in half]:
        return None, None, "the steps at the two batch sizes do not pair up rank by rank"
    diffs = [a - b for fr, hr in zip(full, half, strict=True) for a, b in zip(fr, hr, strict=True)]
    if len(diffs) < 3:
        return None, None, "fewer than 3 paired steps at two batch sizes"
    sim_half = simulated_compute_s(gpu, {**train["model"], "batch": hb})
    d, sd = statistics.median(diffs), simulated - sim_half
    measured = float(train["compute_step_median_s"])
    if d <= 0 or sd <= 0:
        return None, None, "the step at half batch was not faster than at the full batch"
    factor = d / sd
    excess = measured / factor - simulated  # batch-independent seconds the model lacks
    if excess > MAX_EXCESS * (simulated + excess):
        return (
            None,
            None,
            (
                f"the batch-size difference gives a factor {factor:.2f} against "
                f"{measured / simulated:.2f} for the whole step, which would leave "
                f"{excess / (simulated + excess):.0%} of the step not shrinking with the "
                "batch: too noisy to split the step; re-probe on a quieter machine"
            ),
        )
    if excess <= 0:
        return None, None, "no batch-independent time beyond the simulator's own"
    fraction = _fraction_for(gpu, train["model"], simulated + excess)
    if fraction is None:
        return (
            None,
            None,
            (
                f"the batch-independent excess ({excess * 1e3:.2f} ms) is less than streaming the "
                "weights at memory bandwidth: they stay cached"
            ),
        )
    what = (
        f"{len(diffs)} paired training steps without communication at batch "
        f"{train['model']['batch']} and {hb} (alternating): the step shrinks by "
        f"{d * 1e3:.1f} ms (median), "
        f"{factor:.3f}× the simulated {sd * 1e3:.1f} ms; the rest of the "
        f"{measured * 1e3:.1f} ms step, {excess * 1e3:.2f} ms that does not shrink with the "
        "batch, taken as the linear layers' weights streamed by every pass"
    )
    return factor, fraction, what


def in_step_fit(gpu: dict[str, Any], train: dict[str, Any] | None) -> StepFit | None:
    """How much slower the job's operations run inside its training step than the fitted
    per-operation figures say: the probe's step without gradient synchronisation (all ranks at
    once), over the simulated compute and optimizer time of the same step; its source; and the
    same for the step run by one process per host, the host's others idle (None if the probe
    did not time that). Where the probe also timed the step at half the batch, the factor
    comes from the difference and the part of the step that does not shrink with the batch
    becomes a weight-streaming term (:func:`_weight_fit`)."""
    if not train or not train.get("compute_step_median_s"):
        return None
    measured = float(train["compute_step_median_s"])
    simulated = simulated_compute_s(gpu, train["model"])
    if simulated <= 0:
        return None
    n = sum(len(r) for r in train.get("compute_step_times_s") or [])
    alone = train.get("alone_compute_step_median_s")
    factor, fraction, why = _weight_fit(gpu, train, simulated)
    if factor is not None and fraction is not None:
        total = measured / factor
        return StepFit(
            factor,
            why,
            float(alone) / total if alone else None,
            fraction,
            why,
        )
    what = (
        f"median of {n} training steps without communication ("
        + str(train.get("compute_step_how", ""))
        + f"): {measured * 1e3:.1f} ms, over the {simulated * 1e3:.1f} ms of compute and "
        "optimizer that the fitted per-operation figures give for the same step"
        + (f" (no weight-streaming term: {why})" if train.get("half_batch") else "")
    )
    return StepFit(measured / simulated, what, float(alone) / simulated if alone else None)
