"""Fits recover known parameters; bad probe files are one clear error and exit 2."""

from __future__ import annotations

import json

import numpy as np
import pytest

from calibrate.fit import COEFFS, fit_alpha_beta, fit_efficiency

SIZES = [2**k for k in range(10, 27, 2)]


@pytest.mark.parametrize("op", sorted(COEFFS))
@pytest.mark.parametrize("n", [2, 4, 8])
def test_alpha_beta_recovered_within_1pct(op: str, n: int) -> None:
    alpha, beta = 35e-6, 1 / 3.2e9
    a, b = COEFFS[op](n)
    times = [a * alpha + b * s * beta for s in SIZES]
    fit = fit_alpha_beta(op, n, SIZES, times)
    assert fit.alpha_s == pytest.approx(alpha, rel=0.01)
    assert fit.beta_s_per_byte == pytest.approx(beta, rel=0.01)
    assert fit.r2 > 0.999 and fit.rms_rel_err < 1e-3


def test_alpha_beta_with_noise_is_close() -> None:
    rng = np.random.default_rng(0)
    alpha, beta = 80e-6, 1 / 1.5e9
    times = [(2 * alpha + s * beta) * (1 + rng.normal(0, 0.03)) for s in SIZES]
    fit = fit_alpha_beta("all_reduce", 2, SIZES, times)
    assert fit.alpha_s == pytest.approx(alpha, rel=0.1)
    assert fit.beta_s_per_byte == pytest.approx(beta, rel=0.1)
    assert len(fit.residuals_rel) == len(SIZES)


def test_efficiency_curve_recovered() -> None:
    F = np.logspace(6, 11, 12)
    m, h = 0.8, 3e8
    mm, hh, r2 = fit_efficiency(F, m * F / (F + h))
    assert mm == pytest.approx(m, rel=0.01) and hh == pytest.approx(h, rel=0.01) and r2 > 0.999


def _probe_like(**over):
    d = {
        "format": "clustersim-probe",
        "version": 1,
        "complete": True,
        "host": "h",
        "date": "2025-01-01",
        "world_size": 2,
    }
    d.update(over)
    return d


