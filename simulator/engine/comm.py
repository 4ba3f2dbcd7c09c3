"""Communication streams, collectives and point-to-point sends, driven by callbacks.

A rank's communication stream runs one :class:`Job` at a time in submission order, like a CUDA
stream. Jobs are not SimPy processes: a job's work schedules its own timeouts and flows and
calls :meth:`Job.complete` when it is done, which starts the next job on the stream. A process
that must wait for a job asks for :meth:`Job.event`; the event is made only then, so work that
nobody waits for costs no extra events. This keeps full mode (every rank simulated) cheap per
event.

A collective runs as one group: in full mode it starts when every member has reached it on its
stream (NCCL's kernels start together), its phases run in lockstep (each ring step waits for the
neighbours), and it ends for all members at once. Each phase is one α timeout for the group,
then one flow per simulated member through the links of that member's tier. In symmetric mode
the group has one simulated member whose flows carry the weight of the class members sharing
each link.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import simpy
from simpy.events import Timeout

from ..network.collectives import choose
from ..network.flows import FlowNetwork, Link
from ..network.nccl import Phase
from ..network.topology import Topology

Label = str | Callable[[], str]
Emit = Callable[[int, str, str, float, float], None]


class Job:
    """One unit of work on a stream; ``complete()`` marks it done."""

    __slots__ = ("stream", "start", "done", "waiter", "t0", "label", "args", "began")

    def __init__(
        self, start: Callable[[Job], None] | None, label: Label = "", args: tuple = ()
    ) -> None:
        self.stream: Stream | None = None
        self.start = start  # called with the job when the stream reaches it
        self.done = start is None
        self.waiter: simpy.Event | None = None
        self.t0 = 0.0
        self.label = label
        self.args = args  # for ``start``
        # When its transfers began: a collective's once every member had arrived, an
        # exchange's once both ends had; until then the job waits on its peers.
        self.began: float | None = None

    def begin(self, now: float) -> None:
        """Start the job's work (its stream, if any, has reached it)."""
        self.t0 = now
        assert self.start is not None, "DONE has no work to begin"
        self.start(self)

    def event(self, env: simpy.Environment) -> simpy.Event | None:
        """An event that fires when the job is done; ``None`` if it already is."""
        if self.done:
            return None
        if self.waiter is None:
            self.waiter = env.event()
        return self.waiter

    def complete(self) -> None:
        self.done = True
        if self.waiter is not None:
            self.waiter.succeed()
        stream = self.stream
        if stream is not None:
            stream.finished(self)


DONE = Job(None)  # work of size zero: nothing to wait for


class Stream:
    """Jobs of one rank's stream, run one at a time in order."""

    __slots__ = ("env", "rank", "name", "queue", "busy", "emit", "busy_s", "since", "on_idle")

    def __init__(self, env: simpy.Environment, rank: int, name: str, emit: Emit | None) -> None:
        self.env = env
        self.rank = rank
        self.name = name
        self.queue: deque[Job] = deque()
        self.busy = False
        self.emit = emit
        self.busy_s = 0.0  # seconds busy before ``since`` (the start of the current busy run)
        self.since = 0.0
        # called once when the stream next goes idle (engine.stretch)
        self.on_idle: Callable[[], None] | None = None

    def busy_time(self) -> float:
        """Seconds this stream has held a job, up to now."""
        return self.busy_s + (self.env.now - self.since if self.busy else 0.0)

    def submit(self, job: Job) -> Job:
        job.stream = self
        if self.busy:
            self.queue.append(job)
        else:
            self.busy = True
            self.since = self.env.now
            job.begin(self.env.now)
        return job

    def finished(self, job: Job) -> None:
        if self.emit is not None:
            label = job.label if isinstance(job.label, str) else job.label()
            self.emit(self.rank, self.name, label, job.t0, self.env.now - job.t0)
        if self.queue:
            self.queue.popleft().begin(self.env.now)
        else:
            self.busy = False
            self.busy_s += self.env.now - self.since
            if self.on_idle is not None:
                watcher, self.on_idle = self.on_idle, None
                watcher()


