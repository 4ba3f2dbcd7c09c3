"""Memory by pipeline schedule and sharding detail: the interleaved schedule's in-flight chunks
per stage (Megatron's warm-up), FSDP's gathered-layer buffers at the gather width; layouts
Megatron refuses; a PP sweep over an interleaved base keeps the PP=1 plan."""

from __future__ import annotations

import pytest
from conftest import REPO, inline_scenario, run_cli
from test_errors import assert_user_error

from simulator.config.loading import load_scenario
from simulator.config.reading import read_yaml
from simulator.sweep.variants import plan_variants
from simulator.workload.memory import inflight_microbatches, memory_report

BASE = REPO / "scenarios" / "llama3-70b-64xh100.yaml"  # PP4, interleaved v5


def test_interleaved_in_flight_follows_megatrons_warm_up() -> None:
    rs = load_scenario(BASE)
    p, v = rs.pp, rs.parallelism.virtual_stages
    got = [inflight_microbatches(rs, s) for s in range(p)]
    # Rank r runs 2(p-r-1) + (v-1)p warm-up chunks and holds one more, 1/v of a micro-batch
    # each; stage 0 is Korthikanti et al.'s p(1 + (p-1)/(pv)).
    assert got == pytest.approx([(2 * (p - r - 1) + (v - 1) * p + 1) / v for r in range(p)])
    assert got[0] == pytest.approx(p * (1 + (p - 1) / (p * v)))
    assert got == sorted(got, reverse=True)


def test_fsdp_gathered_layers_at_the_gather_width() -> None:
    sets = ["parallelism.sharding={kind: fsdp, strategy: full_shard}", "software=pytorch-fsdp"]
    half = memory_report(load_scenario(BASE, [*sets, "training.param_gather_dtype=bf16"]))
    full = memory_report(load_scenario(BASE, [*sets, "training.param_gather_dtype=fp32"]))
    assert half.stages[0].gathered_params_gb > 0
    assert full.stages[0].gathered_params_gb == pytest.approx(2 * half.stages[0].gathered_params_gb)


def test_pp_sweep_over_an_interleaved_base_keeps_pp1_as_1f1b() -> None:
    plans = plan_variants(read_yaml(BASE), ["pp"])
    one = [d["parallelism"] for d in plans if d["parallelism"]["pp"] == 1]
    assert one and one[0]["pp_schedule"] == {"kind": "1f1b"}
    # With the schedule enumerated too, PP=1 appears once (as 1F1B), not twice.
    both = plan_variants(read_yaml(BASE), ["pp", "schedule"])
    assert sum(d["parallelism"]["pp"] == 1 for d in both) == 1


@pytest.mark.parametrize(
    "sets, path, says",
    [
        (["training.seq_len=8190"], "parallelism.sequence_parallel", "does not divide"),
        (["parallelism.cp=2", "training.seq_len=8194"], "parallelism.cp", "2·CP = 4 chunks"),
    ],
    ids=["sp-needs-tp-to-divide-the-sequence", "cp-needs-2cp-chunks"],
)
def test_layouts_megatron_refuses(sets: list[str], path: str, says: str) -> None:
    args = [a for s in sets for a in ("--set", s)]
    res = run_cli("check", str(BASE), *args)
    assert_user_error(res, file=BASE, path=path, says=(says,))


def test_tp_beyond_the_kv_heads_replicates_k_and_v() -> None:
    """Llama-3-70B has 8 KV heads: at TP16 each rank holds one whole KV head (Megatron
    replicates K and V), not half of one."""
    from simulator.config.loading import resolve_dict
    from simulator.workload.memory import stage_params
    from simulator.workload.ops import kv_per_rank, layer_ops

    def rs(tp: int):  # type: ignore[no-untyped-def]
        return resolve_dict(inline_scenario("llama3-70b", nodes=2, tp=tp, pp=1))

    r8, r16 = rs(8), rs(16)
    m = r8.model
    assert kv_per_rank(r8) == m.kv_dim / 8 == m.head_dim  # one head each: exact split
    assert kv_per_rank(r16) == m.head_dim  # still one head each
    from simulator.workload.model import param_breakdown

    pb = param_breakdown(m)
    kv = m.layers * 2 * m.kv_dim * m.hidden / 8  # one KV head's K and V per layer, per rank
    same = kv + m.layers * pb.norms_per_layer + pb.final_norm  # not split further by TP16
    assert stage_params(r16, 0) == pytest.approx((stage_params(r8, 0) - same) / 2 + same)
    (qkv,) = [o for o in layer_ops(r16) if o.name == "qkv_proj"]
    assert qkv.dims is not None and qkv.dims[2] == m.hidden // 16 + 2 * m.head_dim


def test_an_op_level_policy_holds_what_it_saves_and_brings_back_one_layer() -> None:
    """torchtitan's selective policy saves every other matmul's output (the row-parallel ones
    as whole partial sums before their reduce-scatter) and the sequence shard of each block
    input; without recomputation DTensor keeps each block's gathered inputs whole. The stage
    holds what the policy saves for every layer in flight, and brings back what it dropped for
    the one layer whose backward runs (nothing where it saves more than autograd would)."""
    from conftest import CATALOG_SCENARIO

    from simulator.config.loading import resolve_dict
    from simulator.workload.activations import (
        _alternate_saved_per_layer,
        activation_bytes_per_layer,
    )
    from simulator.workload.memory import held_layer_microbatches

    data = {**CATALOG_SCENARIO, "name": "sac", "model": "llama2-7b"}  # MHA: K and V full width
    data["training"] = {
        "seq_len": 4096,
        "global_batch": 64,
        "micro_batch": 4,
        "precision": "bf16",
        "flash_attention": True,
    }
    data["software"] = "torchtitan"
    layouts = {}
    for rc in ("none", "selective"):
        data["parallelism"] = {"tp": 8, "sequence_parallel": True, "recompute": rc}
        layouts[rc] = resolve_dict(data)
    sel = layouts["selective"]
    saved, full = _alternate_saved_per_layer(sel), activation_bytes_per_layer(sel)
    assert 0 < saved < full
    held = held_layer_microbatches(sel, 0)
    more = (
        memory_report(sel).stages[0].activations_gb
        - memory_report(layouts["none"]).stages[0].activations_gb
    )
    back = max(0.0, full - saved)
    assert more * 1e9 == pytest.approx(held * (saved - full) + back, rel=1e-9)


def test_pp_auto_tries_every_stage_count_that_divides_the_cluster() -> None:
    """192 GPUs (24 nodes) of a 48-layer model (Megatron's 39.1B): PP 3 splits both, and a plan
    search that tried powers of two only found no valid plan at 24, 48 or 96 nodes
    (walkthrough); the point now keeps a 3-stage plan. 64 GPUs enumerate the powers of two, as
    before."""
    from simulator.sweep.plans import evaluate_point
    from simulator.sweep.spec import Point

    data = read_yaml(BASE)
    data["cluster"]["nodes"] = 24
    data["model"] = "megatron-39.1b"
    data["training"]["seq_len"] = 2048
    pps = sorted({d["parallelism"]["pp"] for d in plan_variants(data, ["pp"])})
    assert pps == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
    point = Point(index=0, labels={}, sets=[])
    (row,) = evaluate_point("pp", data, point, ["tp", "pp", "schedule"], "fastest")
    assert row["status"] == "ok" and row["pp"] == 3, row["status"]
    data["cluster"]["nodes"] = 8
    assert sorted({d["parallelism"]["pp"] for d in plan_variants(data, ["pp"])}) == [
        1,
        2,
        4,
        8,
        16,
        32,
        64,
    ]
