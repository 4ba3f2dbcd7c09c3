"""Layout edges a second physics fuzz found: Megatron's interleaved schedule with as many
micro-batches as stages runs every chunk forward first (its warm-up is all of them), which
the schedule and the memory model now follow; and hybrid sharding's default shard group (a
node's DP×CP ranks) is refused where it does not divide DP×CP, as an explicit one is (12 ranks
in groups of 8 ran, and gave an uneven pipeline split 2.2x faster than the even one)."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.config.loading import resolve_dict
from simulator.engine.schedule import interleaved, interleaved_warmup, schedule_arrays
from simulator.errors import UserError
from simulator.workload.memory import inflight_microbatches


@pytest.mark.parametrize(("p", "v"), [(2, 2), (4, 2), (4, 3), (8, 2)])
def test_interleaved_with_m_equal_p_runs_every_forward_first(p: int, v: int) -> None:
    for stage in range(p):
        order = interleaved(stage, p, p, v)
        kinds = [k for k, _mb, _ch in order]
        assert kinds == ["F"] * (p * v) + ["B"] * (p * v)
        fwd, _mb, _ch = schedule_arrays("interleaved", stage, p, p, v)
        assert list(fwd) == [True] * (p * v) + [False] * (p * v)
        # one more micro-batch round: Megatron's general warm-up again
        assert interleaved_warmup(stage, p, 2 * p, v) == min(
            2 * (p - stage - 1) + (v - 1) * p, 2 * p * v
        )


def _scenario(**par: Any) -> Any:
    return resolve_dict(
        {
            "name": "t",
            "cluster": {
                "gpu": "h100-sxm-80gb",
                "gpus_per_node": 8,
                "nodes": 3,
                "fabric": "nvlink4-nvswitch",
                "storage": "local-nvme",
                "network": {"profile": "ib-ndr-400", "nics_per_node": 8},
            },
            "model": {"layers": 24, "hidden": 2560, "heads": 32, "vocab": 32000},
            "training": {"seq_len": 4096, "global_batch": 48, "micro_batch": 1},
            "parallelism": par,
        }
    )


def test_the_last_stage_holds_every_micro_batch_when_m_equals_p() -> None:
    rs = _scenario(
        pp=4,
        tp=2,
        pp_schedule={"kind": "interleaved", "virtual_stages": 2},
        dp=3,
    )
    assert rs.micro_batches == 16  # m = 48 / 3
    small = resolve_dict({**rs.raw, "training": {**rs.raw["training"], "global_batch": 12}})
    assert small.micro_batches == 4 == small.pp
    for stage in range(4):
        assert inflight_microbatches(small, stage) == 4.0


def test_hybrid_shard_default_group_must_divide_dp() -> None:
    with pytest.raises(UserError) as exc:
        _scenario(pp=2, sharding={"kind": "fsdp", "strategy": "hybrid_shard"})
    assert exc.value.path == "parallelism.sharding.shard_group"
    assert "12" in exc.value.message and "8" in exc.value.message
    # an explicit group that divides, or a layout whose node's worth divides, is accepted
    ok = _scenario(pp=2, sharding={"kind": "fsdp", "strategy": "hybrid_shard", "shard_group": 6})
    assert ok.dp == 12
    assert _scenario(pp=3, sharding={"kind": "fsdp", "strategy": "hybrid_shard"}).dp == 8
