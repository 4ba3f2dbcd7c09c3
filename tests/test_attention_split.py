"""A fused attention kernel's forward and backward: the profile's efficiency times the pair,
and its forward takes ``attention_forward_share`` of that time (the backward recomputes the
scores: five products to the forward's two). What a lone forward costs (recomputation) follows
from the share; a device-bound step that recomputes nothing does not depend on it (where the
host paces the forward, a shorter forward kernel can hide behind the host's issue time)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import fig, inline_scenario

from simulator.config.loading import resolve_dict
from simulator.engine.compute import OpTimer
from simulator.simulate import simulate
from simulator.workload.ops import Op, backward_op


def _gpu(**eff: float) -> Any:
    data = inline_scenario()
    for k, v in eff.items():
        data["cluster"]["gpu"]["efficiency"][k] = fig(v)
    return resolve_dict(data).gpu


def _pair(t: OpTimer, op: Op) -> tuple[float, float]:
    return t.time(op) - t.launch, t.time(backward_op(op)) - t.launch


def test_the_pair_runs_at_the_profile_efficiency_whatever_the_share() -> None:
    op = Op("attention", "attention", flops=1e13, bytes=0.0, kv_len=4096)
    for share in (0.1, 0.22, 0.4):
        t = OpTimer(_gpu(attention_max=0.5, attention_forward_share=share), "bf16")
        fwd, bwd = _pair(t, op)
        assert fwd + bwd == pytest.approx(3e13 / (t.attn_peak * 0.5))
        assert fwd / (fwd + bwd) == pytest.approx(share)


def test_unset_share_is_the_products_share() -> None:
    t = OpTimer(_gpu(attention_max=0.5), "bf16")
    fwd, bwd = _pair(t, Op("attention", "attention", flops=1e13, bytes=0.0))
    assert fwd / (fwd + bwd) == pytest.approx(2 / 7)  # 2 products forward, 5 backward


def test_a_memory_bound_attention_pair_takes_its_bytes_over_bandwidth() -> None:
    t = OpTimer(_gpu(attention_max=0.5, attention_forward_share=0.2), "bf16")
    fwd, bwd = _pair(t, Op("attention", "attention", flops=1.0, bytes=1e10))
    assert fwd + bwd == pytest.approx(3e10 / t.mem_bw)  # the backward moves twice the bytes
    assert fwd / (fwd + bwd) == pytest.approx(0.2)


def _step(share: float, recompute: str) -> float:
    data = inline_scenario(gpus_per_node=1, global_batch=4)
    data["cluster"]["gpu"]["efficiency"]["attention_forward_share"] = fig(share)
    data["training"]["flash_attention"] = True
    data["parallelism"] = {"recompute": recompute}
    return simulate(resolve_dict(data), scaling=False).metrics.step_time_s


def test_only_recomputation_sees_the_share() -> None:
    assert _step(0.2, "none") == pytest.approx(_step(0.4, "none"), rel=1e-9)
    assert _step(0.2, "full") < _step(0.4, "full")
    assert _step(0.2, "selective") < _step(0.4, "selective")


@pytest.mark.parametrize(("head_dim", "runs_as"), [(64, 64), (80, 96), (112, 128), (128, 128)])
def test_a_head_dimension_between_compiled_kernels_runs_as_the_next_one_up(
    head_dim: int, runs_as: int
) -> None:
    """Fused attention kernels exist for head dimensions in steps of 32 and compute the padding
    (flash-attention's head_size_rounded): the same FLOPs at a head of 80 take 96/80 as long as
    at a head that needs none."""
    gpu = _gpu(attention_max=0.5)
    op = Op("attention", "attention", flops=1e13, bytes=0.0, kv_len=4096)
    exact = sum(_pair(OpTimer(gpu, "bf16", head_dim=128), op))
    got = sum(_pair(OpTimer(gpu, "bf16", head_dim=head_dim), op))
    assert got == pytest.approx(exact * runs_as / head_dim)


def test_utilisation_above_one_says_attention_is_counted_whole() -> None:
    """At a million tokens attention dominates and, counted as the full s×s product (the
    published MFU convention) while a causal kernel computes half, HFU passed 1 without a word
    (a robustness review): a note says why."""
    from conftest import REPO

    from simulator.config.loading import load_scenario

    path = REPO / "scenarios" / "llama3-8b-8xh100.yaml"
    long = [
        "training.seq_len=1048576",
        "parallelism.cp=8",
        "training.global_batch=1",
        "run.stragglers=off",
    ]
    res = simulate(load_scenario(path, long), scaling=False)
    assert res.metrics.hfu > 1.0
    assert any("full s×s product" in n for n in res.notes)
    plain = simulate(load_scenario(path), scaling=False)
    assert plain.metrics.hfu < 1.0 and not any("full s×s" in n for n in plain.notes)
