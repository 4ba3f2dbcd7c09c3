"""Activation offloading (Megatron-Core's cpu_offloading_num_layers): the offloaded layers'
saved activations leave GPU memory but for the one in transit, the copies hide behind the
next layer's pass over a fast enough host link and stall the step by what they take beyond it
over a slow one, and the layouts Megatron-Core refuses are refused."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import REPO

from simulator.config.loading import load_scenario
from simulator.errors import UserError
from simulator.simulate import simulate
from simulator.workload.activations import activation_bytes_per_layer
from simulator.workload.memory import memory_report

GB200 = REPO / "scenarios" / "validation" / "nemo-gb200-fp8" / "mbridge-llama3-70b-64xgb200.yaml"


def _run(*sets: str) -> Any:
    rs = load_scenario(GB200, list(sets))
    return rs, simulate(rs, scaling=False).metrics


@pytest.mark.parametrize("n", [1, 10, 40, 79])
def test_offloaded_layers_leave_gpu_memory_but_one(n: int) -> None:
    rs0 = load_scenario(GB200, ["parallelism.offload_activation_layers=0"])
    rs = load_scenario(GB200, [f"parallelism.offload_activation_layers={n}"])
    saved = memory_report(rs0).peak.activations_gb - memory_report(rs).peak.activations_gb
    assert saved * 1e9 == pytest.approx((n - 1) * activation_bytes_per_layer(rs), rel=1e-9)


def test_a_fast_enough_host_link_hides_the_copies() -> None:
    _, off = _run("cluster.gpu={profile: gb200, host_link_gbps: 900}")
    _, none = _run("parallelism.offload_activation_layers=0")
    assert off.breakdown_s["offload"] == 0.0
    assert off.step_time_s == pytest.approx(none.step_time_s, rel=1e-12)
    # at the superchip's shared NVLink-C2C the copies stall the step a little (6.5% of the
    # 70B row's step since Blackwell attention is timed from measured cuDNN, 5% before)
    _, c2c = _run()
    assert 0 < c2c.breakdown_s["offload"] < 0.1 * c2c.step_time_s


def test_a_stalled_offload_draws_in_the_trace(tmp_path: Any) -> None:
    from conftest import run_cli

    trace = tmp_path / "t.json"
    res = run_cli("simulate", str(GB200), "--no-scaling", "--trace", str(trace), "--format", "json")
    assert res.returncode == 0, res.stderr
    import json

    names = {e.get("name") for e in json.loads(trace.read_text())["traceEvents"]}
    assert "activation offload" in names


def test_a_slow_host_link_stalls_in_proportion_to_the_layers_offloaded() -> None:
    slow = "cluster.gpu={profile: gb200, host_link_gbps: 2}"
    _, a = _run(slow, "parallelism.offload_activation_layers=10")
    _, b = _run(slow, "parallelism.offload_activation_layers=20")
    _, none = _run(slow, "parallelism.offload_activation_layers=0")
    assert a.breakdown_s["offload"] > 0
    assert b.breakdown_s["offload"] == pytest.approx(2 * a.breakdown_s["offload"], rel=1e-9)
    # with one micro-batch in flight the stall is on the step's critical path; DP collectives
    # that run beside the stall rather than beside compute slow nothing down
    less_overlap = none.breakdown_s["overlap"] - b.breakdown_s["overlap"]
    assert less_overlap >= -1e-9
    assert b.step_time_s - none.step_time_s == pytest.approx(
        b.breakdown_s["offload"] - less_overlap, rel=1e-6
    )
    _, at2 = _run(slow)
    _, at1 = _run("cluster.gpu={profile: gb200, host_link_gbps: 1}")
    assert at1.step_time_s > at2.step_time_s > none.step_time_s  # a slower link never helps


@pytest.mark.parametrize(
    ("sets", "says"),
    [
        (["parallelism.offload_activation_layers=80"], "leaves none"),
        (["parallelism.pp=2", "training.global_batch=256"], "pipeline parallelism"),
        (["parallelism.recompute=full"], "recomputation"),
        (["cluster.gpu=b200"], "host link"),
    ],
)
def test_layouts_megatron_refuses_are_refused(sets: list[str], says: str) -> None:
    with pytest.raises(UserError) as exc:
        load_scenario(GB200, sets)
    assert exc.value.path == "parallelism.offload_activation_layers"
    assert says in exc.value.message


def test_check_offers_offloading_where_it_makes_a_layout_fit() -> None:
    from simulator.check import check

    rs = load_scenario(
        REPO / "scenarios" / "llama3-8b-8xh100.yaml",
        # (TP 8 fills the node, so neither more TP nor CP is on offer)
        [
            "training.micro_batch=4",
            "parallelism.recompute=none",
            "training.seq_len=16384",
            "parallelism.tp=8",
        ],
    )
    levers = check(rs).levers
    offload = [lv for lv in levers if any("offload_activation_layers" in c for c in lv.change)]
    assert offload and all(lv.peak_gb <= rs.gpu.capacity_gb for lv in offload)
