"""Megatron's scatter/gather of pipeline messages: without sequence parallelism each TP rank
sends a 1/t slice and the receiver all-gathers the whole over the fast fabric before its pass
(Narayanan et al., SC21 §4.1). Every received input costs that all-gather on the compute stream."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.config.loading import resolve_dict
from simulator.engine.sim import Simulation, run_engine
from simulator.workload.ops import pp_recv_ops

BASE: dict[str, Any] = {
    "name": "recv",
    # one TP group per node, the two stages on two nodes: TP has the fabric to itself
    "cluster": {
        "gpu": "a100-sxm4-80gb",
        "gpus_per_node": 4,
        "nodes": 2,
        "fabric": "nvlink3-nvswitch",
        "network": {"profile": "ib-hdr-200"},
    },
    "model": {"layers": 8, "hidden": 4096, "heads": 32, "vocab": 32000},
    "training": {"seq_len": 2048, "global_batch": 8, "micro_batch": 1},
    "parallelism": {"tp": 4, "pp": 2},
    "software": "megatron-lm-2021",
}


def _rs(**par: Any) -> Any:
    data = {**BASE, "parallelism": {**BASE["parallelism"], **par}}
    return resolve_dict(data)


def test_only_a_scattered_message_is_gathered() -> None:
    rs = _rs()
    (op,) = pp_recv_ops(rs)
    assert op.collective == "all_gather" and op.group == "tp"
    assert op.msg_bytes == 2048 * 4096 * 2  # the whole activation, 16-bit
    assert pp_recv_ops(_rs(sequence_parallel=True)) == []  # stays split along the sequence
    assert pp_recv_ops(_rs(tp=1, pp=2)) == []
    assert pp_recv_ops(_rs(pp=1)) == []


def test_every_received_input_pays_one_gather() -> None:
    rs = _rs()
    sim = Simulation(rs)
    assert sim.p_recv.analytic and sim.p_recv.duration > 0
    res = run_engine(rs)
    m = rs.micro_batches
    layers = sim._chunk_layers[0][0]

    def tp(*progs: Any) -> float:
        return sum(p.categories.get("comm_tp", 0.0) for p in progs)

    per_layer = tp(sim.p_fwd) + tp(sim.p_bwd)
    # Stage 0 receives the m backward inputs; stage 1 the m forward inputs.
    stage0 = (
        m * (layers * per_layer + tp(sim.p_recv, sim.p_emb_f))
        + (m - 1) * tp(sim.p_emb_b)
        + tp(sim.p_emb_b_sync)
    )
    stage1 = (
        m * (layers * per_layer + tp(sim.p_recv, sim.p_head_f))
        + (m - 1) * tp(sim.p_head_b)
        + tp(sim.p_head_b_sync)
    )
    assert res.classes[0].acc["comm_tp"] == pytest.approx(stage0, rel=1e-9)
    assert res.classes[1].acc["comm_tp"] == pytest.approx(stage1, rel=1e-9)
    assert tp(sim.p_recv) == sim.p_recv.duration  # the gather is TP time
