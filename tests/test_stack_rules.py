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


def test_megatron_deepspeed_zero1_all_reduces_the_whole_gradient() -> None:
    from simulator.workload.comm import step_comm

    ds1 = resolve_dict(_data("megatron-deepspeed", ZERO1))
    ds0 = resolve_dict(_data("megatron-deepspeed", {"kind": "zero", "stage": 0}))
    assert ds1.grads_all_reduced and ds0.grads_all_reduced
    mt1 = resolve_dict(_data("megatron-core", ZERO1))
    assert not mt1.grads_all_reduced

    def grad_items(rs):  # type: ignore[no-untyped-def]
        return [
            (i.op, i.total_bytes)
            for i in step_comm(rs, 0)
            if i.group == "dp" and i.phase == "backward"
        ]

    # The gradient moves as plain DP's does; ZeRO-1 adds the weights' all-gather and keeps
    # the optimizer states sharded.
    assert grad_items(ds1) == grad_items(ds0)
    assert {c for c, _ in grad_items(mt1)} == {"reduce_scatter"}
    assert memory_report(ds1).peak.optimizer_gb < memory_report(ds0).peak.optimizer_gb
    with pytest.raises(UserError, match="ZeRO stage 1 at most"):
        resolve_dict(_data("megatron-deepspeed", {"kind": "zero", "stage": 2}))


def test_alibi_and_rope_have_no_position_parameters() -> None:
    from simulator.workload.model import param_count

    def params(position: str) -> float:
        data = inline_scenario({"preset": "llama3-8b", "position": position, "max_positions": 2048})
        rs = resolve_dict(data)
        return param_count(rs.model, rs.training.seq_len)

    assert params("alibi") == params("rope")
    assert params("learned") == params("rope") + 2048 * 4096
