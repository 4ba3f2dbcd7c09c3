"""The step's data loader: how much it reads and how long its storage latency holds it (the
input bytes per node, which ranks read under the stack, and the first-byte latency over the
loader's window of requests in flight), the read as a process of the event simulation
(:class:`LoaderProcess`), and in closed form where it is alone on its links (the direct path and
the steady-state run)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

from ..config.scenario import ResolvedScenario
from ..config.software import on
from ..network.flows import FlowNetwork
from ..network.layout import Layout
from .linkbusy import solo_time
from .tracing import Tracing

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


def storage_links(rs: ResolvedScenario, node: int, agg_weight: float) -> list[tuple[Any, float]]:
    """The flow-network links (key, weight) one node's read crosses: its storage client, and
    the storage system's aggregate read bandwidth (where it has one) at ``agg_weight``."""
    links: list[tuple[Any, float]] = [(("storage_client", node), 1.0)]
    if rs.storage.aggregate_read_gbps is not None:
        links.append((("storage_agg",), agg_weight))
    return links


class LoaderProcess(Tracing):
    """The data loader's read as a SimPy process of a simulation (mixed into
    :class:`simulator.engine.setup.SimulationBase`, which provides the attributes below)."""

    rs: ResolvedScenario
    lay: Layout
    env: simpy.Environment
    net: FlowNetwork
    m: int
    p: int
    full: bool
    tracing: bool
    ranks: list[int]
    loader_done: float

    def loader(self) -> Generator:
        """Reads the next step's input while this step runs (one step of prefetch)."""
        rs = self.rs
        per_node = loader_bytes_per_node(rs, self.lay)
        t0 = self.env.now
        yield self.env.timeout(loader_latency_s(rs, self.m))
        busiest = max(range(len(per_node)), key=per_node.__getitem__)
        nodes = [n for n, b in enumerate(per_node) if b > 0] if self.full else [busiest]
        if per_node[busiest] <= 0:
            nodes = []  # no input to read (input_bytes_per_token: 0)
        # Symmetric mode: the busiest node's read stands for all, as many of them as the
        # storage system's total load divided by one.
        weight = sum(per_node) / per_node[busiest] if nodes else 0.0
        jobs = []
        done_at: dict[int, float] = {}
        for node in nodes:
            links = storage_links(rs, node, 1.0 if self.full else weight)
            job = self.net.transfer(links, per_node[node])

            def mark(_ev: Any, n: int = node) -> None:
                done_at[n] = self.env.now

            job.callbacks.append(mark)
            jobs.append(job)
        yield self.env.all_of(jobs)
        self.loader_done = self.env.now
        if self.tracing:
            # Only where data is read: each node until its own read ends (full mode), or the
            # classes of the stages that read (symmetric mode: the busiest node's read).
            if self.full:
                spans = [(n * rs.gpus_per_node, done_at.get(n, self.env.now)) for n in nodes]
            else:
                ends = on(rs.software.loader_on_pipeline_ends)
                spans = [
                    (r, self.env.now)
                    for r in self.ranks
                    if nodes and (not ends or self.lay.coords(r)[3] in (0, self.p - 1))
                ]
            for r, end in spans:
                self._emit(r, "io", "read next batch", t0, end - t0)


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
    links = storage_links(rs, busiest, sum(per_node) / per_node[busiest])
    return t + solo_time(net.resolve(links), per_node[busiest])


__all__ = [
    "LOADER_REQUESTS_IN_FLIGHT",
    "LoaderProcess",
    "loader_bytes_per_node",
    "loader_done_alone",
    "loader_latency_s",
]
