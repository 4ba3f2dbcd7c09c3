"""PyTorch DDP's gradient bucket copies (`parallelism.dp_bucket_copy`): the copy into the
buckets during backward and back after the reduction, the second gradient buffer in memory, and
the error paths."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli, write_yaml
from test_engine import assert_accounting, scenario, sim
from test_stragglers import with_stragglers

from simulator.config.loading import resolve_dict
from simulator.engine.compute import OpTimer
from simulator.engine.stragglers import pace
from simulator.errors import UserError
from simulator.workload.comm import grad_bytes_per_param
from simulator.workload.memory import GB, memory_report, stage_params
from simulator.workload.model import param_breakdown
from simulator.workload.ops import Op


def with_copy(data: dict[str, Any], on: bool = True) -> dict[str, Any]:
    d = copy.deepcopy(data)
    d["parallelism"]["dp_bucket_copy"] = on
    return d


def copy_times(data: dict[str, Any], stage: int = 0) -> tuple[float, float]:
    """(copy-in, copy-out) seconds of one rank of ``stage`` per step, from the OpTimer: each
    layer's gradients and the embedding's / head's copied into the buckets once (2 × bytes: read
    and write, one kernel each), then the whole stage's gradients copied back (one kernel)."""
    rs = resolve_dict(data)
    timer = OpTimer(rs.gpu, rs.training.precision)
    g = grad_bytes_per_param(rs)
    pb = param_breakdown(rs.model, rs.training.seq_len)
    layer = (pb.attention_per_layer + pb.mlp_per_layer) / rs.tp + pb.norms_per_layer
    parts = [layer] * rs.stage_layers()[stage]
    if stage == 0:
        parts.append(pb.embedding / rs.tp + pb.positions)
    if stage == rs.pp - 1:
        parts.append((pb.lm_head or (pb.embedding if rs.pp > 1 else 0)) / rs.tp + pb.final_norm)
    t_in = sum(timer.time(Op("copy", "memory", bytes=2 * p * g)) for p in parts)
    t_out = timer.memory_time(2 * stage_params(rs, stage) * g)
    return t_in, t_out


DP8 = scenario(1, 8, micro_batches=4)
LAYOUTS = {
    "dp8": DP8,
    "dp16-2nodes": scenario(2, 8, micro_batches=2),
    "tp2-pp2-dp4": scenario(2, 8, tp=2, pp=2, micro_batches=4),
    "interleaved": scenario(
        2, 4, pp=2, micro_batches=4, pp_schedule={"kind": "interleaved", "virtual_stages": 2}
    ),
}


def test_default_is_off_and_unchanged() -> None:
    base = scenario(2, 8, tp=2, pp=2, micro_batches=4)
    assert resolve_dict(base).parallelism.dp_bucket_copy is False
    a, b = sim(base), sim(with_copy(base, on=False))
    assert a.metrics.step_time_s == b.metrics.step_time_s
    assert a.metrics.breakdown_s == b.metrics.breakdown_s
    assert memory_report(resolve_dict(base)).peak.grad_buckets_gb == 0.0


@pytest.mark.parametrize("full", [False, True])
def test_without_overlap_the_step_grows_by_both_copies(full: bool) -> None:
    base = scenario(1, 8, micro_batches=4, overlap={"dp_grad": False})
    off, on = sim(base, full=full), sim(with_copy(base), full=full)
    t_in, t_out = copy_times(base)
    assert t_in > 0 and t_out > 0
    assert off.metrics.breakdown_s["data_stall"] == on.metrics.breakdown_s["data_stall"] == 0.0
    # The copy-in runs once per step (the last micro-batch's backward), not per micro-batch.
    assert on.metrics.step_time_s - off.metrics.step_time_s == pytest.approx(t_in + t_out, rel=1e-9)
    assert on.metrics.breakdown_s["compute"] - off.metrics.breakdown_s["compute"] == (
        pytest.approx(t_in + t_out, rel=1e-9)
    )
    assert on.metrics.breakdown_s["comm_dp"] == pytest.approx(
        off.metrics.breakdown_s["comm_dp"], rel=1e-9
    )
    assert_accounting(on)


