"""A parallel residual (GPT-J, GPT-NeoX, PaLM, Falcon): attention and MLP read the same layer
input and their row-parallel outputs are added and reduced once over TP.

Per layer and micro-batch the forward pass runs one TP reduction instead of two (and so does a
full recomputation of it); the backward still reduces each branch's input gradient. With
sequence parallelism the forward's reduce-scatter (and its backward all-gather) merge, while
each branch still gathers its input. Without TP nothing changes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from simulator.config.loading import load_scenario
from simulator.engine.periodic import run_periodic
from simulator.engine.sim import run_engine
from simulator.metrics import compute_metrics
from simulator.simulate import simulate
from simulator.workload.comm import step_comm
from simulator.workload.presets import PRESETS

ROOT = Path(__file__).resolve().parents[1]
# GPT 18.4B, TP8 on one DGX A100, Megatron-LM 2021 (no TP overlap), full recomputation.
ROW = ROOT / "scenarios/validation/sc21-script/sc21-18.4b-script.yaml"


def _tp_calls(overrides: list[str]) -> Counter[tuple[str, str]]:
    rs = load_scenario(ROW, overrides)
    per_layer = rs.micro_batches * rs.stage_layers()[0]
    calls: Counter[tuple[str, str]] = Counter()
    for item in step_comm(rs):
        if item.group == "tp":
            calls[(item.phase, item.op)] += item.calls
    # the layers' share, per layer and micro-batch (the output layer adds its own)
    return Counter({k: round(v / per_layer) for k, v in calls.items()})


def test_one_forward_all_reduce_per_layer_without_sequence_parallelism() -> None:
    plain = _tp_calls(["model.parallel_residual=false"])
    par = _tp_calls(["model.parallel_residual=true"])
    assert (plain["forward", "all_reduce"], par["forward", "all_reduce"]) == (2, 1)
    assert (plain["recompute", "all_reduce"], par["recompute", "all_reduce"]) == (2, 1)
    assert plain["backward", "all_reduce"] == par["backward", "all_reduce"] == 2


def test_sequence_parallel_merges_the_reduce_scatter_only() -> None:
    sp = ["parallelism.sequence_parallel=true"]
    plain = _tp_calls([*sp, "model.parallel_residual=false"])
    par = _tp_calls([*sp, "model.parallel_residual=true"])
    assert (plain["forward", "reduce_scatter"], par["forward", "reduce_scatter"]) == (2, 1)
    # (and in both, the two column-parallel layers' re-gathers of the sequence shard they kept)
    assert (plain["backward", "all_gather"], par["backward", "all_gather"]) == (2 + 2, 1 + 2)
    assert plain["forward", "all_gather"] == par["forward", "all_gather"] == 2
    assert plain["backward", "reduce_scatter"] == par["backward", "reduce_scatter"] == 2


def test_exposed_tp_communication_falls_by_a_third() -> None:
    """No TP overlap (Megatron-LM 2021): 2 + 2 + 2 reductions per layer (forward, recompute,
    backward) become 1 + 1 + 2, all of the same size."""
    plain = simulate(load_scenario(ROW, ["model.parallel_residual=false"]), scaling=False)
    par = simulate(load_scenario(ROW, ["model.parallel_residual=true"]), scaling=False)
    tp0, tp1 = plain.metrics.breakdown_s["comm_tp"], par.metrics.breakdown_s["comm_tp"]
    assert tp1 == pytest.approx(tp0 * 4 / 6, rel=0.03)
    assert par.metrics.step_time_s < plain.metrics.step_time_s
    assert par.metrics.breakdown_s["compute"] == pytest.approx(
        plain.metrics.breakdown_s["compute"], rel=1e-9
    )


def test_without_tensor_parallelism_nothing_changes() -> None:
    over = ["parallelism.tp=1", "parallelism.pp=8", "training.micro_batch=1"]
    plain = simulate(load_scenario(ROW, [*over, "model.parallel_residual=false"]), scaling=False)
    par = simulate(load_scenario(ROW, [*over, "model.parallel_residual=true"]), scaling=False)
    assert par.metrics.step_time_s == plain.metrics.step_time_s


def test_fast_path_equals_the_event_engine() -> None:
    rs = load_scenario(ROW, ["model.parallel_residual=true", "parallelism.pp=2",
                             "parallelism.tp=4", "training.micro_batch=2"])  # fmt: skip
    exact, fast = run_engine(rs), run_periodic(rs)
    me, mf = compute_metrics(rs, exact), compute_metrics(rs, fast)
    assert mf.step_time_s == pytest.approx(me.step_time_s, rel=5e-3)
    for k, v in me.breakdown_s.items():
        assert mf.breakdown_s[k] == pytest.approx(v, abs=5e-3 * me.step_time_s), k


def test_gpt_neox_preset_matches_its_published_size() -> None:
    from simulator.workload.model import param_count

    m = PRESETS["gpt-neox-20b"]
    assert m.parallel_residual
    assert param_count(m) == pytest.approx(m.published_params, rel=1e-3)
