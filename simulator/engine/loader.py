"""How much a step's data loader reads and how long its storage latency holds it: the input
bytes per node (which ranks read under the stack) and the first-byte latency over the loader's
window of requests in flight. The read itself runs in the simulation
(:meth:`simulator.engine.setup.SimulationBase.loader`) and in the direct path."""

from __future__ import annotations

from typing import Any

from ..config.scenario import ResolvedScenario
from ..config.software import on
from ..network.flows import FlowNetwork
from ..network.layout import Layout
from .linkbusy import solo_time

# Read requests a data loader keeps in flight per reader rank: Megatron-LM's --num-workers
# default of 2 (megatron/training/arguments.py) times PyTorch DataLoader's default
# prefetch_factor of 2 (torch.utils.data.DataLoader). The storage's first-byte latency is paid
# once per wave of requests, not once per micro-batch in series.
LOADER_REQUESTS_IN_FLIGHT = 4


def loader_latency_s(rs: ResolvedScenario, micro_batches: int) -> float:
    """The storage latency a step's input reads pay: the first request's in full, then the
    others streaming through the loader's in-flight window (linear in the micro-batches, so
    a pipeline's steady state extrapolates exactly)."""
    waves = 1.0 + max(0, micro_batches - 1) / LOADER_REQUESTS_IN_FLIGHT
    return rs.storage.latency_ms.value * 1e-3 * waves


def loader_bytes_per_node(rs: ResolvedScenario, lay: Layout) -> list[float]:
    """Training data each node reads per step: every reader rank (under a Megatron-style stack
    TP rank 0 on the first and last pipeline stages, else every rank:
    :meth:`Layout.loader_ranks_per_node`) reads its DP replica's share of the step's samples
    in full."""
    total = rs.training.tokens_per_step * rs.training.input_bytes_per_token
    per_reader = total / rs.dp
    ends = on(rs.software.loader_on_pipeline_ends)
    return [n * per_reader for n in lay.loader_ranks_per_node(ends)]


def loader_done_alone(
    rs: ResolvedScenario, lay: Layout, net: FlowNetwork, micro_batches: int
) -> float:
    """When the step's input has been read: the busiest node's read, alone on the storage
    links (nothing else crosses them), after the storage latency. Symmetric mode's loader as
    the event simulation runs it, in closed form."""
    per_node = loader_bytes_per_node(rs, lay)
    busiest = max(range(len(per_node)), key=per_node.__getitem__)
    t = loader_latency_s(rs, micro_batches)
    if per_node[busiest] <= 0:
        return t  # no input to read (input_bytes_per_token: 0)
    links: list[tuple[Any, float]] = [(("storage_client", busiest), 1.0)]
    if rs.storage.aggregate_read_gbps is not None:
        links.append((("storage_agg",), sum(per_node) / per_node[busiest]))
    return t + solo_time(net.resolve(links), per_node[busiest])


__all__ = [
    "LOADER_REQUESTS_IN_FLIGHT",
    "loader_bytes_per_node",
    "loader_done_alone",
    "loader_latency_s",
]
