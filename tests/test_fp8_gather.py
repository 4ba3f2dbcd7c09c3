"""Float8 all-gathers under FSDP (``training.param_gather_dtype: fp8``, torchtitan's
enable_fsdp_float8_all_gather): each layer's linear weights travel and sit gathered at one byte
per element instead of two; the output layer and the embedding keep their 16-bit width."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import CATALOG_SCENARIO, run_cli, write_yaml

from simulator.config.loading import resolve_dict
from simulator.simulate import simulate
from simulator.workload.comm import step_comm
from simulator.workload.memory import (
    gather_bytes_per_param,
    layer_gather_bytes_per_param,
    memory_report,
)
from simulator.workload.params import end_params, layer_params_per_rank


def _data(gather: str, network: str = "roce-400", nodes: int = 2) -> dict[str, Any]:
    data = {**CATALOG_SCENARIO, "name": f"fp8-gather-{gather}"}
    data["cluster"] = {
        **CATALOG_SCENARIO["cluster"],
        "nodes": nodes,
        "network": {"profile": network, "nics_per_node": 8, "topology": {"kind": "fat_tree"}},
    }
    data["training"] = {
        "seq_len": 4096,
        "global_batch": 8 * nodes,
        "micro_batch": 1,
        "precision": "fp8",
        "param_gather_dtype": gather,
    }
    data["parallelism"] = {"sharding": {"kind": "fsdp"}, "recompute": "full"}
    data["software"] = "torchtitan"
    return data


def test_layer_width_is_one_byte_but_the_norms() -> None:
    rs = resolve_dict(_data("fp8"))
    per = layer_params_per_rank(rs)
    width = layer_gather_bytes_per_param(rs)
    norms = 2 * rs.model.hidden  # two RMSNorm weights a layer, 16-bit
    assert width == pytest.approx((per - norms + 2 * norms) / per, rel=1e-12)
    assert 1.0 < width < 1.001
    assert gather_bytes_per_param(rs) == 2.0  # the output layer and the embedding
    bf = resolve_dict(_data("bf16"))
    assert layer_gather_bytes_per_param(bf) == gather_bytes_per_param(bf) == 2.0


def test_gathered_layers_hold_half_the_bytes() -> None:
    """Two layers are held gathered (the one computing, the one prefetched); the root unit
    (embedding and output layer) stays 16-bit."""
    f8, bf = (memory_report(resolve_dict(_data(g))).peak for g in ("fp8", "bf16"))
    rs = resolve_dict(_data("fp8"))
    layer = layer_params_per_rank(rs)
    emb, head = end_params(rs)
    assert bf.gathered_params_gb * 1e9 == pytest.approx(2 * layer * 2 + (emb + head) * 2)
    expect = 2 * layer * layer_gather_bytes_per_param(rs) + (emb + head) * 2
    assert f8.gathered_params_gb * 1e9 == pytest.approx(expect, rel=1e-12)
    assert f8.total_gb < bf.total_gb


def test_gather_traffic_and_step() -> None:
    """The layers' all-gather bytes halve; on a slow network (gathers exposed) the step gets
    faster and the exposed DP time shrinks; nothing else moves."""
    items = {}
    for g in ("fp8", "bf16"):
        rs = resolve_dict(_data(g, network="tcp-100gbe"))
        items[g] = {(i.op, i.phase): i.bytes for i in step_comm(rs, 0) if i.op == "all_gather"}
    fb = items["bf16"][("all_gather", "forward+backward")]
    f8 = items["fp8"][("all_gather", "forward+backward")]
    assert f8 / fb == pytest.approx(0.5, rel=1e-3)
    assert items["fp8"][("all_gather", "forward")] == items["bf16"][("all_gather", "forward")]
    res = {
        g: simulate(resolve_dict(_data(g, network="tcp-100gbe")), scaling=False).metrics
        for g in ("fp8", "bf16")
    }
    assert res["fp8"].step_time_s < res["bf16"].step_time_s
    exposed = {g: res[g].breakdown_s["comm_dp"] for g in res}
    assert exposed["fp8"] < exposed["bf16"]


def test_symmetric_equals_full() -> None:
    rs = resolve_dict(_data("fp8"))
    sym = simulate(rs, scaling=False).metrics.step_time_s
    full = simulate(rs, full=True, scaling=False).metrics.step_time_s
    assert sym == pytest.approx(full, rel=1e-9)


@pytest.mark.parametrize(
    ("sets", "says"),
    [
        (["training.precision=bf16"], "this plan trains in bf16"),
        (
            ["parallelism.sharding={kind: zero, stage: 1}"],
            "sharding ZeRO-1 is modelled with one gather a step",
        ),
    ],
)
def test_refused_outside_fp8_fsdp(tmp_path: Path, sets: list[str], says: str) -> None:
    path = write_yaml(tmp_path / "s.yaml", _data("fp8"))
    args = [a for s in sets for a in ("--set", s)]
    r = run_cli("simulate", str(path), *args)
    assert r.returncode == 2
    assert "training.param_gather_dtype" in r.stderr and says in r.stderr
    assert "Traceback" not in r.stderr
