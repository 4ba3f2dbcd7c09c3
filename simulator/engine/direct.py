"""The step without the event queue, where nothing the engine moves can contend.

A pipeline whose passes are analytic (every collective in them timed in closed form) and whose
sends block the compute stream is a max-plus system: each pass starts at the later of its
stage's previous work and its input's arrival, lasts a fixed time, and its send arrives a fixed
time later. This module builds that system from the schedule of every rank class, solves it
with :mod:`.maxplus` (numpy, a stage at a time), books each interval to the category the event
engine books it to, then adds the step's tail (the gradient reduction after the pipeline, the
optimizer, the parameter gather of ZeRO-1/2) and the data loader the same way.

A transfer's fixed time is the one it has alone on its links. The walk records when each
transfer holds each link, and the answer stands only if no two of them ever share a link at
once: then every flow ran at its solo rate, and the event engine, which follows the same
dynamics, produces the same times. Otherwise, or outside the domain (overlapped gradient
reduction or parameter gathers, ZeRO-3/FSDP, non-blocking sends, collectives through the flow
network inside a pass, full mode, traces), :func:`run_direct` returns ``None`` and
the event engine runs; it stays the reference.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..config.scenario import ResolvedScenario
from ..network.flows import Link
from ..workload.comm import gather_buckets, grad_bytes_per_param, pp_message_bytes
from ..workload.memory import shard_group
from .linkbusy import LinkBusy, solo_time
from .loader import loader_done_alone
from .program import Program
from .results import EngineResult, RankResult
from .schedule import schedule_arrays
from .setup import PROGRAMS
from .sim import Simulation

if TYPE_CHECKING:  # numpy loads with the walk, not with the simulate path
    import numpy as np

    from .maxplus import StagePasses


def _effective(sim: Simulation, prog: Program) -> Program | None:
    """The program a pass runs when its class's DP and pipeline streams are idle, as they
    always are here during a pass: itself if analytic, else its analytic twin (TP timed in
    closed form, see ``PassRunner.run_items``), else ``None``."""
    if prog.analytic:
        return prog
    rest = sim.twin_rest.get(id(prog))
    if rest is not None and rest[0].analytic:
        return rest[0]
    return None


def may_walk(rs: ResolvedScenario) -> bool:
    """What the scenario alone says of the walk's domain (see :func:`_in_domain`), checked
    before a :class:`Simulation` is built: False where the walk cannot apply whatever the
    programs turn out to be."""
    par = rs.parallelism
    if rs.pp <= 1 or par.overlap.pp_p2p:
        return False
    if rs.dp_cp > 1:
        z = rs.zero_stage
        if z >= 3 or par.overlap.dp_grad or shard_group(rs) < rs.dp_cp:
            return False
        if z in (1, 2) and par.overlap.param_gather:
            return False
    return True


def _in_domain(sim: Simulation) -> bool:
    rs = sim.rs
    if sim.full or sim.tracing or sim.p <= 1:
        return False
    if rs.parallelism.overlap.pp_p2p:
        return False  # sends on their own streams run beside compute and beside each other
    if any(_effective(sim, getattr(sim, name)) is None for name in PROGRAMS):
        return False
    if rs.dp_cp > 1:
        # ZeRO-2/3 reduce each micro-batch's gradients inside the pipeline: the event engine
        if sim.z >= 2 or sim.ov.dp_grad or sim.shard_n < rs.dp_cp:
            return False
        if sim.z in (1, 2) and sim.ov.param_gather:
            return False
    return True


class _Walk:
    """The walk over one step's schedule; see the module docstring."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.busy = LinkBusy()
        self.comm = sim.comm
        self.ops = 0

    def _collective(
        self, rank: int, kind: str, coll: str, size: float, t: float, repeat: int = 1
    ) -> float:
        """``repeat`` collectives back to back from ``t``, alone on their links: the end."""
        ep = self.comm.endpoint(rank, kind)
        if size <= 0 or ep.n <= 1:
            return t
        phases = [
            (ph.latency, self.comm.links(ep, ph.tier, ph.port) if ph.wire_bytes > 0 else None, ph)
            for ph in self.comm._plan(rank, kind, coll, size)
        ]
        timed = [
            (lat, links, solo_time(links, ph.wire_bytes) if links else 0.0)
            for lat, links, ph in phases
        ]
        starts: dict[int, list[float]] = {}
        for _ in range(repeat):
            for j, (lat, links, dur) in enumerate(timed):
                t += lat
                if links is not None:
                    starts.setdefault(j, []).append(t)
                    t += dur
        for j, got in starts.items():
            _lat, links, dur = timed[j]
            assert links is not None
            self.busy.add(links, got, dur)
        return t

    def _shapes(self, s: int) -> tuple[dict[tuple[str, int, bool], int], list[tuple]]:
        """The few distinct passes stage ``s`` runs. A pass shape is
        (needs input, input key offset, program durations, send or None, program runs); a send
        is (route, α, solo time, key offset at the receiver, receiving stage). Keys are
        ``mb · stride + offset``."""
        sim = self.sim
        p, v = sim.p, sim.v
        rank = sim.ranks[s]

        def eff(prog: Program) -> Program:
            out = _effective(sim, prog)
            assert out is not None  # _in_domain checked
            return out

        index: dict[tuple[str, int, bool], int] = {}
        shapes: list[tuple] = []
        for kind in ("F", "B"):
            fwd = kind == "F"
            for ch in range(v):
                for sync in (False, True) if not fwd else (False,):
                    layers = sim._chunk_layers[s][ch]
                    runs: list[tuple[Program, int]] = []
                    if fwd:
                        needs = not (s == 0 and ch == 0)
                        if needs:
                            runs.append((sim.p_recv, 1))
                        if s == 0 and ch == 0:
                            runs.append((sim.p_emb_f, 1))
                        runs.append((sim.p_fwd, layers))
                        if s == p - 1 and ch == v - 1:
                            runs.append((sim.p_head_f, 1))
                    else:
                        needs = not (s == p - 1 and ch == v - 1)
                        if needs:
                            runs.append((sim.p_recv, 1))
                        if s == p - 1 and ch == v - 1:
                            runs.append((sim.p_head_b_sync if sync else sim.p_head_b, 1))
                        runs.append((sim.p_bwd_sync if sync else sim.p_bwd, layers))
                        if s == 0 and ch == 0:
                            runs.append((sim.p_emb_b_sync if sync else sim.p_emb_b, 1))
                    runs = [(eff(pr), k) for pr, k in runs]
                    durs = tuple(pr.duration * k for pr, k in runs if pr.duration * k > 0)
                    dst: tuple[int, int] | None = None
                    if fwd and not (s == p - 1 and ch == v - 1):
                        dst = (s + 1, ch) if s < p - 1 else (0, ch + 1)
                    elif not fwd and not (s == 0 and ch == 0):
                        dst = (s - 1, ch) if s > 0 else (p - 1, ch - 1)
                    send = None
                    if dst is not None:
                        route = self._route(rank, sim.ranks[dst[0]])
                        _links, alpha, dur, _spans = self._routes[route]
                        send = (route, alpha, dur, self._offset(fwd, dst[1], dst[0]), dst[0])
                    index[(kind, ch, sync)] = len(shapes)
                    shapes.append((needs, self._offset(fwd, ch, s), durs, send, runs))
        return index, shapes

    def _offset(self, fwd: bool, ch: int, stage: int) -> int:
        return (ch * self.sim.p + stage) * 2 + (1 if fwd else 0)

    def _route(self, src: int, dst: int) -> int:
        """The index of the send route ``src`` → ``dst``: its links, α and solo time."""
        got = self._route_index.get((src, dst))
        if got is None:
            alpha, links = self.comm.p2p_links(src, dst)
            got = self._route_index[(src, dst)] = len(self._routes)
            self._routes.append((links, alpha, solo_time(links, self._msg), []))  # send starts
        return got

    def _passes(self, s: int) -> tuple[StagePasses, np.ndarray, list[tuple]]:
        """Stage ``s``'s passes as the solver takes them, each pass's shape, and the shapes."""
        import numpy as np

        from .maxplus import StagePasses

        sim, v = self.sim, self.sim.v
        index, shapes = self._shapes(s)
        # _shapes numbers the forwards by chunk, then the backwards by (chunk, sync)
        assert index[("F", v - 1, False)] == v - 1 and index[("B", 0, True)] == v + 1
        fwd, mb, ch = schedule_arrays(sim.rs.parallelism.pp_schedule.kind, s, sim.p, sim.m, v)
        # a chunk's last backward is the one that synchronises
        last = np.zeros(v, dtype=mb.dtype)
        np.maximum.at(last, ch[~fwd], mb[~fwd])
        sid = np.where(fwd, ch, v + 2 * ch + (mb == last[ch]))
        stride = v * sim.p * 2
        need = np.array([sh[1] if sh[0] else -1 for sh in shapes])[sid]
        sends = [sh[3] for sh in shapes]
        cost = np.array([0.0 if x is None else x[1] + x[2] for x in sends])[sid]
        to = np.array([-1 if x is None else x[3] for x in sends])[sid]
        hold = np.array([sum(sh[2]) for sh in shapes])[sid] + cost
        passes = StagePasses(
            hold=hold,
            need=np.where(need >= 0, mb * stride + need, -1),
            sends=np.where(to >= 0, mb * stride + to, -1),
            send_cost=cost,
            targets=tuple({x[4] for x in sends if x is not None}),
        )
        return passes, sid, shapes

    def run(self) -> EngineResult | None:
        import numpy as np

        from .maxplus import solve

        sim = self.sim
        p = sim.p
        self._msg = pp_message_bytes(sim.rs)
        self._routes: list[tuple[list[tuple[Link, float]], float, float, list[Any]]] = []
        self._route_index: dict[tuple[int, int], int] = {}
        built = [self._passes(s) for s in range(p)]
        times = solve([b[0] for b in built], sim.m * sim.v * p * 2)
        if times is None:
            return None  # not settled (a deadlock never does): the event engine decides
        results = {r: RankResult(r, sim.lay.coords(r)[3]) for r in sim.ranks}
        ready = [0.0] * p  # when each stage's gradient reduction ends
        for s, ((_passes, sid, shapes), got) in enumerate(zip(built, times, strict=True)):
            self.ops += len(sid)
            rank = sim.ranks[s]
            acc = results[rank].acc
            for j, (k, sh) in enumerate(
                zip(np.bincount(sid, minlength=len(shapes)), shapes, strict=True)
            ):
                for prog, reps in sh[4]:
                    for cat, dt in prog.categories.items():
                        acc[cat] += dt * reps * int(k)
                if sh[3] is not None and k:
                    route, _alpha, d = sh[3][:3]
                    self._routes[route][3].append(got.ends[sid == j] - d)
            acc["pp_bubble"] += got.bubble
            acc["comm_pp"] += got.comm
            ready[s] = self._reduce(s, rank, results[rank], got.ends[-1] if len(got.ends) else 0.0)
        for s in range(p):
            rank = sim.ranks[s]
            self._tail(s, rank, results[rank], ready[s], ready[p - 1 - s])
        for links, _alpha, d, route_starts in self._routes:
            if route_starts:
                self.busy.add(links, list(np.concatenate(route_starts)), d)
        if not self.busy.clear():
            return None
        return self._finish(results)

    def _reduce(self, s: int, rank: int, res: RankResult, t: float) -> float:
        """After the last pass (at ``t``): the gradient reduction; when it ends."""
        sim, rs = self.sim, self.sim.rs
        if rs.dp_cp > 1:
            total, n = sim._grad_buckets(s)
            coll = "all_reduce" if rs.grads_all_reduced else "reduce_scatter"
            t0 = t
            reps = n * (sim.m if sim.z >= 2 else 1)  # ZeRO-2: every micro-batch's gradients
            t = self._collective(rank, sim.gather_kind, coll, total / n, t, repeat=reps)
            res.acc["comm_dp"] += t - t0
        return float(t)

    def _tail(self, s: int, rank: int, res: RankResult, t: float, t_peer: float) -> None:
        """After the gradient reduction (at ``t``; the other end of the pipeline's at
        ``t_peer``): the tied embedding's exchange, optimizer, ZeRO-1/2 parameter gather."""
        sim, rs = self.sim, self.sim.rs
        acc = res.acc
        params = sim._stage_params(s)
        peer = sim._tied_peer(rank, s)
        if peer is not None:
            # As Simulation.run_rank: the shared embedding's gradient, exchanged with the
            # other end once both have reached it.
            alpha, links = self.comm.p2p_links(rank, peer)
            # waiting for the other end is the pipeline's drain (as the event engine books it)
            acc["pp_bubble"] += max(0.0, t_peer - t)
            t = t0 = max(t, t_peer)
            t += alpha
            dur = solo_time(links, sim.tied_bytes)
            self.busy.add(links, [t], dur)
            t += dur
            acc["comm_dp"] += t - t0

        def paced(dt: float, cat: str) -> float:
            """A compute-stream span at the expected slowest GPU's pace, booked as
            Simulation's ``paced`` books it; its length."""
            acc[cat] += dt
            acc["straggler"] += dt * (sim.pace - 1.0)
            return dt * sim.pace

        if sim.bucket_copy:
            t += paced(sim.timer.memory_time(2.0 * params * grad_bytes_per_param(rs)), "compute")
        shard = params / (sim.shard_n if sim.z >= 1 else 1)
        t += paced(sim._optimizer_time(shard, params, sim._stage_tensors(s)), "optimizer")
        if rs.dp_cp > 1 and sim.z in (1, 2) and not sim.ov.param_gather:
            # in the overlapped path's buckets, one after another (Simulation._gather_exposed)
            each, n = gather_buckets(rs, params, s)
            t0 = t
            for _ in range(n):
                t = self._collective(rank, sim.gather_kind, "all_gather", each, t)
            acc["comm_dp"] += t - t0
        res.finish = t

    def _loader(self) -> float:
        sim = self.sim
        return loader_done_alone(sim.rs, sim.lay, sim.net, sim.m)

    def _finish(self, results: dict[int, RankResult]) -> EngineResult:
        sim = self.sim
        loader = self._loader()
        finish = max(r.finish for r in results.values())
        step = max(finish, loader)
        for r in results.values():
            r.acc["pp_bubble"] += finish - r.finish
            r.acc["data_stall"] += step - finish
        classes = {s: results[sim.ranks[s]] for s in range(sim.p)}
        return EngineResult(
            step, results, classes, "symmetric", self.ops, None, loader, direct=True
        )


def run_direct(rs: ResolvedScenario) -> EngineResult | None:
    """The symmetric-mode result computed without the event queue, or ``None`` where that is
    not exact (see the module docstring)."""
    sim = Simulation(rs)
    return _Walk(sim).run() if _in_domain(sim) else None


def walk_or_simulation(rs: ResolvedScenario) -> EngineResult | Simulation:
    """The walk's result where it is exact, else a fresh :class:`Simulation` of ``rs`` to run
    (built once when the walk was not tried)."""
    sim = Simulation(rs)
    if not _in_domain(sim):
        return sim
    res = _Walk(sim).run()
    return res if res is not None else Simulation(rs)


def run_symmetric(rs: ResolvedScenario) -> EngineResult:
    """One symmetric-mode run: without the event queue where that is exact, else event by
    event."""
    got = walk_or_simulation(rs)
    return got if isinstance(got, EngineResult) else got.run()


__all__ = ["may_walk", "run_direct", "run_symmetric", "walk_or_simulation"]