@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_busy_grows_by_the_copies_and_accounting_holds(name: str, overlap: bool) -> None:
    base = copy.deepcopy(LAYOUTS[name])
    base["parallelism"]["overlap"] = {"dp_grad": overlap}
    off, on = sim(base), sim(with_copy(base))
    assert_accounting(on)
    for s in range(resolve_dict(base).pp):
        t_in, t_out = copy_times(base, s)
        key = f"stage{s}"
        grew = on.metrics.per_class[key]["compute"] - off.metrics.per_class[key]["compute"]
        assert grew == pytest.approx(t_in + t_out, rel=1e-9), key
    # Overlapped or not, both copies sit on the compute stream: the step grows by at least the
    # copy-out (after the last reduction) and never by more than the two copies, plus what the
    # reductions they move slow the compute they now overlap by (the ``overlap`` category).
    t_in, t_out = copy_times(base)
    grew = on.metrics.step_time_s - off.metrics.step_time_s
    assert grew >= t_out * (1 - 1e-9)
    if resolve_dict(base).pp == 1:
        slowed = on.metrics.breakdown_s["overlap"] - off.metrics.breakdown_s["overlap"]
        assert grew <= (t_in + t_out + max(0.0, slowed)) * (1 + 1e-9)


@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_symmetric_mode_equals_full_mode(name: str, overlap: bool) -> None:
    data = with_copy(LAYOUTS[name])
    data["parallelism"]["overlap"] = {"dp_grad": overlap}
    a, b = sim(data), sim(data, full=True)
    assert a.metrics.step_time_s == pytest.approx(b.metrics.step_time_s, rel=1e-9)
    for cat, v in a.metrics.breakdown_s.items():
        assert v == pytest.approx(b.metrics.breakdown_s[cat], rel=1e-9, abs=1e-15), cat


def test_one_gpu_is_unchanged() -> None:
    base = scenario(1, 1, micro_batches=4)
    assert resolve_dict(with_copy(base)).dp == 1  # not an error at dp = 1
    a, b = sim(base), sim(with_copy(base))
    assert a.metrics.step_time_s == b.metrics.step_time_s
    assert a.metrics.breakdown_s == b.metrics.breakdown_s
    assert memory_report(resolve_dict(with_copy(base))).peak.grad_buckets_gb == 0.0


def test_stragglers_stretch_the_copies_like_compute() -> None:
    base = with_stragglers(scenario(1, 8, micro_batches=2, overlap={"dp_grad": False}), cv=0.05)
    off, on = sim(base), sim(with_copy(base))
    assert_accounting(on)
    t_in, t_out = copy_times(base)
    f = pace(resolve_dict(base))
    assert f > 1
    assert on.metrics.busy_s - off.metrics.busy_s == pytest.approx(t_in + t_out, rel=1e-9)
    assert on.metrics.step_time_s - off.metrics.step_time_s == pytest.approx(
        f * (t_in + t_out), rel=1e-9
    )


def test_trace_shows_both_copies_on_the_compute_stream() -> None:
    res = sim(with_copy(DP8), trace=True)
    assert res.engine.trace is not None
    names = {(e["name"], e["tid"]) for e in res.engine.trace if e.get("ph") == "X"}
    assert ("grad_bucket_copy_in", 1) in names  # thread 1: the compute stream
    assert ("grad_bucket_copy_out", 1) in names
    # once per step per layer (8) and for the embedding and the head: not per micro-batch
    copies = [e for e in res.engine.trace if e.get("name") == "grad_bucket_copy_in"]
    assert len(copies) == 8 + 2


@pytest.mark.parametrize("pp", [1, 2])
def test_memory_grows_by_the_gradient_bytes(pp: int) -> None:
    base = scenario(1, 8, pp=pp, micro_batches=4)
    off, on = memory_report(resolve_dict(base)), memory_report(resolve_dict(with_copy(base)))
    rs = resolve_dict(base)
    for a, b in zip(off.stages, on.stages, strict=True):
        grads = stage_params(rs, a.stage) * grad_bytes_per_param(rs) / GB
        assert b.grad_buckets_gb == pytest.approx(grads, rel=1e-12)
        assert b.grad_buckets_gb == pytest.approx(b.gradients_gb, rel=1e-12)
        assert b.total_gb - a.total_gb == pytest.approx(grads, rel=1e-12)
    assert sim(with_copy(base)).metrics.memory_gb_per_gpu > sim(base).metrics.memory_gb_per_gpu