@pytest.mark.parametrize(
    "content, words",
    [
        (
            '{"format": "clustersim-probe", "version": 1, "collectives": [{"op": "all_re',
            "not valid JSON",
        ),
        (json.dumps(_probe_like(version=2)), "version 2"),
        (json.dumps(_probe_like(format="nccl-tests")), "not a clustersim probe file"),
        (json.dumps(_probe_like(complete=False, error={"message": "rank 1 died"})), "rank 1 died"),
    ],
    ids=["truncated", "wrong-version", "wrong-format", "incomplete"],
)
def test_bad_probe_file_exits_2(tmp_path, content: str, words: str) -> None:
    import os
    import shutil
    import subprocess

    f = tmp_path / "probe.json"
    f.write_text(content)
    r = subprocess.run(
        [shutil.which("clustersim") or "clustersim", "calibrate", str(f), "--name", "x-cal"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert r.returncode == 2, r.stderr
    assert words in r.stderr
    assert "Traceback" not in r.stderr
    assert len([ln for ln in r.stderr.splitlines() if ln.startswith("error")]) == 1
    assert not (tmp_path / "hardware_profiles").exists()


def test_one_spoiled_timing_does_not_steer_the_fit() -> None:
    # A shared CPU spoils a timing now and then, too fast or too slow: the fit follows the
    # other sizes (log residuals with a soft-L1 loss), so large messages stay well predicted.
    alpha, beta = 400e-6, 1 / 1.5e9
    for spoil in (0.3, 3.0):
        times = [2 * alpha + s * beta for s in SIZES]
        times[5] *= spoil
        fit = fit_alpha_beta("all_reduce", 2, SIZES, times)
        assert fit.beta_s_per_byte == pytest.approx(beta, rel=0.05)
        assert fit.alpha_s == pytest.approx(alpha, rel=0.1)
        others = [r for i, r in enumerate(fit.residuals_rel) if i != 5]
        assert max(abs(r) for r in others) < 0.05


def test_speed_cv_recovered_from_block_times() -> None:
    from calibrate.fit import fit_speed_cv

    rng = np.random.default_rng(1)
    blocks = [list(0.1 * (1 + rng.normal(0, 0.05, 400))) for _ in range(2)]
    cv, n = fit_speed_cv(blocks)
    assert n == 800 and cv == pytest.approx(0.05, rel=0.1)
    # a device that is steadily slower than the other widens the spread
    slow = [blocks[0], [t * 1.1 for t in blocks[1]]]
    assert fit_speed_cv(slow)[0] > cv
    # identical blocks: no variation
    assert fit_speed_cv([[0.1] * 5, [0.1] * 5])[0] == pytest.approx(0.0, abs=1e-12)
    # one multi-second hiccup among the blocks barely moves it (a plain std would triple)
    hiccup = [blocks[0][:-1] + [2.0], blocks[1]]
    assert fit_speed_cv(hiccup)[0] == pytest.approx(cv, rel=0.05)
    with pytest.raises(ValueError):
        fit_speed_cv([[0.1]])


def _job_ops_for(frac: float, opt_frac: float, bw_gbps: float, op_s: float):
    """Probe-like job-op timings of a device whose memory-bound operations reach ``frac`` of
    the copy bandwidth (bytes counted as the simulator counts them) and optimizer ``opt_frac``."""
    from calibrate.scenario import inline_job_scenario
    from simulator.config.loading import resolve_dict
    from simulator.workload.memory import buffer_bytes_per_param, optimizer_bytes_per_param
    from simulator.workload.model import param_count
    from simulator.workload.ops import backward_ops, head_ops, layer_ops

    model = {"layers": 2, "hidden": 256, "heads": 4, "vocab": 4096, "seq": 128, "batch": 4}
    rs = resolve_dict(inline_job_scenario(model))
    per: dict[str, float] = {}
    for fwd in (layer_ops(rs), head_ops(rs)):
        for op in fwd + backward_ops(fwd):
            if op.kind == "memory":
                per[op.name] = op.bytes
    bw = bw_gbps * 1e9 * frac
    t = {
        "layernorm": (per["attn_norm"] + per["attn_norm_bwd"]) / bw + 2 * op_s,
        "gelu": (per["activation"] + per["activation_bwd"]) / bw + 2 * op_s,
        "add": per["residual_add"] / bw + op_s,
        "cross_entropy": (per["cross_entropy"] + per["cross_entropy_bwd"]) / bw + 2 * op_s,
    }
    n = param_count(rs.model, model["seq"])
    per_param = optimizer_bytes_per_param(rs) + buffer_bytes_per_param(rs)  # unsharded
    t_opt = n * per_param / (bw_gbps * 1e9 * opt_frac) + op_s
    ops = {k: {"op": k, "time_s": v} for k, v in t.items()}
    ops["optimizer"] = {"op": "adamw", "params": n, "time_s": t_opt}
    return {"job_ops": ops, "train": {"model": model}}


def test_job_memory_fractions_recovered() -> None:
    from calibrate.fit import job_memory_fit

    # residual_add_bwd is counted by the simulator at twice the forward's bytes; the probe times
    # one add for each, so give it its own weight: recover within a few per cent
    probe = _job_ops_for(0.4, 0.2, 50.0, 2e-6)
    fit = job_memory_fit(probe, 50.0, 2e-6)
    assert fit is not None
    assert fit["memory_fraction"] == pytest.approx(0.4, rel=0.15)
    assert fit["optimizer_fraction"] == pytest.approx(0.2, rel=1e-6)
    assert "as the simulator counts them" in fit["memory_what"]
    assert job_memory_fit({"train": probe["train"]}, 50.0, 2e-6) is None


def test_in_step_factor_recovered_and_applied() -> None:
    """The factor is the measured communication-free step over the simulated compute and
    optimizer time; a profile carrying it simulates that step at the measured time."""
    import copy

    from calibrate.fit import in_step_fit, simulated_compute_s
    from calibrate.scenario import inline_job_scenario

    model = {"layers": 2, "hidden": 256, "heads": 4, "vocab": 4096, "seq": 128, "batch": 4}
    gpu = inline_job_scenario(model)["cluster"]["gpu"]
    base = simulated_compute_s(gpu, model)
    assert base > 0
    train = {
        "model": model,
        "compute_step_median_s": 1.37 * base,
        "compute_step_times_s": [[1.37 * base] * 4, [1.37 * base] * 4],
        "compute_step_how": "synthetic",
    }
    fit = in_step_fit(gpu, train)
    assert fit is not None
    factor, what, alone = fit.factor, fit.what, fit.alone
    assert fit.weight_fraction is None  # timed at one batch size: no weight term
    assert factor == pytest.approx(1.37, rel=1e-9)
    assert alone is None  # the probe did not time the step alone on the host
    fit_alone = in_step_fit(gpu, {**train, "alone_compute_step_median_s": 1.21 * base})
    assert fit_alone is not None and fit_alone.alone == pytest.approx(1.21, rel=1e-9)
    assert "median of 8 training steps without communication (synthetic)" in what
    scaled = copy.deepcopy(gpu)
    scaled["efficiency"]["in_step_factor"] = {"value": factor, "source": what}
    assert simulated_compute_s(scaled, model) == pytest.approx(1.37 * base, rel=1e-9)
    one = copy.deepcopy(gpu)
    one["efficiency"]["in_step_factor"] = {"value": 1.0, "source": "identity"}
    assert simulated_compute_s(one, model) == base
    # a probe without the communication-free steps leaves the factor out
    assert in_step_fit(gpu, {"model": model}) is None
    assert in_step_fit(gpu, None) is None


@pytest.mark.parametrize("factor", [0.5, 0.9, 1.1, 2.0])
def test_in_step_factor_scales_compute_stream_only(factor: float) -> None:
    """Compute and optimizer time scale by the factor; DP communication does not."""
    import copy

    from calibrate.scenario import inline_job_scenario
    from simulator.config.loading import resolve_dict
    from simulator.simulate import simulate

    model = {"layers": 2, "hidden": 256, "heads": 4, "vocab": 4096, "seq": 128, "batch": 4}
    sc = inline_job_scenario(model)
    sc["cluster"]["gpus_per_node"] = 2
    sc["cluster"]["fabric"]["max_gpus"] = 2
    sc["training"]["global_batch"] = 8
    base = simulate(resolve_dict(sc), scaling=False).metrics
    sc2 = copy.deepcopy(sc)
    sc2["cluster"]["gpu"]["efficiency"]["in_step_factor"] = {"value": factor, "source": "test"}
    m = simulate(resolve_dict(sc2), scaling=False).metrics
    for cat in ("compute", "optimizer"):
        assert m.breakdown_s[cat] == pytest.approx(factor * base.breakdown_s[cat], rel=1e-9)
    assert m.breakdown_s["comm_dp"] == pytest.approx(base.breakdown_s["comm_dp"], rel=1e-9)
    assert m.busy_s + sum(m.idle_s.values()) == pytest.approx(m.step_time_s, rel=1e-9)
    assert (m.step_time_s > base.step_time_s) == (factor > 1)


def test_unresolved_bandwidth_is_a_lower_bound_not_a_huge_number() -> None:
    from calibrate.fit import RESOLUTION, fit_alpha_beta

    sizes = [1024, 4096, 16384, 65536]
    flat = [1.0e-3, 1.02e-3, 0.99e-3, 1.01e-3]  # latency only: no visible bandwidth term
    f = fit_alpha_beta("all_reduce", 2, sizes, flat)
    assert not f.resolved
    # The bandwidth term at the largest size is exactly the resolution floor of its time.
    b = 2 * (2 - 1) / 2
    assert f.beta_s_per_byte * b * sizes[-1] == pytest.approx(RESOLUTION * flat[-1])
    assert f.bandwidth_gbps < 1e3
    clear = fit_alpha_beta("all_reduce", 2, sizes, [1e-4 + s / 1e9 for s in sizes])
    assert clear.resolved and clear.bandwidth_gbps == pytest.approx(1.0, rel=0.05)


def test_a_curve_still_rising_at_the_largest_size_keeps_a_valid_profile() -> None:
    """A probe whose matmul throughput still climbs at its largest shape (or whose largest
    point ran slow) fits an asymptote above the best measured: the asymptote becomes the peak
    and the efficiency stays at most 1, the same curve in absolute terms."""
    from pathlib import Path

    from calibrate.fit import calibrate
    from simulator.config.hardware import GPUProfile

    file = Path(__file__).parents[1] / "benchmarks" / "results" / "probe-h100-2026-11-23.json"
    probe = json.loads(file.read_text())
    dtype = "fp32"  # the training dtype without a training job
    rows = [r for r in probe["matmul"] if r["dtype"] == dtype]
    big = max(r["flops"] for r in rows)
    top = max(r["tflops"] for r in rows)
    for r in rows:  # a rising curve, F/(F + 4·big), with the same best throughput at big
        r["tflops"] = 5 * top * r["flops"] / (r["flops"] + 4 * big)
    # the single-GPU device run timed no collectives: give it an all-reduce over NVLink
    probe["collectives"] = [
        {"op": "all_reduce", "group": "intra", "group_size": 2, "bytes": b,
         "time_s": 5e-6 + b / 300e9, "busbw_gbps": b / (5e-6 + b / 300e9) / 1e9}
        for b in (2**16, 2**20, 2**24)
    ]  # fmt: skip
    del probe["train"]  # no training job: the in-step factor is not what this tests
    cal = calibrate(probe, str(file), "rising")
    gpu = GPUProfile(**cal.gpu)  # validates: matmul_max within [1e-06, 1]
    m, h = gpu.efficiency.matmul_max.value, gpu.efficiency.matmul_half_flops.value
    assert m == 1.0
    peak = gpu.peak_flops(dtype) / 1e12
    for r in rows:
        assert peak * m * r["flops"] / (r["flops"] + h) == pytest.approx(r["tflops"], rel=0.01)
    assert "asymptote" in gpu.peak_tflops[dtype].source
    # An attention kernel timed faster than a causal kernel at the peak can run (12/7 of it in
    # the full-s x s count) is held there.
    probe["attention"] = dict(probe.get("attention") or {}, tflops=1e6)
    fast = GPUProfile(**calibrate(probe, str(file), "fast-attention").gpu)
    assert fast.efficiency.attention_max.value == pytest.approx(12 / 7)