class Endpoint:
    """One rank's place in one of its communicators (its TP, DP, ... group)."""

    __slots__ = ("rank", "kind", "n", "open", "seq", "fabric", "network", "ported")

    def __init__(self, rank: int, kind: str, n: int, open_groups: dict[int, _Group]) -> None:
        self.rank = rank
        self.kind = kind
        self.n = n
        self.open = open_groups  # shared by the members: collectives waiting for arrivals
        self.seq = 0  # collectives this rank has entered on the communicator
        self.fabric: list[tuple[Link, float]] | None = None
        self.network: list[tuple[Link, float]] | None = None
        # network links plus the fabric port, per ``Phase.port``
        self.ported: dict[float, list[tuple[Link, float]]] = {}


class _Group:
    """One running collective: its phases and the jobs of its simulated members."""

    __slots__ = ("comm", "phases", "members", "phase", "pending")

    def __init__(self, comm: Comm, phases: list[Phase]) -> None:
        self.comm = comm
        self.phases = phases
        self.members: list[tuple[Endpoint, Job]] = []
        self.phase = -1
        self.pending = 0

    def next_phase(self, _ev: Any = None) -> None:
        self.phase += 1
        if self.phase == len(self.phases):
            for _ep, job in self.members:
                job.complete()
            return
        ph = self.phases[self.phase]
        if ph.latency > 0:
            Timeout(self.comm.env, ph.latency).callbacks.append(self.transfer)  # type: ignore[union-attr]
        else:
            self.transfer()

    def transfer(self, _ev: Any = None) -> None:
        ph = self.phases[self.phase]
        if ph.wire_bytes <= 0:
            self.next_phase()
            return
        comm = self.comm
        start = comm.net.start
        self.pending = len(self.members)
        fabric = ph.tier == "fabric"
        port = ph.port
        for ep, _job in self.members:
            links = ep.fabric if fabric else (ep.network if port <= 0 else None)
            if links is None:
                links = comm.links(ep, ph.tier, port)
            start(links, ph.wire_bytes, self.flow_done)

    def flow_done(self) -> None:
        self.pending -= 1
        if self.pending == 0:
            self.next_phase()