def test_check_table_labels_the_buckets(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "ddp.yaml", with_copy(DP8))
    r = run_cli("check", str(path))
    assert r.returncode == 0, r.stderr
    assert "gradient buckets (DDP copy)" in r.stdout
    plain = run_cli("check", str(write_yaml(tmp_path / "plain.yaml", DP8)))
    assert "gradient buckets" not in plain.stdout


@pytest.mark.parametrize(
    "sharding",
    [{"kind": "zero", "stage": 1}, {"kind": "zero", "stage": 3}, {"kind": "fsdp"}],
    ids=["zero1", "zero3", "fsdp"],
)
def test_sharding_with_bucket_copy_is_a_user_error(sharding: dict[str, Any]) -> None:
    data = with_copy(scenario(1, 8, sharding=sharding))
    with pytest.raises(UserError) as exc:
        resolve_dict(data)
    assert exc.value.path == "parallelism.dp_bucket_copy"
    assert "dp_bucket_copy: false" in str(exc.value)


def test_cli_zero1_with_bucket_copy_exits_2(tmp_path: Path) -> None:
    data = with_copy(scenario(1, 8, sharding={"kind": "zero", "stage": 1}))
    path = write_yaml(tmp_path / "bad.yaml", data)
    r = run_cli("simulate", str(path))
    assert r.returncode == 2
    assert "parallelism.dp_bucket_copy" in r.stderr
    assert str(path) in r.stderr
    assert "Traceback" not in r.stderr
    ok = run_cli("simulate", str(path), "--set", "parallelism.dp_bucket_copy=false")
    assert ok.returncode == 0, ok.stderr


def test_levers_offer_turning_the_copy_off() -> None:
    from simulator.check import find_levers

    base = scenario(1, 8, micro_batches=1)
    lo = memory_report(resolve_dict(base)).peak.total_gb
    hi = memory_report(resolve_dict(with_copy(base))).peak.total_gb
    usable = {"value": (lo + hi) / 2, "source": "between the two peaks"}
    base["cluster"]["gpu"] = {"profile": "h100-sxm-80gb", "memory_usable_gb": usable}
    rs = resolve_dict(with_copy(base))
    assert not memory_report(rs).fits and memory_report(resolve_dict(base)).fits
    levers = find_levers(rs)
    assert ["parallelism.dp_bucket_copy=false"] in [lv.change for lv in levers]


def test_probe_job_uses_ddp_defaults() -> None:
    from calibrate.scenario import inline_job_scenario, job_scenario

    cfg = {"layers": 2, "hidden": 64, "heads": 2, "vocab": 128, "seq": 16, "batch": 2}
    assert job_scenario("x", cfg, 2)["parallelism"]["dp_bucket_copy"] is True
    rs = resolve_dict(inline_job_scenario(cfg))  # one rank: allowed, and acts on nothing
    assert rs.dp == 1 and rs.parallelism.dp_bucket_copy


def test_check_lists_cheap_levers_before_full_recomputation() -> None:
    """The levers come in the order of what they usually cost: sharding and pipeline depth
    before more tensor parallelism, ZeRO-3 and full recomputation last (it redoes a forward)."""
    from conftest import REPO

    from simulator.check import _usual_cost, find_levers
    from simulator.config.loading import load_scenario

    rs = load_scenario(
        REPO / "scenarios" / "llama3-70b-64xh100.yaml",
        ["parallelism.tp=4", "cluster.nodes=16"],
    )
    levers = find_levers(rs)
    assert len(levers) >= 3
    costs = [max(_usual_cost(c) for c in lv.change) for lv in levers]
    assert costs == sorted(costs)
    assert "recompute=full" not in str(levers[0].change)
