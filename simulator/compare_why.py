"""Why one scenario beats another on a metric, for `clustersim compare`'s verdicts: the part of
the step that differs most, the goodput or the up-front commitment behind it."""

from __future__ import annotations

from typing import Any

CATEGORY_LABELS = {
    "compute": "compute",
    "optimizer": "optimizer",
    "host": "the GPU waiting for the host to issue kernels",
    "comm_tp": "exposed TP communication",
    "comm_cp": "exposed CP communication",
    "comm_dp": "exposed DP communication",
    "comm_pp": "exposed PP communication",
    "pp_bubble": "pipeline bubble",
    "data_stall": "data-loader stall",
    "imbalance": "waiting on other stages or ranks",
    "straggler": "waiting for the slowest GPU",
    "overlap": "compute slowed by overlapping DP communication",
    "offload": "waiting on activation offload to host memory",
}


def _step_why(a: dict[str, Any], b: dict[str, Any]) -> str:
    """Why ``a``'s step serves better than ``b``'s: the step category where ``b`` spends the
    most time beyond ``a`` (where ``a``'s step is the shorter), else ``a``'s larger step."""
    ta, tb = a.get("tokens_per_step"), b.get("tokens_per_step")
    if a["step_time_s"] >= b["step_time_s"] and ta and tb and ta > tb:
        return f"{ta:,.0f} vs {tb:,.0f} tokens per step (a longer step that carries more)"
    cats = set(a["breakdown_s"]) | set(b["breakdown_s"])
    key = max(cats, key=lambda k: b["breakdown_s"].get(k, 0.0) - a["breakdown_s"].get(k, 0.0))
    da, db = a["breakdown_s"].get(key, 0.0), b["breakdown_s"].get(key, 0.0)
    if round(db, 3) <= round(da, 3):
        # No part of the step is longer for b: a wins per GPU (MFU, tokens/s per GPU) with a
        # longer step, i.e. it does its work on fewer or slower GPUs, closer to their peak.
        ta, tb = a.get("model_tflops_per_gpu"), b.get("model_tflops_per_gpu")
        ma, mb = a.get("mfu"), b.get("mfu")
        if ta and tb and ma and mb and _differs(round(ta / ma), round(tb / mb)):
            return (
                f"a lower peak to reach ({ta / ma:,.0f} vs {tb / mb:,.0f} TFLOP/s per GPU) "
                "though the other is as fast or faster in every part of the step"
            )
        if ma and mb and f"{ma:.1%}" != f"{mb:.1%}":
            return (
                f"{ma:.1%} vs {mb:.1%} MFU: fewer GPU-hours for the same work, though the "
                "other is as fast or faster in every part of the step"
            )
        return "though the other is as fast or faster in every part of the step"
    return f"{CATEGORY_LABELS.get(key, key)}: {da:.3f} s vs {db:.3f} s per step"


def _goodput(r: dict[str, Any]) -> float:
    """Share of wall time that makes progress (below 1 where GPUs fail or spot is reclaimed)."""
    return float(r.get("goodput") or 1.0)


def _differs(x: float, y: float) -> bool:
    return abs(x - y) > 1e-6 * max(abs(x), abs(y))


def _goodput_why(a: dict[str, Any], b: dict[str, Any]) -> str:
    """Why ``a`` loses less wall time to interruptions than ``b``: fewer of them, a shorter
    checkpoint write, a faster restart (the figures of ``reliability``)."""
    ra, rb = a.get("reliability") or {}, b.get("reliability") or {}
    if not ra:
        return "nothing interrupts it (no failure rate or preemptions given)"
    reasons = []
    ia, ib = ra.get("interruptions_per_hour") or 0.0, rb.get("interruptions_per_hour") or 0.0
    if ia < ib and _differs(ia, ib):
        reasons.append(f"{ia * 24:.3g} vs {ib * 24:.3g} interruptions a day")
    wa, wb = ra.get("checkpoint_write_s"), rb.get("checkpoint_write_s")
    if wa is not None and wb is not None and wa < wb and _differs(wa, wb):
        reasons.append(
            f"a checkpoint written in {wa:,.0f} s vs {wb:,.0f} s "
            f"({ra.get('checkpoint_gb', 0):,.0f} vs {rb.get('checkpoint_gb', 0):,.0f} GB)"
        )
    sa, sb = ra.get("restart_s"), rb.get("restart_s")
    if sa is not None and sb is not None and sa < sb and _differs(sa, sb):
        reasons.append(f"a restart of {sa / 60:.1f} vs {sb / 60:.1f} min")
    return "; ".join(reasons) if reasons else "the same interruptions, checkpoints and restarts"


