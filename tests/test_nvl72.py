"""A GB200 NVL72 rack is one NVLink domain of up to 72 GPUs: the same layout is never slower
there than on 8-GPU HGX nodes of the same GPU, a rack-sized node takes a NIC per GPU, and the
fabric refuses more GPUs than the rack has."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import REPO

from simulator.config.loading import load_scenario, resolve_dict
from simulator.config.reading import read_yaml
from simulator.errors import UserError
from simulator.simulate import simulate

SC = REPO / "scenarios" / "llama3-405b-4xgb200-nvl72.yaml"


def _step(data: dict[str, Any]) -> float:
    return simulate(resolve_dict(data), scaling=False).metrics.step_time_s


def test_the_rack_is_never_slower_than_hgx_nodes_of_the_same_gpu() -> None:
    rack = read_yaml(SC)
    hgx = dict(rack)
    hgx["cluster"] = dict(
        rack["cluster"],
        gpus_per_node=8,
        nodes=32,
        fabric="nvlink5-nvswitch",
        network=dict(rack["cluster"]["network"], nics_per_node=8),
    )
    t_rack, t_hgx = _step(rack), _step(hgx)
    assert t_rack <= t_hgx * (1 + 1e-9)
    # TP8 stays inside NVLink either way; the pipeline's sends cross InfiniBand less in racks.
    assert t_rack / t_hgx > 0.8


def test_a_whole_rack_is_one_node_with_a_nic_per_gpu() -> None:
    data = read_yaml(SC)
    data["cluster"] = dict(
        data["cluster"],
        gpus_per_node=72,
        network=dict(data["cluster"]["network"], nics_per_node=72),
    )
    data["training"] = dict(data["training"], global_batch=1152)
    data["parallelism"] = dict(data["parallelism"], pp=9)
    data["parallelism"].pop("stage_layers")
    rs = resolve_dict(data)
    assert rs.gpus == 288 and rs.nics_per_node == 72


def test_the_fabric_holds_at_most_72_gpus() -> None:
    data = read_yaml(SC)
    data["cluster"] = dict(data["cluster"], gpus_per_node=80)
    with pytest.raises(UserError) as exc:
        resolve_dict(data)
    assert "72" in exc.value.message or "72" in (exc.value.hint or "")


def test_gb200_runs_the_b200_silicon_faster() -> None:
    rs = load_scenario(SC)
    b200 = load_scenario(SC, ["cluster.gpu=b200"])
    assert rs.gpu.peak_flops("fp8") > b200.gpu.peak_flops("fp8")
    assert (
        simulate(rs, scaling=False).metrics.step_time_s
        < simulate(b200, scaling=False).metrics.step_time_s
    )
