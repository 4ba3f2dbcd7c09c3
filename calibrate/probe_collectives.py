"""The probe's collective sweep: every collective over each process group, timed the nccl-tests
way."""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

from .probe_base import (
    COLLECTIVES,
    ProbeBase,
    bus_factor,
)


class CollectivePhase(ProbeBase):
    def _groups(self) -> list[tuple[str, Any, list[int]]]:
        """(label, group handle, ranks) for this rank: the world when one node; intra-node and
        inter-node groups when several (every rank creates every group, as torch requires)."""
        dist = self.dist
        if self.nodes <= 1:
            return [("intra", None, list(range(self.world)))]
        mine: list[tuple[str, Any, list[int]]] = []
        for n in range(self.nodes):
            ranks = list(range(n * self.local_world, (n + 1) * self.local_world))
            g = dist.new_group(ranks) if len(ranks) > 1 else None
            if self.rank in ranks and len(ranks) > 1:
                mine.append(("intra", g, ranks))
        for lr in range(self.local_world):
            ranks = [n * self.local_world + lr for n in range(self.nodes)]
            g = dist.new_group(ranks)
            if self.rank in ranks:
                mine.append(("inter", g, ranks))
        return mine

    def _coll_fn(self, op: str, nbytes: int, group: Any, ranks: list[int]) -> tuple[Any, str]:
        torch, dist = self.torch, self.dist
        n = len(ranks)
        elems = max(n, nbytes // 4 // n * n)
        dev = self.device
        kw = {"group": group} if group is not None else {}
        if op == "all_reduce":
            buf = torch.ones(elems, device=dev)
            return (lambda: dist.all_reduce(buf, **kw)), "all_reduce"
        if op == "broadcast":
            buf = torch.ones(elems, device=dev)
            return (lambda: dist.broadcast(buf, src=ranks[0], **kw)), "broadcast"
        if op == "all_gather":
            inp = torch.ones(elems // n, device=dev)
            outp = torch.empty(elems, device=dev)
            fn = getattr(dist, "all_gather_single", None) or getattr(
                dist, "all_gather_into_tensor", None
            )
            if fn is not None and self._works(lambda: fn(outp, inp, **kw)):
                return (lambda: fn(outp, inp, **kw)), fn.__name__
            outs = list(outp.chunk(n))
            return (lambda: dist.all_gather(outs, inp, **kw)), "all_gather(list)"
        if op == "reduce_scatter":
            inp = torch.ones(elems, device=dev)
            outp = torch.empty(elems // n, device=dev)
            fn = getattr(dist, "reduce_scatter_single", None) or getattr(
                dist, "reduce_scatter_tensor", None
            )
            if fn is not None and self._works(lambda: fn(outp, inp, **kw)):
                return (lambda: fn(outp, inp, **kw)), fn.__name__
            me = ranks.index(self.rank)

            def fallback() -> None:
                dist.all_reduce(inp, **kw)
                outp.copy_(inp[me * (elems // n) : (me + 1) * (elems // n)])

            return fallback, "fallback: all_reduce + slice (no reduce_scatter in this backend)"
        if op == "all_to_all":
            inp = torch.ones(elems, device=dev)
            outp = torch.empty(elems, device=dev)
            if self._works(lambda: dist.all_to_all_single(outp, inp, **kw)):
                return (lambda: dist.all_to_all_single(outp, inp, **kw)), "all_to_all_single"
            ins, outs = list(inp.chunk(n)), list(outp.chunk(n))

            def a2a_p2p() -> None:
                me = ranks.index(self.rank)
                reqs = []
                for j, r in enumerate(ranks):
                    if r == self.rank:
                        outs[j].copy_(ins[j])
                        continue
                    reqs.append(dist.isend(ins[j], r, **kw))
                    reqs.append(dist.irecv(outs[j], r, **kw))
                for q in reqs:
                    q.wait()
                del me

            return a2a_p2p, "fallback: pairwise isend/irecv (no all_to_all in this backend)"
        if op == "p2p":
            buf = torch.ones(max(1, nbytes // 4), device=dev)
            a, b = ranks[0], ranks[1]

            def pingpong() -> None:
                # One iteration = a→b and b→a; the timing divides by 2 (one-way time).
                if self.rank == a:
                    dist.send(buf, b, **kw)
                    dist.recv(buf, b, **kw)
                elif self.rank == b:
                    dist.recv(buf, a, **kw)
                    dist.send(buf, a, **kw)

            return pingpong, "send/recv ping-pong between the group's first two ranks (t/2)"
        raise ValueError(op)

    def _works(self, fn: Any) -> bool:
        try:
            fn()
            ok = 1.0
        except (RuntimeError, NotImplementedError, ValueError, AttributeError):
            ok = 0.0
        # every rank must agree, or the next collective would mismatch
        return self.reduce_max(1.0 - ok) == 0.0

    def phase_collectives(self) -> None:
        a = self.args
        rows: list[dict[str, Any]] = []
        self.result["collectives"] = rows
        if self.world <= 1:
            self.result["notes"].append("world size 1: no collectives measured")
            return
        # Half the budget when other phases follow (they size themselves to the rest).
        later = [p for p in self.wanted if p not in ("collectives", "jobs")]
        share = 0.5 if later else 1.0
        self.deadline = self.t_start + share * a.time_budget
        sizes = []
        s = 1024
        while s <= a.max_bytes:
            sizes.append(s)
            s *= a.size_factor
        groups = self._groups()
        impls: dict[str, str] = {}
        budget_hit = False
        # Small sizes of every collective first, and the two smallest always (a busy machine
        # can spend a short budget on start-up alone), so every collective has the two points
        # a latency-bandwidth fit needs.
        always = set(sizes[:2])
        for nbytes in sizes:
            if budget_hit:
                break
            for op in COLLECTIVES:
                for label, g, ranks in groups:
                    if nbytes not in always and self.over_budget():
                        budget_hit = True
                        self.result["notes"].append(
                            f"time budget ({a.time_budget:g} s) reached: collectives stopped "
                            f"before {op} {label} {nbytes} B"
                        )
                        break
                    self.beat(detail=f"{op} {label} {nbytes} B")
                    row = self._time_coll(op, nbytes, g, ranks)
                    row["group"] = label
                    impls[op] = row.pop("impl")
                    if self.rank == ranks[0]:
                        rows.append(row)
                    # inter-node rows are measured concurrently by every local rank; rank 0 keeps
                    # its own group's figures
                if budget_hit:
                    break
            self.save()
        self.result["collective_impl"] = impls
        fallbacks = {k: v for k, v in impls.items() if v.startswith("fallback")}
        for k, v in fallbacks.items():
            self.result["notes"].append(f"{k}: {v}")
            sys.stderr.write(f"probe: {k} measured with {v}\n")

    def _time_coll(self, op: str, nbytes: int, group: Any, ranks: list[int]) -> dict[str, Any]:
        n = len(ranks)
        fn, impl = self._coll_fn(op, nbytes, group, ranks)
        kw = {"group": group} if group is not None else {}
        for _ in range(self.args.warmup):
            fn()
        self.dist.barrier(**kw)
        t0 = time.perf_counter()
        fn()
        self._sync_dev()
        first = time.perf_counter() - t0
        # The same iteration count on every rank: from the slowest rank's first iteration.
        first = self._group_max(first, group)
        iters = int(min(self.args.max_iters, max(self.args.min_iters, 0.05 / max(first, 1e-7))))
        # Three timed runs, the median kept: one descheduled moment on a shared CPU spoils a
        # run, not the figure (nccl-tests' single average assumes a quiet machine).
        per_run = max(1, iters // 3)
        runs = []
        for _ in range(3):
            self.dist.barrier(**kw)
            t0 = time.perf_counter()
            for _ in range(per_run):
                fn()
            self._sync_dev()
            runs.append((time.perf_counter() - t0) / per_run)
        iters = 3 * per_run
        t = statistics.median(runs)
        if op == "p2p":
            t /= 2.0
        t = self._group_max(t, group)
        size = nbytes if op != "p2p" else max(1, nbytes // 4) * 4
        size = max(n, nbytes // 4 // n * n) * 4 if op != "p2p" else size
        algbw = size / t / 1e9
        return {
            "op": op,
            "group_size": n if op != "p2p" else 2,
            "ranks": ranks,
            "bytes": size,
            "time_s": t,
            "iters": iters,
            "algbw_gbps": algbw,
            "busbw_gbps": algbw * bus_factor(op, n if op != "p2p" else 2),
            "impl": impl,
        }