def _commitment_why(a: dict[str, Any], b: dict[str, Any]) -> str:
    """Why ``a`` commits less money up front than ``b``: how each is paid for."""
    ca, cb = a.get("cost") or {}, b.get("cost") or {}
    held = ca.get("usd_commitment") or 0.0
    how_a, how_b = (
        str(c.get("model", "?")).replace("cloud:", "cloud ").replace("_", "-") for c in (ca, cb)
    )
    if not held:
        return f"{how_a} is paid by the hour and commits nothing, against {how_b}"
    if how_a == how_b:
        return f"{how_a} of {a['gpus']:,} GPUs against {b['gpus']:,}"
    return f"{how_a} against {how_b}"


def why(a: dict[str, Any], b: dict[str, Any], key: str) -> str:
    """What makes result ``a`` better than ``b`` on metric ``key``: for time and money, a lower
    price per GPU-hour and more wall time making progress where ``a`` has them, and the step
    category that differs most where the step or the throughput differs; for goodput, the
    interruptions and checkpoints; for the money committed up front, how each is paid for."""
    if key == "goodput":
        return _goodput_why(a, b)
    if key == "usd_commitment":
        return _commitment_why(a, b)
    reasons = []
    if key in ("usd_per_million_tokens", "usd_total"):
        pa = (a.get("cost") or {}).get("usd_per_gpu_hour")
        pb = (b.get("cost") or {}).get("usd_per_gpu_hour")
        if pa is not None and pb is not None and pa < pb and _differs(pa, pb):
            reasons.append(f"${pa:.2f} vs ${pb:.2f} per GPU-hour")
            held = (a.get("cost") or {}).get("usd_commitment")
            if held:
                reasons.append(
                    f"charged only its own hours of ${held:,.0f} committed up front, as if other "
                    "work kept the rest busy (cluster.pricing.utilisation)"
                )
    if key in ("usd_per_million_tokens", "usd_total", "time_to_train_days"):
        ga, gb = _goodput(a), _goodput(b)
        if ga > gb and f"{ga:.1%}" != f"{gb:.1%}":
            reasons.append(f"{ga:.1%} vs {gb:.1%} of wall time making progress")
    if key in ("usd_per_million_tokens", "usd_total"):
        # Money buys GPU-hours: what the step says is how many GPU-seconds a token takes,
        # which a step half as long on twice the GPUs does not change.
        per_gpu = _gpu_time_why(a, b)
        if per_gpu:
            reasons.append(per_gpu)
        return "; ".join(reasons) if reasons else "the same GPU time per token"
    if key == "tokens_per_s_per_gpu":
        # per GPU is GPU-seconds per token turned over: a step's parts on clusters of other
        # sizes do not compare (256 H100 against 128 B200: 'exposed TP communication' was
        # given where compute per token halved)
        per_gpu = _gpu_time_why(a, b)
        if per_gpu:
            return per_gpu
    if key == "mfu":
        # a share of the peak, whatever the step's length or tokens: never seconds or tokens
        # per step (a GB200 rack's lower fp8 MFU was put down to its shorter step)
        return _mfu_why(a, b)
    tps_a, tps_b = a.get("tokens_per_s") or 0.0, b.get("tokens_per_s") or 0.0
    if _differs(a["step_time_s"], b["step_time_s"]) or _differs(tps_a, tps_b):
        reasons.append(_step_why(a, b))
    return "; ".join(reasons) if reasons else "the same step"


