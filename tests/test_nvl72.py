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

SC = REPO / "scenarios" / "validation" / "nemo-gb200-fp8" / "mbridge-llama3.1-405b-256xgb200.yaml"
RACK = REPO / "scenarios" / "llama3-70b-1xgb200-nvl72.yaml"


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
    data["parallelism"] = dict(data["parallelism"], tp=8, pp=9, cp=1)
    data["parallelism"]["pp_schedule"] = {"kind": "1f1b"}
    data["parallelism"].pop("stage_layers")
    data["training"] = dict(data["training"], global_batch=1152)
    rs = resolve_dict(data)
    assert rs.gpus == 288 and rs.nics_per_node == 72


def test_one_rack_keeps_every_collective_on_nvlink() -> None:
    rs = load_scenario(RACK)
    m = simulate(rs, scaling=False).metrics
    assert rs.nodes == 1 and rs.network is None  # no NIC on the path of any collective
    assert m.fits and m.gpus == 64 and m.step_time_s > 0


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
