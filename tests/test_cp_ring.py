"""Context parallelism as ring attention (TransformerEngine's and Megatron-Core's default
'p2p'): K and V chunks pass round the CP ring beside the attention kernel, in the forward and
again in the backward (each rank kept only its own chunk), with the K and V gradients passed
back the other way; the exchange shows only where it outlasts the kernel's share that can
hide it ((cp-1)/cp of it: the first chunk is the rank's own). A reviewer found the backward's
pass of K and V missing (2/3 of the traffic) and none of it hidden."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import CATALOG_SCENARIO

from simulator.config.loading import resolve_dict
from simulator.simulate import simulate
from simulator.workload.comm import step_comm
from simulator.workload.ops import kv_per_rank


def _rs(cp: int, seq: int, nodes: int = 1, network: str = "ib-ndr-400") -> Any:
    data: dict[str, Any] = {**CATALOG_SCENARIO, "name": "cp"}
    net = {"profile": network, "nics_per_node": 8}
    data["cluster"] = {**CATALOG_SCENARIO["cluster"], "nodes": nodes, "network": net}
    data["training"] = {"seq_len": seq, "global_batch": 8 * nodes // cp, "micro_batch": 1}
    data["parallelism"] = {"tp": 1, "cp": cp, "sharding": {"kind": "fsdp"}}
    data["run"] = {"stragglers": "off"}
    return resolve_dict(data)


def test_the_ring_moves_k_and_v_twice_and_their_gradients_once() -> None:
    rs = _rs(4, 32768)
    kv = 2 * (32768 // 4) * kv_per_rank(rs) * 2 * 4  # the whole K and V, bf16
    items = [(i.phase, i.op, i.bytes) for i in step_comm(rs) if i.group == "cp"]
    calls = {
        (p, o): sum(i.calls for i in step_comm(rs) if i.group == "cp" and (i.phase, i.op) == (p, o))
        for p, o, _ in items
    }
    assert {b for _, _, b in items} == {kv}
    per = rs.model.layers * rs.micro_batches
    assert calls == {("forward", "all_gather"): per, ("backward", "all_gather"): per,
                     ("backward", "reduce_scatter"): per}  # fmt: skip


def test_inside_a_node_a_long_sequence_hides_the_ring() -> None:
    m = simulate(_rs(8, 131072), scaling=False).metrics
    assert m.breakdown_s.get("comm_cp", 0.0) == pytest.approx(0.0, abs=1e-12)


def test_across_a_slow_network_a_short_sequence_shows_what_the_kernel_cannot_hide() -> None:
    rs = _rs(2, 4096, nodes=2, network="tcp-100gbe")
    rs = resolve_dict({**rs.raw, "cluster": {**rs.raw["cluster"], "gpus_per_node": 1}})
    m = simulate(rs, scaling=False).metrics
    full = simulate(rs, full=True, scaling=False).metrics
    assert m.breakdown_s["comm_cp"] > 0
    assert m.step_time_s == pytest.approx(full.step_time_s, rel=1e-9)


def test_the_engine_runs_the_ring_and_recomputation_repeats_the_forward_one() -> None:
    from simulator.engine.sim import Simulation

    rs = _rs(4, 32768)
    sim = Simulation(rs)
    names = lambda prog: [i.name for i in prog.items if "cp_" in i.name]  # noqa: E731
    # (a layer's programs: the ring after the attention kernel, both ways in the backward)
    assert names(sim.p_fwd) == ["cp_kv_gather"]
    assert names(sim.p_bwd) == ["cp_kv_regather_bwd", "cp_dkv_reduce_bwd"]
    full = resolve_dict({**rs.raw, "parallelism": {**rs.raw["parallelism"], "recompute": "full"}})
    again = [i for i in step_comm(full) if i.group == "cp" and i.phase == "recompute"]
    assert [(i.op, i.calls) for i in again] == [("all_gather", rs.model.layers * rs.micro_batches)]