def same_model(results: list[dict[str, Any]]) -> bool:
    """Whether the results train one model (parameter counts equal to the thousand)."""
    return len({round(float(r.get("params") or 0), -3) for r in results}) <= 1


def _mfu_why(a: dict[str, Any], b: dict[str, Any]) -> str:
    """Why ``a`` reaches a higher MFU than ``b``: MFU is the share of the step spent computing
    times the model FLOP rate while computing (a share of the peak), whatever the model, the
    cluster or the step's length, and the larger of the two ratios is the reason: the part of
    the step besides compute that ``b`` spends most on, or the rate, with the lower peak ``a``
    divides by or the recomputation behind ``b``'s lower one (hardware FLOPs per model FLOP)."""
    ca, cb = (r["breakdown_s"].get("compute", 0.0) / r["step_time_s"] for r in (a, b))
    ma, mb = float(a.get("mfu") or 0.0), float(b.get("mfu") or 0.0)
    if ca > 0 and cb > 0 and ma > 0 and mb > 0:
        ra, rb = ma / ca, mb / cb
        if ca / cb < ra / rb:
            why = f"model FLOPs at {ra:.0%} vs {rb:.0%} of the peak while computing"
            ta, tb = a.get("model_tflops_per_gpu"), b.get("model_tflops_per_gpu")
            if ta and tb and round(ta / ma) < round(tb / mb):
                why += f" (a lower peak to reach: {ta / ma:,.0f} vs {tb / mb:,.0f} TFLOP/s per GPU)"
            ha, hb = (float(r.get("hfu") or 0.0) / float(r["mfu"]) for r in (a, b))
            if hb > ha * 1.01:
                why += f" ({ha:.2f} vs {hb:.2f} FLOPs computed per model FLOP: recomputation)"
            return why
    share = _share_why(a, b)
    return share or f"compute {ca:.1%} vs {cb:.1%} of the step"


def _share_why(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """Why ``a`` keeps its GPUs busier than ``b`` on a step that does not compare in seconds
    (another model): the part of the step other than compute whose share ``b`` has most beyond
    ``a``'s; None where none is larger by a tenth of a percent."""
    sa, sb = a["step_time_s"], b["step_time_s"]
    if not (sa > 0 and sb > 0):
        return None
    cats = (set(a["breakdown_s"]) | set(b["breakdown_s"])) - {"compute"}
    if not cats:
        return None
    key = max(
        cats, key=lambda k: b["breakdown_s"].get(k, 0.0) / sb - a["breakdown_s"].get(k, 0.0) / sa
    )
    fa, fb = a["breakdown_s"].get(key, 0.0) / sa, b["breakdown_s"].get(key, 0.0) / sb
    if fb - fa < 1e-3:
        return None
    return f"{CATEGORY_LABELS.get(key, key)}: {fa:.1%} vs {fb:.1%} of the step"


def _gpu_time_why(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """Why ``a`` spends fewer GPU-seconds per token than ``b``: the step category where ``b``
    spends the most GPU time per token beyond ``a``'s (GPU-seconds per million tokens); None
    where ``a`` spends as much or more (it wins on price or goodput alone)."""
    ga, gb = a.get("gpus"), b.get("gpus")
    ta, tb = a.get("tokens_per_step"), b.get("tokens_per_step")
    if not (ga and gb and ta and tb):
        return None
    fa, fb = ga / ta * 1e6, gb / tb * 1e6  # GPU-seconds per million tokens, per second of step
    if a["step_time_s"] * fa >= b["step_time_s"] * fb * (1 - 1e-6):
        return None
    cats = set(a["breakdown_s"]) | set(b["breakdown_s"])
    key = max(
        cats, key=lambda k: b["breakdown_s"].get(k, 0.0) * fb - a["breakdown_s"].get(k, 0.0) * fa
    )
    da, db = a["breakdown_s"].get(key, 0.0) * fa, b["breakdown_s"].get(key, 0.0) * fb
    return f"{CATEGORY_LABELS.get(key, key)}: {da:,.3g} vs {db:,.3g} GPU-seconds per million tokens"


__all__ = ["CATEGORY_LABELS", "why"]
