"""What a software stack does with sharded state, and the scenario shorthands beside them.

FSDP under pipeline parallelism on a stack that gathers once per step:

torchtitan keeps FSDP2's parameters gathered after forward when PP is on, and
torch.distributed.pipelining runs every micro-batch's backward without gradient sync or
resharding, reduce-scattering once after the last backward. Per step that is one all-gather
of the stage's parameters and one reduce-scatter of its gradients, with the unsharded
parameters and gradients held meanwhile: what ZeRO-1 moves and holds, the reduction exposed
after the last backward.

DeepSpeed's pipeline engine refuses ZeRO-2/3, and with its BF16 optimizer all-reduces the whole
fp32 gradient before each rank updates its ZeRO-1 shard.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import inline_scenario, run_cli, write_yaml

from simulator.config.loading import resolve_dict
from simulator.errors import UserError
from simulator.simulate import simulate
from simulator.workload.comm import comm_summary
from simulator.workload.memory import memory_report

FSDP = {"kind": "fsdp", "strategy": "full_shard"}
ZERO1 = {"kind": "zero", "stage": 1}


def _data(software: str, sharding: dict, pp: int = 2, **overlap: bool) -> dict:
    data = inline_scenario(
        "llama3-8b", nodes=2, gpus_per_node=8, global_batch=64, tp=2, pp=pp, sharding=sharding
    )
    data["software"] = software
    if overlap:
        data["parallelism"]["overlap"] = overlap
    return data


@pytest.mark.parametrize("full", [False, True])
def test_torchtitan_fsdp_under_pp_moves_and_holds_what_zero1_does(full: bool) -> None:
    fsdp = resolve_dict(_data("torchtitan", FSDP))
    zero1 = resolve_dict(_data("torchtitan", ZERO1))
    assert fsdp.gathers_once and fsdp.zero_stage == 1
    assert fsdp.parallelism.zero_stage == 3  # what the user wrote, for the report
    assert fsdp.layout()["zero_stage"] == 3
    assert comm_summary(fsdp) == comm_summary(zero1)
    assert memory_report(fsdp).peak.total_gb == pytest.approx(memory_report(zero1).peak.total_gb)
    # The reduction waits for the last backward: the same step as ZeRO-1 without overlap.
    assert not fsdp.parallelism.overlap.dp_grad
    zero1_late = resolve_dict(_data("torchtitan", ZERO1, dp_grad=False))
    a = simulate(fsdp, scaling=False, full=full)
    b = simulate(zero1_late, scaling=False, full=full)
    assert a.metrics.step_time_s == pytest.approx(b.metrics.step_time_s, rel=1e-12)
    assert any("one all-gather per step" in n for n in a.notes)


def test_gathering_once_moves_less_than_every_micro_batch() -> None:
    once = resolve_dict(_data("torchtitan", FSDP))
    every = resolve_dict(_data("pytorch-fsdp", FSDP))  # FSDP1 in Composer: no such rule
    assert not every.gathers_once and every.zero_stage == 3
    m = once.micro_batches
    assert m > 1
    # ZeRO-3 gathers twice and reduce-scatters once per micro-batch; once per step here.
    assert comm_summary(once)["dp"] < comm_summary(every)["dp"] / m * 2
    # ...and holds the stage's whole parameters and gradients to do it.
    assert memory_report(once).peak.total_gb > memory_report(every).peak.total_gb


def test_without_a_pipeline_fsdp_is_unchanged() -> None:
    rs = resolve_dict(_data("torchtitan", FSDP, pp=1))
    assert not rs.gathers_once and rs.zero_stage == 3
    assert rs.parallelism.overlap.dp_grad  # the stack's overlapped reduce-scatter


def test_an_overlap_the_scenario_writes_is_kept() -> None:
    rs = resolve_dict(_data("torchtitan", FSDP, dp_grad=True))
    assert rs.gathers_once and rs.parallelism.overlap.dp_grad


def test_network_by_name_is_the_profile_with_its_defaults() -> None:
    base = {
        "cluster": {
            "gpu": "h100-sxm-80gb",
            "nodes": 2,
            "fabric": "nvlink4-nvswitch",
            "network": "ib-ndr-400",
        },
        "model": "llama3-8b",
        "training": {"seq_len": 4096, "global_batch": 64, "micro_batch": 1},
    }
    short = resolve_dict(base)
    base["cluster"]["network"] = {"profile": "ib-ndr-400"}
    long = resolve_dict(base)
    assert short.network == long.network and short.nics_per_node == long.nics_per_node


def test_deepspeed_refuses_zero2_under_a_pipeline(tmp_path: Path) -> None:
    data = _data("deepspeed", {"kind": "zero", "stage": 2})
    path = write_yaml(tmp_path / "ds.yaml", data)
    res = run_cli("simulate", str(path))
    assert res.returncode == 2
    assert "parallelism.sharding" in res.stderr and "ZeRO-2" in res.stderr
    assert "Traceback" not in res.stderr
    # ZeRO-1 under a pipeline, and ZeRO-2 without one, run.
    resolve_dict(_data("deepspeed", ZERO1))
    resolve_dict(_data("deepspeed", {"kind": "zero", "stage": 2}, pp=1))


def test_megatron_deepspeed_zero1_all_reduces_the_whole_gradient_in_bf16() -> None:
    from simulator.workload.comm import step_comm
    from simulator.workload.memory import stage_params

    ds1 = resolve_dict(_data("megatron-deepspeed", ZERO1))
    mt1 = resolve_dict(_data("megatron-core", ZERO1))
    assert ds1.grads_all_reduced and not mt1.grads_all_reduced

    def grads(rs):  # type: ignore[no-untyped-def]
        items = [i for i in step_comm(rs, 0) if i.group == "dp" and i.phase == "backward"]
        return {i.op for i in items}, sum(i.total_bytes for i in items)

    # The whole gradient all-reduced, cast from its fp32 buffer to bf16 on the wire...
    params = stage_params(ds1, 0)
    assert grads(ds1) == ({"all_reduce"}, pytest.approx(params * 2.0))
    assert grads(mt1) == ({"reduce_scatter"}, pytest.approx(params * 4.0))
    # ...while the bf16 gradients stay allocated beside the fp32 buffer.
    assert memory_report(ds1).stages[0].gradients_gb * 1e9 == pytest.approx(params * 6.0)
    assert memory_report(mt1).stages[0].gradients_gb * 1e9 == pytest.approx(params * 4.0)


def test_megatron_deepspeed_bf16_shards_the_optimizer_at_zero_stage_0() -> None:
    zero0 = {"kind": "zero", "stage": 0}
    bf16 = resolve_dict(_data("megatron-deepspeed", zero0))
    assert bf16.zero_stage == 1 and bf16.layout()["zero_stage"] == 0
    assert any("ZeRO-1 equivalent" in n for n in bf16.plan_notes())
    written1 = resolve_dict(_data("megatron-deepspeed", ZERO1))
    assert memory_report(bf16).peak.total_gb == pytest.approx(memory_report(written1).peak.total_gb)
    fp16 = _data("megatron-deepspeed", zero0)
    fp16["training"]["precision"] = "fp16"
    assert resolve_dict(fp16).zero_stage == 0


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"sharding": {"kind": "zero", "stage": 2}}, "parallelism.sharding"),
        ({"pp_schedule": {"kind": "interleaved", "virtual_stages": 2}}, "parallelism.pp_schedule"),
        ({"pp_schedule": {"kind": "gpipe"}}, "parallelism.pp_schedule"),
    ],
)
@pytest.mark.parametrize("stack", ["deepspeed", "megatron-deepspeed"])
def test_deepspeed_pipelines_refuse_what_the_engine_cannot_run(
    stack: str, change: dict, path: str
) -> None:
    data = _data(stack, ZERO1)
    data["parallelism"].update(change)
    with pytest.raises(UserError) as err:
        resolve_dict(data)
    assert err.value.path == path


def test_first_and_last_stages_exchange_the_tied_embedding_gradient() -> None:
    from simulator.workload.comm import comm_summary

    def run(vocab: int, tied: bool, full: bool = False) -> tuple[float, float]:
        model = {"preset": "llama3-8b", "vocab": vocab, "tied_embeddings": tied}
        data = inline_scenario(model, nodes=2, gpus_per_node=8, global_batch=8, tp=8, pp=2)
        rs = resolve_dict(data)
        assert rs.dp == 1
        res = simulate(rs, scaling=False, full=full)
        return res.metrics.breakdown_s.get("comm_dp", 0.0), comm_summary(rs).get("embedding", 0)

    untied, none = run(128_000, tied=False)
    assert untied == 0.0 and none == 0
    t1, b1 = run(128_000, tied=True)
    t2, b2 = run(256_000, tied=True)
    t3, _ = run(384_000, tied=True)
    # One TP rank's vocabulary shard of fp32 gradient, at a fixed latency plus bytes over the
    # NIC's rate: linear in the vocabulary.
    assert b1 == 128_000 * 4096 / 8 * 4 and b2 == pytest.approx(2 * b1)
    assert t3 - t2 == pytest.approx(t2 - t1, rel=1e-6) and t2 - t1 > 0
    assert 0 < 2 * t1 - t2 < 1e-3
    assert run(128_000, tied=True, full=True)[0] == pytest.approx(t1, rel=1e-9)


def test_alibi_and_rope_have_no_position_parameters() -> None:
    from simulator.workload.model import param_count

    def params(position: str) -> float:
        data = inline_scenario({"preset": "llama3-8b", "position": position, "max_positions": 2048})
        rs = resolve_dict(data)
        return param_count(rs.model, rs.training.seq_len)

    assert params("alibi") == params("rope")
    assert params("learned") == params("rope") + 2048 * 4096


def test_torchtitan_under_a_pipeline_reduces_one_layer_at_a_time_for_any_sharding() -> None:
    from simulator.workload.comm import dp_buckets
    from simulator.workload.memory import layer_params_per_rank

    # torchtitan has no ZeRO-1 of its own: a written ZeRO-1 runs as FSDP2 under PP too, and
    # is then the same plan as FSDP.
    zero1 = resolve_dict(_data("torchtitan", ZERO1))
    fsdp = resolve_dict(_data("torchtitan", FSDP))
    assert zero1.gathers_once and not zero1.parallelism.overlap.dp_grad
    assert simulate(zero1, scaling=False).metrics.step_time_s == pytest.approx(
        simulate(fsdp, scaling=False).metrics.step_time_s, rel=1e-12
    )
    # FSDP2 reduce-scatters each block's gradients in one collective (and the output layer,
    # a unit of its own, in another).
    layer = layer_params_per_rank(fsdp) * 4.0  # fp32 reduction
    assert dp_buckets(fsdp, 1)[1] == fsdp.stage_layers()[1] + 1
    bucketed = _data("torchtitan", FSDP)
    bucketed["parallelism"]["dp_bucket_mb"] = 1000.0
    assert dp_buckets(resolve_dict(bucketed), 1)[0] > layer


def test_a_stage_cap_is_a_whole_zero_stage(tmp_path: Path) -> None:
    data = _data("deepspeed", ZERO1)
    data["software"] = {"profile": "deepspeed", "pp_max_zero_stage": {"value": 1.5, "source": "x"}}
    res = run_cli("simulate", str(write_yaml(tmp_path / "cap.yaml", data)))
    assert res.returncode == 2 and "pp_max_zero_stage" in res.stderr
    assert "Traceback" not in res.stderr


def test_check_offers_dropping_the_pipeline_where_it_unshards_fsdp() -> None:
    from simulator.check import find_levers

    data = inline_scenario(
        "llama3-70b", nodes=4, gpus_per_node=8, global_batch=64, tp=2, pp=2, sharding=FSDP
    )
    data["software"] = "torchtitan"
    rs = resolve_dict(data)
    assert not memory_report(rs).fits
    levers = [c for lever in find_levers(rs) for c in lever.change]
    assert any(c == "parallelism.pp=1" for c in levers), levers


@pytest.mark.parametrize(
    ("field", "words"), [("network", "network profile name"), ("pricing", "price profile name")]
)
def test_a_profile_shorthand_of_the_wrong_type_says_what_it_takes(
    tmp_path: Path, field: str, words: str
) -> None:
    data = _data("megatron-core", ZERO1)
    data["cluster"][field] = 123
    res = run_cli("simulate", str(write_yaml(tmp_path / "bad.yaml", data)))
    assert res.returncode == 2 and f"cluster.{field}" in res.stderr and words in res.stderr


def _titan(model: object = "llama3-8b", **par: object) -> dict:
    data = inline_scenario(model, nodes=1, gpus_per_node=8, global_batch=16, **par)
    data["parallelism"]["recompute"] = "selective"
    data["software"] = "torchtitan"
    return data


def test_torchtitan_refuses_tied_embeddings_under_a_pipeline() -> None:
    data = _titan({"preset": "llama3-8b", "tied_embeddings": True}, pp=2)
    with pytest.raises(UserError) as err:
        resolve_dict(data)
    assert err.value.path == "model.tied_embeddings"
    resolve_dict(_titan({"preset": "llama3-8b", "tied_embeddings": True}))  # no pipeline: fine


def test_a_written_gradient_dtype_sets_the_wire_too() -> None:
    from simulator.workload.comm import grad_wire_bytes_per_param

    data = _data("megatron-deepspeed", ZERO1)
    assert grad_wire_bytes_per_param(resolve_dict(data)) == 2.0
    data["training"]["grad_reduce_dtype"] = "fp32"
    assert grad_wire_bytes_per_param(resolve_dict(data)) == 4.0


def test_sweep_rows_say_the_stage_a_sharding_runs_as() -> None:
    from simulator.sweep.plans import _row_common
    from simulator.sweep.spec import Point

    point = Point(index=0, labels={}, sets=[])
    fsdp = _row_common("s", point, resolve_dict(_data("torchtitan", FSDP)))
    assert fsdp["sharding"] == "fsdp_full_shard (as zero1)"
    plain = _row_common("s", point, resolve_dict(_data("megatron-core", ZERO1)))
    assert plain["sharding"] == "zero1"


def test_reports_name_the_selective_policy() -> None:
    from simulator.report.tables import _recompute

    titan = resolve_dict(_titan())
    assert _recompute(titan.layout()) == "selective (every second matmul)"
    mega = _data("megatron-core", ZERO1)
    mega["parallelism"]["recompute"] = "selective"
    assert _recompute(resolve_dict(mega).layout()) == "selective"
