"""The data loader: which nodes read training data, and the stall when storage is slow.

Megatron builds its data iterators on TP rank 0 of the first and last pipeline stages (the
first needs the tokens, the last the labels); the other stages read nothing. So with a deep
pipeline the nodes of those two stages carry the whole step's reads.
"""

from __future__ import annotations

import pytest
from conftest import inline_scenario

from simulator.config.loading import resolve_dict
from simulator.engine.loader import (
    LOADER_REQUESTS_IN_FLIGHT,
    loader_bytes_per_node,
    loader_latency_s,
)
from simulator.network.layout import Layout
from simulator.simulate import simulate

READ_GBPS = 10.0  # conftest's test storage, per node, no aggregate ceiling
LATENCY_S = 1e-3


def test_reader_ranks_per_node() -> None:
    # One stage per node, TP over the node: TP rank 0 of the first and last stage read.
    assert Layout(tp=8, cp=1, dp=1, pp=4, gpus_per_node=8).loader_ranks_per_node() == (1, 0, 0, 1)
    # No pipeline: every TP group's rank 0.
    assert Layout(tp=2, cp=1, dp=8, pp=1, gpus_per_node=8).loader_ranks_per_node() == (4, 4)
    # Each CP rank reads its replica's samples in full and slices them.
    assert Layout(tp=1, cp=2, dp=4, pp=1, gpus_per_node=8).loader_ranks_per_node() == (8,)
    # A whole pipeline inside one node: that node holds both reading stages.
    lay = Layout(tp=2, cp=1, dp=2, pp=2, gpus_per_node=8)
    assert lay.loader_ranks_per_node() == (4,)
    assert Layout(tp=1, cp=1, dp=2, pp=8, gpus_per_node=4).loader_ranks_per_node() == (2, 0, 0, 2)


def _starved(pp: int, tp: int, full: bool = False) -> tuple[float, float, int]:
    data = inline_scenario("llama3-8b", nodes=4, gpus_per_node=8, global_batch=32, tp=tp, pp=pp)
    data["training"]["input_bytes_per_token"] = 1e6
    rs = resolve_dict(data)
    res = simulate(rs, scaling=False, full=full)
    total = rs.training.tokens_per_step * 1e6
    return res.metrics.step_time_s, total, rs.micro_batches


@pytest.mark.parametrize("full", [False, True])
def test_a_deep_pipeline_reads_on_its_first_and_last_nodes(full: bool) -> None:
    # PP4 over 4 nodes, DP 1: node 0 reads the tokens, node 3 the labels, each the whole step.
    step, total, m = _starved(pp=4, tp=8, full=full)
    assert step == pytest.approx(total / (READ_GBPS * 1e9) + _waves(m) * LATENCY_S, rel=1e-9)
    # No pipeline, DP 4: each node reads a quarter.
    step1, total1, m1 = _starved(pp=1, tp=8, full=full)
    assert total1 == total
    assert step1 == pytest.approx(total / 4 / (READ_GBPS * 1e9) + _waves(m1) * LATENCY_S, rel=1e-9)


def _waves(m: int) -> float:
    """Windows of read requests: the loader keeps LOADER_REQUESTS_IN_FLIGHT in flight."""
    return 1.0 + (m - 1) / LOADER_REQUESTS_IN_FLIGHT


def test_storage_latency_is_paid_per_wave_of_requests_not_per_micro_batch() -> None:
    data = inline_scenario("llama3-8b", nodes=1, gpus_per_node=8, global_batch=512, tp=8)
    data["cluster"]["storage"] = {
        "profile": "object-store",
    }
    rs = resolve_dict(data)
    assert rs.micro_batches == 512
    lat = rs.storage.latency_ms.value * 1e-3
    assert loader_latency_s(rs, rs.micro_batches) == pytest.approx(
        lat * (1 + 511 / LOADER_REQUESTS_IN_FLIGHT)
    )
    assert loader_latency_s(rs, 1) == pytest.approx(lat)


def test_every_reader_reads_its_replicas_share() -> None:
    data = inline_scenario("llama3-8b", nodes=4, gpus_per_node=8, global_batch=32, tp=2, pp=2)
    rs = resolve_dict(data)
    lay = Layout(rs.tp, rs.cp, rs.dp, rs.pp, rs.gpus_per_node)
    per_node = loader_bytes_per_node(rs, lay)
    total = rs.training.tokens_per_step * rs.training.input_bytes_per_token
    # First and last stage each read the step once: twice the step's bytes in all.
    assert sum(per_node) == pytest.approx(2 * total)
    assert len(per_node) == rs.nodes


def test_stacks_without_the_megatron_loader_read_on_every_rank() -> None:
    """torchtitan, FSDP and DDP build a data loader per rank: with TP each rank of the group
    reads the same samples; without a pipeline or TP the two rules agree."""
    assert Layout(tp=2, cp=1, dp=4, pp=2, gpus_per_node=8).loader_ranks_per_node(False) == (8, 8)
    data = inline_scenario("llama3-8b", nodes=2, gpus_per_node=8, global_batch=32, tp=2)
    megatron = resolve_dict(data)
    titan = resolve_dict({**data, "software": "torchtitan"})
    lay = Layout(megatron.tp, megatron.cp, megatron.dp, megatron.pp, megatron.gpus_per_node)
    total = megatron.training.tokens_per_step * megatron.training.input_bytes_per_token
    assert sum(loader_bytes_per_node(megatron, lay)) == pytest.approx(total)
    assert sum(loader_bytes_per_node(titan, lay)) == pytest.approx(2 * total)
    plain = resolve_dict({**inline_scenario("llama3-8b", nodes=2, global_batch=32)})
    plain_titan = resolve_dict(
        {**inline_scenario("llama3-8b", nodes=2, global_batch=32), "software": "torchtitan"}
    )
    lay1 = Layout(1, 1, 16, 1, 8)
    assert loader_bytes_per_node(plain, lay1) == loader_bytes_per_node(plain_titan, lay1)
