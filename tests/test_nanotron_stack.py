"""The nanotron stack's mechanisms: pipeline stages balanced by nanotron's cost rule
(config.stage_split), host time per TP collective call (software host_us_per_collective), and
the host running ahead of the GPU across collectives (engine.program)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from conftest import write_yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.config.loading import load_scenario
from simulator.config.stage_split import cost_thresholds
from simulator.config.workload import ModelSpec
from simulator.engine.compute import OpTimer
from simulator.engine.program import build_program
from simulator.errors import UserError
from simulator.simulate import simulate
from simulator.workload.ops import Op

ROOT = Path(__file__).resolve().parents[1]
ONE_NODE = ROOT / "scenarios" / "validation" / "ultrascale-nanotron-1node"
TP8 = ONE_NODE / "nanotron-1b-dp1-tp8-pp1-mb1-z0.yaml"
TP1 = ONE_NODE / "nanotron-1b-dp8-tp1-pp1-mb1-z0.yaml"
# nanotron scripts/scaling_benchmarks.py @0e0a27ea
NT_1B = ModelSpec(layers=16, hidden=2048, heads=32, ffn_hidden=8192, vocab=131072)
NT_3B = ModelSpec(layers=28, hidden=3072, heads=32, ffn_hidden=8192, vocab=131072)


@pytest.mark.parametrize(
    ("model", "pp", "split"),
    [
        # nanotron models/base.py build_model worked by hand: the 131k-entry output layer
        # weighs four 1B layers, so the last ranks take few or none
        (NT_1B, 2, [11, 5]),
        (NT_1B, 4, [6, 5, 5, 0]),
        (NT_1B, 8, [3, 3, 2, 3, 2, 3, 0, 0]),
        (NT_3B, 2, [16, 12]),
        (NT_3B, 4, [8, 8, 8, 4]),
        (NT_3B, 8, [4, 4, 4, 4, 4, 4, 4, 0]),
    ],
)
def test_cost_split_places_layers_as_nanotron_does(model: ModelSpec, pp: int, split) -> None:
    assert cost_thresholds(model, pp) == split


@settings(max_examples=200, deadline=None)
@given(
    layers=st.integers(1, 200),
    hidden=st.sampled_from([512, 1024, 2048, 4096, 8192]),
    vocab=st.integers(1, 300_000),
    pp=st.integers(1, 64),
)
def test_cost_split_keeps_every_layer_in_order(layers: int, hidden: int, vocab: int, pp: int):
    m = ModelSpec(layers=layers, hidden=hidden, heads=8, ffn_hidden=4 * hidden, vocab=vocab)
    split = cost_thresholds(m, pp)
    assert len(split) == pp and sum(split) == layers and min(split) >= 0
    # a rank holds at most one layer more than its share of the cost allows
    layer = 4 * hidden * hidden + 3 * 4 * hidden * hidden
    share = (layer * layers + vocab * hidden) / pp
    assert max(split) <= share / layer + 1


def _scenario(path: Path, **par) -> dict:
    data = copy.deepcopy(yaml.safe_load(path.read_text()))
    data["parallelism"].update(par)
    return data


def test_a_cost_split_needs_no_pp_that_divides_the_layers(tmp_path: Path) -> None:
    data = _scenario(TP1, dp=2, pp=3)  # 16 layers over 3 ranks, on 6 GPUs
    data["cluster"]["gpus_per_node"] = 6
    rs = load_scenario(write_yaml(tmp_path / "nt.yaml", data))
    assert rs.stage_layers() == cost_thresholds(rs.model, 3)
    assert simulate(rs, scaling=False).metrics.step_time_s > 0
    data["software"] = "pytorch-eager"
    with pytest.raises(UserError, match="does not divide the 16 layers"):
        load_scenario(write_yaml(tmp_path / "eager.yaml", data))


def test_a_listed_split_still_wins_over_the_stacks_rule(tmp_path: Path) -> None:
    data = _scenario(TP1, dp=2, pp=4, stage_layers=[4, 4, 4, 4])
    rs = load_scenario(write_yaml(tmp_path / "nt.yaml", data))
    assert rs.stage_layers() == [4, 4, 4, 4]
    # the cost split takes the output layer's weight off the last rank: faster than even
    even = simulate(rs, scaling=False).metrics.step_time_s
    data["parallelism"].pop("stage_layers")
    rs = load_scenario(write_yaml(tmp_path / "nt2.yaml", data))
    assert simulate(rs, scaling=False).metrics.step_time_s < even


def _step(path: Path, host_us: float) -> float:
    src = "test value: how the mechanism responds, not a profile figure"
    rs = load_scenario(
        path, [f"software.host_us_per_collective={{value: {host_us}, source: '{src}'}}"]
    )
    return simulate(rs, scaling=False).metrics.step_time_s


def test_host_time_per_collective_binds_only_where_tp_collectives_run() -> None:
    # TP 1: no layer collective, so nanotron's per-call host time changes nothing
    assert _step(TP1, 0.0) == pytest.approx(_step(TP1, 2000.0), rel=1e-12)
    # TP 8 at micro-batch 1: ten calls per layer; slower with the host time, never faster
    steps = [_step(TP8, us) for us in (0.0, 100.0, 360.0, 1000.0)]
    assert steps == sorted(steps) and steps[-1] > 2 * steps[0]
    # host-bound limit: at 1 ms per call the step takes at least micro-batches x layers x
    # ten calls x 1 ms, and not much more (the GPU work hides behind the host's)
    floor = 256 * 16 * 10 * 1e-3
    assert floor <= steps[-1] <= 1.25 * floor


def _timer(host_us: float) -> OpTimer:
    rs = load_scenario(TP8)
    return OpTimer(rs.gpu, "bf16", host_us_per_kernel=host_us)


def test_the_host_issues_ahead_while_the_gpu_runs_an_exposed_collective() -> None:
    h, n, t = 50e-6, 20, 5e-3  # 20 tiny kernels each side of a 5 ms collective
    tiny = [Op(f"k{i}", "memory", bytes=1.0) for i in range(n)]
    coll = Op("ag", "collective", collective="all_gather", group="tp", msg_bytes=1.0)
    prog = build_program([*tiny, coll, *tiny], _timer(h * 1e6), {"tp:all_gather:1.0": t})
    total = sum(i.dur for i in prog.items)
    # before the collective the host paces the GPU (n·h); during it the host issues the next
    # n kernels (n·h < t), so they run back to back at the GPU's pace right after it
    assert total == pytest.approx(n * h + t, rel=0.02)
    assert total < 2 * n * h + t - 0.5 * n * h


def test_the_loss_moves_what_the_stack_says_per_logit() -> None:
    from simulator.workload.ops import backward_ops, head_ops

    rs = load_scenario(TP1)
    logits = 4096 * 131072
    ce = next(o for o in head_ops(rs) if o.name == "cross_entropy")
    bwd = next(o for o in backward_ops(head_ops(rs)) if o.name == "cross_entropy_bwd")
    # nanotron's fp32 cast, max, subtract, exp, sum and divide; mul_ and the cast back
    assert (ce.bytes, bwd.bytes) == (38 * logits, 14 * logits)
    plain = load_scenario(TP1, ["software=pytorch-eager"])
    ce = next(o for o in head_ops(plain) if o.name == "cross_entropy")
    assert ce.bytes == (2 + 4 + 4) * logits
    # more traffic is never faster
    src = "test value: how the mechanism responds, not a profile figure"
    heavier = load_scenario(TP1, [f"software.loss_traffic={{value: [76, 28], source: '{src}'}}"])
    assert simulate(heavier, scaling=False).metrics.step_time_s > _step(TP1, 0.0)


def test_time_waiting_for_the_host_is_its_own_idle_category() -> None:
    src = "test value: how the mechanism responds, not a profile figure"
    fast = load_scenario(TP8, ["software.host_us_per_collective={value: 0, source: '" + src + "'}"])
    slow = load_scenario(TP8, [f"software.host_us_per_collective={{value: 1000, source: '{src}'}}"])
    a, b = (simulate(rs, scaling=False).metrics for rs in (fast, slow))
    for m in (a, b):
        assert sum(m.breakdown_s.values()) == pytest.approx(m.step_time_s, rel=1e-9)
    # the GPUs' own work is the same; what the host adds shows as its wait, not as compute
    assert b.breakdown_s["compute"] == pytest.approx(a.breakdown_s["compute"], rel=0.01)
    assert b.breakdown_s["host"] > 0.7 * b.step_time_s
    assert b.mfu < a.mfu and b.busy_s == pytest.approx(a.busy_s, rel=0.01)


def test_a_cost_split_that_leaves_a_rank_empty_is_refused(tmp_path: Path) -> None:
    # a million-entry output layer outweighs the 16 layers: PP 8 runs out of blocks by rank 5
    data = _scenario(TP1, dp=1, pp=8)
    data["model"]["vocab"] = 1_000_000
    with pytest.raises(UserError, match=r"leaves pipeline ranks 5, 6, 7 without any block") as e:
        load_scenario(write_yaml(tmp_path / "nt.yaml", data))
    assert e.value.path == "parallelism.pp" and "PP 4 or less" in (e.value.hint or "")
    # the 1B model at PP 8 gives its last two ranks the output layer and the loss: allowed
    data["model"]["vocab"] = 131072
    assert load_scenario(write_yaml(tmp_path / "ok.yaml", data)).stage_layers()[-2:] == [0, 0]


def test_a_host_bound_step_says_so_and_names_the_levers() -> None:
    note = next(n for n in simulate(load_scenario(TP8), scaling=False).notes if "host-bound" in n)
    assert "310 us per collective call" in note and "larger micro-batch" in note
    # data parallelism at TP 1 is GPU-bound: no such note
    assert not any("host-bound" in n for n in simulate(load_scenario(TP1), scaling=False).notes)


def test_a_host_time_per_call_out_of_range_is_refused() -> None:
    src = "a test of a value out of range"
    for bad in (-5, 1e9):
        with pytest.raises(UserError, match="host_us_per_collective must be within"):
            load_scenario(
                TP8, [f"software.host_us_per_collective={{value: {bad}, source: '{src}'}}"]
            )


def test_an_uneven_pipeline_shows_its_layers_per_stage() -> None:
    from conftest import run_cli

    path = ONE_NODE / "nanotron-1b-dp2-tp1-pp4-mb1-z0.yaml"
    assert load_scenario(path).layout()["stage_layers"] == [6, 5, 5, 0]
    out = run_cli("simulate", str(path), "--no-scaling")
    assert out.returncode == 0 and "layers per stage 6/5/5/0" in " ".join(out.stdout.split())
    # an even pipeline says nothing of it
    assert "stage_layers" not in load_scenario(path, ["software=pytorch-eager"]).layout()


def test_its_1f1b_engine_needs_pp_minus_one_micro_batches() -> None:
    """nanotron's OneForwardOneBackwardPipelineEngine asserts micro-batches >= PP - 1: fewer is
    refused on the batch, with the ways out; exactly PP - 1, or its all-forward-all-backward
    engine (gpipe), runs."""
    path = ONE_NODE / "nanotron-1b-dp1-tp1-pp8-mb1-z0.yaml"  # 256 micro-batches of 1
    with pytest.raises(UserError, match=r"needs at least PP-1 = 7 micro-batches") as e:
        load_scenario(path, ["training.global_batch=6"])
    assert e.value.path == "training.global_batch"
    assert "gpipe" in (e.value.hint or "") and "1.16667x" in (e.value.hint or "")
    assert load_scenario(path, ["training.global_batch=7"]).micro_batches == 7
    gpipe = ['parallelism.pp_schedule={"kind": "gpipe"}', "training.global_batch=6"]
    assert load_scenario(path, gpipe).micro_batches == 6
    # a stack without the rule runs the short 1F1B pipeline
    assert load_scenario(path, ["training.global_batch=6", "software=pytorch-eager"])


@pytest.mark.parametrize(
    ("fabric", "gpu", "gpus", "cp", "tp"),
    [
        ("pcie5-switch", "h100-pcie-80gb", 2, 2, 1),
        ("pcie5-switch", "h100-pcie-80gb", 8, 2, 2),
        ("nvlink4-nvswitch", "h100-sxm-80gb", 8, 4, 1),
        ("nvlink4-nvswitch", "h100-sxm-80gb", 8, 2, 2),
    ],
)
def test_a_context_parallel_ring_under_a_host_bound_stack_is_timed_alike_in_both_modes(
    fabric: str, gpu: str, gpus: int, cp: int, tp: int
) -> None:
    """With host time around each collective call, a CP ring's second collective is issued
    after a span of its own, so it starts under that span: the analytic twin symmetric mode
    runs took the ring's collectives as starting together behind the attention, 1-3% off the
    event engine run through the flows (--full)."""
    from simulator.config.loading import resolve_dict

    data = {
        "name": "cp-ring-host",
        "cluster": {"gpu": gpu, "gpus_per_node": gpus, "nodes": 1, "fabric": fabric},
        "model": {"name": "small", "layers": 4, "hidden": 512, "heads": 4, "vocab": 1000},
        "training": {"seq_len": 4096, "global_batch": 4, "micro_batch": 1, "precision": "bf16"},
        "parallelism": {"cp": cp, "tp": tp},
        "software": "nanotron",
        "run": {"stragglers": "off"},
    }
    sym = simulate(resolve_dict(copy.deepcopy(data)), scaling=False)
    full = simulate(resolve_dict(copy.deepcopy(data)), full=True, scaling=False)
    assert sym.metrics.mode == "symmetric"
    assert full.metrics.step_time_s == pytest.approx(sym.metrics.step_time_s, rel=1e-9)
    assert full.as_dict()["breakdown_s"]["comm_cp"] == pytest.approx(
        sym.as_dict()["breakdown_s"]["comm_cp"], rel=1e-9, abs=1e-12
    )