class Comm:
    """Collectives and sends of the simulated ranks over the shared flow network."""

    def __init__(
        self,
        env: simpy.Environment,
        topo: Topology,
        net: FlowNetwork,
        full: bool,
        weights: Callable[[int, list[tuple[tuple, float]]], list[tuple[tuple, float]]],
    ) -> None:
        self.env = env
        self.topo = topo
        self.lay = topo.layout
        self.net = net
        self.full = full
        self._weights = weights
        self._p2p: dict[tuple[int, int], tuple[float, list[tuple[Link, float]]]] = {}
        self._plans: dict[tuple, list[Phase]] = {}
        self._endpoints: dict[tuple[int, str], Endpoint] = {}
        self._open: dict[tuple[str, int], dict[int, _Group]] = {}
        self._exchanges: dict[tuple[int, int], Job] = {}

    # -- links and plans ----------------------------------------------------------------------
    def endpoint(self, rank: int, kind: str) -> Endpoint:
        ep = self._endpoints.get((rank, kind))
        if ep is None:
            n = self.topo.shape(rank, kind).n
            comm_key = (kind, self.topo.leader(rank, kind))
            open_groups = self._open.setdefault(comm_key, {})
            ep = self._endpoints[(rank, kind)] = Endpoint(rank, kind, n, open_groups)
        return ep

    def links(self, ep: Endpoint, tier: str, port: float = 0.0) -> list[tuple[Link, float]]:
        """The flow-network links (with weights) one transfer of ``ep`` on ``tier`` crosses;
        a network transfer with ``port`` > 0 also crosses the fabric port (``Phase.port``)."""
        if tier == "fabric":
            if ep.fabric is None:
                raw = self.topo.fabric_links(ep.rank, ep.kind)
                ep.fabric = self.net.resolve(self._weights(ep.rank, raw))
            return ep.fabric
        if port > 0:
            got = ep.ported.get(port)
            if got is None:
                raw = self.topo.network_links(ep.rank, ep.kind)
                raw += self.topo.port_links(ep.rank, ep.kind, port)
                got = ep.ported[port] = self.net.resolve(self._weights(ep.rank, raw))
            return got
        if ep.network is None:
            raw = self.topo.network_links(ep.rank, ep.kind)
            ep.network = self.net.resolve(self._weights(ep.rank, raw))
        return ep.network

    def p2p_links(self, src: int, dst: int) -> tuple[float, list[tuple[Link, float]]]:
        key = (src, dst)
        out = self._p2p.get(key)
        if out is None:
            if self.lay.node(src) == self.lay.node(dst):
                raw = self.topo.fabric_links(src, peer=dst)
                alpha = self.topo.fabric_alpha
            else:
                raw = self.topo.network_links(src, "pp", peer=dst)
                alpha = self.topo.net_alpha
            out = self._p2p[key] = (alpha, self.net.resolve(self._weights(src, raw)))
        return out

    def _plan(self, rank: int, kind: str, coll: str, size: float) -> list[Phase]:
        """The phases of the algorithm chosen on the group's own view of the network: a group
        that spans leaves sees the oversubscribed up-links its traffic crosses."""
        mine = (rank, kind, coll, size)
        plan = self._plans.get(mine)  # a rank's group and tiers never change
        if plan is not None:
            return plan
        shape = self.topo.shape(rank, kind)
        net_tier = self.topo.network_tier(rank, kind)
        fab_tier = self.topo.fabric_tier(rank, kind)
        key = (coll, shape, size, net_tier, fab_tier)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = choose(
                coll,  # type: ignore[arg-type]
                shape,
                size,
                fab_tier,
                net_tier,
            )[1]
        self._plans[mine] = plan
        return plan

    # -- jobs -----------------------------------------------------------------------------------
    def collective(self, ep: Endpoint, coll: str, size: float, label: Label = "") -> Job:
        """A job running one collective on ``ep``'s communicator (not yet submitted);
        :data:`DONE` when there is nothing to do."""
        if size <= 0 or ep.n <= 1:
            return DONE
        return Job(self._arrive, label, (ep, coll, size))

    def _arrive(self, job: Job) -> None:
        ep, coll, size = job.args
        if self.full:
            seq = ep.seq
            ep.seq = seq + 1
            group = ep.open.get(seq)
            if group is None:
                group = ep.open[seq] = _Group(self, self._plan(ep.rank, ep.kind, coll, size))
            group.members.append((ep, job))
            if len(group.members) < ep.n:
                return
            del ep.open[seq]
        else:
            group = _Group(self, self._plan(ep.rank, ep.kind, coll, size))
            group.members.append((ep, job))
        for _ep, member in group.members:
            member.began = self.env.now
        if not any(ph.latency > 0 or ph.wire_bytes > 0 for ph in group.phases):
            # Nothing to time: finish through the event queue, never inside the caller.
            Timeout(self.env, 0.0).callbacks.append(group.next_phase)  # type: ignore[union-attr]
            return
        group.next_phase()

    def send(
        self,
        src: int,
        dst: int,
        size: float,
        on_start: Callable[[], None],
        on_done: Callable[[], None],
        label: Label = "",
    ) -> Job:
        """A job sending ``size`` bytes from ``src`` to ``dst``: α, then the transfer."""
        alpha, links = self.p2p_links(src, dst)
        net = self.net
        env = self.env

        def start(job: Job) -> None:
            on_start()

            def arrived() -> None:
                on_done()
                job.complete()

            def go(_ev: Any = None) -> None:
                net.start(links, size, arrived)

            if alpha > 0:
                Timeout(env, alpha).callbacks.append(go)  # type: ignore[union-attr]
            else:
                go()

        return Job(start, label)

    def exchange(self, rank: int, peer: int, size: float, label: Label = "") -> Job:
        """``rank``'s half of a two-rank all-reduce of ``size`` bytes with ``peer`` (the tied
        embedding's gradient between the pipeline's ends): as NCCL, nothing moves until both
        have launched it; then each sends its buffer to the other, and both are done when
        both transfers have landed."""
        key = (min(rank, peer), max(rank, peer))

        def start(job: Job) -> None:
            waiting = self._exchanges.pop(key, None)
            if waiting is None:
                self._exchanges[key] = job
                return
            jobs = (waiting, job)
            left = [2]
            for j in jobs:
                j.began = self.env.now

            def landed() -> None:
                left[0] -= 1
                if left[0] == 0:
                    for j in jobs:
                        j.complete()

            for src, dst in ((rank, peer), (peer, rank)):
                self.send(src, dst, size, lambda: None, landed).begin(self.env.now)

        return Job(start, label)


__all__ = ["DONE", "Comm", "Endpoint", "Job", "Stream"]
