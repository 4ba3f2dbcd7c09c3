"""A board power limit below the TDP (``cluster.gpu.power_limit_w``): the tensor-core clock
falls as (limit / TDP)^(1/a), compute-bound kernels slow by exactly that, memory-bound ones
not at all, a step is never faster under a lower limit, MFU stays against the rated peak, and
an owned cluster's energy bill falls with the draw."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import REPO, fig, inline_scenario, run_cli
from test_cost import OWNED, cost, priced

from simulator.config.hardware import DEFAULT_CLOCK_EXP
from simulator.config.loading import load_scenario, resolve_dict
from simulator.engine.compute import OpTimer
from simulator.simulate import simulate
from simulator.workload.ops import Op

SC = REPO / "scenarios" / "llama3-8b-8xh100.yaml"


def _gpu(**fields: Any) -> Any:
    data = inline_scenario()
    data["cluster"]["gpu"]["sm_count"] = fig(132)
    data["cluster"]["gpu"].update({k: fig(v) for k, v in fields.items()})
    return resolve_dict(data).gpu


def test_clock_scale_follows_the_power_law() -> None:
    assert _gpu().clock_scale == 1.0
    assert _gpu(power_limit_w=700).clock_scale == 1.0  # the inline GPU's TDP
    assert _gpu(power_limit_w=350).clock_scale == pytest.approx(0.5 ** (1 / DEFAULT_CLOCK_EXP))
    assert _gpu(power_limit_w=350, power_clock_exponent=2.0).clock_scale == pytest.approx(0.5**0.5)


def test_the_h100_exponent_reproduces_its_two_datasheet_parts() -> None:
    """H100 NVL (400 W) has 1671/1979 of the SXM's (700 W) tensor peak on the same die."""
    rs = load_scenario(SC, ["cluster.gpu.power_limit_w=400"])
    assert rs.gpu.clock_scale == pytest.approx(1671 / 1979, rel=0.002)


def test_compute_bound_kernels_slow_by_the_clock_and_memory_bound_ones_do_not() -> None:
    free, capped = OpTimer(_gpu(), "bf16"), OpTimer(_gpu(power_limit_w=400), "bf16")
    scale = _gpu(power_limit_w=400).clock_scale
    n = 128 * 132
    t_free = free.gemm_time(1, n, n, n) - free.launch
    t_capped = capped.gemm_time(1, n, n, n) - capped.launch
    assert t_capped == pytest.approx(t_free / scale, rel=1e-12)
    attn = Op("attention", "attention", flops=1e13, bytes=1e6, kv_len=8192)
    assert capped.time(attn) - capped.launch == pytest.approx(
        (free.time(attn) - free.launch) / scale, rel=1e-12
    )
    mem = Op("x", "memory", bytes=1e9)
    assert capped.time(mem) == free.time(mem)


def test_a_lower_limit_is_never_faster_and_mfu_stays_against_the_rated_peak() -> None:
    steps, mfus = [], []
    for limit in (700, 600, 500, 400, 300, 200):
        rs = load_scenario(SC, [f"cluster.gpu.power_limit_w={limit}"])
        met = simulate(rs, scaling=False).metrics
        steps.append(met.step_time_s)
        mfus.append(met.mfu)
    plain = simulate(load_scenario(SC), scaling=False).metrics
    assert steps[0] == plain.step_time_s
    assert all(a < b for a, b in zip(steps, steps[1:], strict=False))
    # the same work against the same (rated) peak: MFU falls as the step grows
    for s, m in zip(steps, mfus, strict=True):
        assert m * s == pytest.approx(mfus[0] * steps[0], rel=1e-9)
    # compute is most of this step, but not all of it: slower by less than the clock
    clock = load_scenario(SC, ["cluster.gpu.power_limit_w=200"]).gpu.clock_scale
    assert steps[0] / clock > steps[-1] > steps[0]


def test_an_owned_clusters_gpus_draw_in_proportion_to_the_limit() -> None:
    full = cost(priced(OWNED), gpu_utilisation=1.0)
    data = priced(OWNED).raw
    data["cluster"]["gpu"]["power_limit_w"] = fig(350)
    half = cost(resolve_dict(data), gpu_utilisation=1.0)
    gpu_kw = 8 * 700 * 1.25 / 1000 * 0.10  # the test price: 700 W a GPU, PUE 1.25, $0.10/kWh
    node_kw = 1500 * 1.25 / 1000 * 0.10
    assert full.breakdown["energy"] == pytest.approx(gpu_kw + node_kw)
    assert half.breakdown["energy"] == pytest.approx(gpu_kw / 2 + node_kw)
    assert any("power limit" in a for a in half.assumptions)
    # an idle GPU draws far below any limit: the limit clips the busy draw only
    idle_full = cost(priced(OWNED), gpu_utilisation=0.0)
    idle_half = cost(resolve_dict(data), gpu_utilisation=0.0)
    assert idle_half.breakdown["energy"] == pytest.approx(idle_full.breakdown["energy"])


def test_the_limit_is_noted_in_the_result() -> None:
    res = run_cli(
        "simulate",
        "llama3-8b-8xh100",
        "--set",
        "cluster.gpu.power_limit_w=500",
        "--format",
        "json",
    )
    assert res.returncode == 0, res.stderr
    notes = json.loads(res.stdout)["notes"]
    assert any("500 W of their 700 W" in n and "0.903" in n for n in notes)


def test_a_limit_above_the_tdp_is_refused() -> None:
    res = run_cli("check", "llama3-8b-8xh100", "--set", "cluster.gpu.power_limit_w=800")
    assert res.returncode == 2
    assert "power_limit_w" in res.stderr and "700" in res.stderr
    assert "Traceback" not in res.stderr


def test_a_limit_on_a_gpu_of_unknown_tdp_is_refused() -> None:
    res = run_cli(
        "check",
        "llama3-8b-8xh100",
        "--set",
        "cluster.gpu.tdp_w=0",
        "--set",
        "cluster.gpu.power_limit_w=300",
    )
    assert res.returncode == 2
    assert "power_limit_w needs the board's tdp_w" in res.stderr
    assert "Traceback" not in res.stderr
