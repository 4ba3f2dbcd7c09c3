"""ZeRO-3/FSDP without prefetching (``overlap.param_gather`` off): each layer's all-gather
starts as the layer is reached and the layer waits for all of it, so on a network-bound layout
with nothing else overlapped the step is compute + TP + every gather and reduce-scatter + the
optimizer, and one gathered layer is held at a time instead of two (a reviewer found the switch
ignored under ZeRO-3: 107 ms where the hand sum gives 150)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import CATALOG_SCENARIO

from simulator.config.loading import resolve_dict
from simulator.simulate import simulate
from simulator.workload.memory import layer_params_per_rank, memory_report


def _rs(prefetch: bool, kind: str = "zero") -> Any:
    data: dict[str, Any] = {**CATALOG_SCENARIO, "name": "prefetch"}
    net = {"profile": "ib-ndr-400"}
    data["cluster"] = {**CATALOG_SCENARIO["cluster"], "nodes": 4, "network": net}
    data["training"] = {"seq_len": 2048, "global_batch": 4, "micro_batch": 1}
    data["training"] |= {"precision": "bf16", "grad_reduce_dtype": "bf16"}
    sharding = {"kind": "zero", "stage": 3} if kind == "zero" else {"kind": "fsdp"}
    data["parallelism"] = {"tp": 8, "dp": 4, "sharding": sharding}
    data["parallelism"]["overlap"] = {"dp_grad": False, "param_gather": prefetch}
    data["run"] = {"stragglers": "off"}
    return resolve_dict(data)


@pytest.mark.parametrize("kind", ["zero", "fsdp"])
def test_without_prefetch_every_gather_is_exposed(kind: str) -> None:
    off, on = (simulate(_rs(p, kind), scaling=False).metrics for p in (False, True))
    assert on.step_time_s < off.step_time_s
    b = off.breakdown_s
    # everything but DP communication is the same work, and none of it hides the gathers
    assert off.breakdown_s["overlap"] == pytest.approx(0.0, abs=1e-12)
    rest = b["compute"] + b["comm_tp"] + b["optimizer"]
    assert b["comm_dp"] == pytest.approx(off.step_time_s - rest, rel=1e-9)
    assert b["comm_dp"] > 1.8 * on.breakdown_s["comm_dp"]


def test_without_prefetch_one_gathered_layer_is_held() -> None:
    off, on = (memory_report(_rs(p)).peak for p in (False, True))
    layer = layer_params_per_rank(_rs(False)) * 2  # bf16
    assert (on.gathered_params_gb - off.gathered_params_gb) * 1e9 == pytest.approx(layer)
