"""The probe's training phases: a small real training step (DDP or FSDP), with and without
gradient synchronisation; and, for ``validate``, a list of other training jobs, each timed right
after a check of the machine's speed."""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from pathlib import Path
from typing import Any

from .probe_base import (
    ProbeBase,
)


class TrainPhase(ProbeBase):
    def _job(self, cfg: dict[str, int]) -> tuple[Any, Any, str, int]:
        """(model, step function, wrapper, parameter count) of the probe transformer ``cfg``
        under DDP (or FSDP) when there are several ranks."""
        torch = self.torch
        from .model import ProbeTransformer

        torch.manual_seed(0)
        model = ProbeTransformer(
            **{k: cfg[k] for k in ("layers", "hidden", "heads", "vocab", "seq")}
        ).to(self.device)
        params = sum(p.numel() for p in model.parameters())
        wrap = "none"
        if self.pg and self.world > 1:
            if self.args.fsdp:
                from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

                model = FSDP(model)  # type: ignore[assignment]
                wrap = "fsdp"
            else:
                from torch.nn.parallel import DistributedDataParallel as DDP

                model = DDP(model, bucket_cap_mb=25)  # type: ignore[assignment]
                wrap = "ddp"
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        g = torch.Generator().manual_seed(self.rank)
        tokens = torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["seq"] + 1), generator=g)
        tokens = tokens.to(self.device)
        lossf = torch.nn.functional.cross_entropy

        def step(grad_sync: bool = True, rows: int | None = None) -> float:
            """One training step; ``rows``: on the first ``rows`` sequences of the batch."""
            opt.zero_grad(set_to_none=True)
            x = tokens[:rows]
            with contextlib.nullcontext() if grad_sync else model.no_sync():  # type: ignore[operator]
                logits = model(x[:, :-1])
                loss = lossf(logits.reshape(-1, cfg["vocab"]), x[:, 1:].reshape(-1))
                loss.backward()
            opt.step()
            self._sync_dev()
            return float(loss.detach())

        return model, step, wrap, params

    def _timed(self, step: Any, what: str, grad_sync: bool = True) -> list[float]:
        out: list[float] = []
        for i in range(self.train_steps):
            self.beat(detail=f"{what} {i}")
            t0 = time.perf_counter()
            step(grad_sync)
            out.append(time.perf_counter() - t0)
        return out

    def _timed_one(
        self, step: Any, what: str, grad_sync: bool, rows: int | None = None
    ) -> list[float]:
        self.beat(detail=what)
        t0 = time.perf_counter()
        step(grad_sync, rows)
        return [time.perf_counter() - t0]

    def phase_jobs(self) -> None:
        """``validate``'s live runs: each job of ``--jobs`` (a JSON list of probe-transformer
        configurations), preceded by the probe's speed-variation work (``--speed-shape``,
        ``--speed-reps``) run by every rank at once, so that each job's prediction can be
        rescaled by how fast the machine is right then."""
        jobs = json.loads(Path(self.args.jobs).read_text())
        rows: list[dict[str, Any]] = []
        self.result["jobs"] = rows
        unit = self.speed_unit()  # type: ignore[attr-defined]
        reps = max(1, int(self.args.speed_reps))
        for job in jobs:
            cfg = {k: int(job[k]) for k in ("layers", "hidden", "heads", "vocab", "seq", "batch")}
            self.beat(detail=f"speed check before {job['name']}")
            self.sync()
            speed = self.gather_floats(
                self.speed_blocks(unit, reps, self.args.speed_blocks, 1)  # type: ignore[attr-defined]
            )
            model, step, wrap, params = self._job(cfg)
            for i in range(self.args.train_warmup):
                self.beat(detail=f"{job['name']} warm-up {i}")
                step()
            self.sync()
            times = [self.reduce_max(t) for t in self._timed(step, job["name"])]
            rows.append(
                {
                    "name": job["name"],
                    "model": cfg,
                    "params": params,
                    "wrapper": wrap,
                    "world_size": self.world,
                    "speed_reps": reps,
                    "speed_block_times_s": speed,
                    "step_times_s": times,
                    "step_time_median_s": statistics.median(times),
                }
            )
            del model, step
            self.save()

    def fit_steps(self, step_s: float, wrap: str) -> None:
        """Timed steps per variant: ``--train-steps``, fewer (at least 3) when the time budget
        left cannot hold them all (the step without gradient sync, the same alone and the step
        itself, each a little slower than a warm-up step)."""
        a = self.args
        # without sync, then twice with it (alternating), and the first alone
        variants: float = 1 + 2 * (wrap == "ddp") + (wrap == "ddp" and self.local_world > 1)
        variants += 0.5 * (self.half_rows() is not None and wrap in ("ddp", "none"))
        step_s = self.reduce_max(step_s)
        left = self.phase_left() - 1.0  # speed checks, gathers and the final save
        fit = int(left / max(1.2 * variants * step_s, 1e-6))
        self.train_steps = max(3, min(int(a.train_steps), fit))
        if self.train_steps < a.train_steps:
            self.result["notes"].append(
                f"time budget ({a.time_budget:g} s): {self.train_steps} timed training steps "
                f"per variant instead of {a.train_steps}"
            )

    def half_rows(self) -> int | None:
        """The smaller batch the step is also timed at without communication (half the
        job's), so that calibration can tell the part of the step that shrinks with the batch
        from the part that does not; None for a batch of one sequence."""
        b = int(self.model_config()["batch"])
        return b // 2 if b >= 2 else None

    def phase_train(self) -> None:
        cfg = self.model_config()
        model, step, wrap, params = self._job(cfg)

        def timed(what: str, grad_sync: bool = True) -> list[float]:
            return self._timed(step, what, grad_sync)

        warm = 0.0
        for i in range(self.args.train_warmup):
            self.beat(detail=f"train warm-up {i}")
            t0 = time.perf_counter()
            step()
            warm = time.perf_counter() - t0
        self.fit_steps(warm, wrap)
        # The same step without gradient synchronisation (DDP's no_sync: no all-reduce, no
        # bucket copies), every rank at once: the compute-stream work of one step on a device
        # whose host is fully busy, as the simulator's compute and optimizer time describe it.
        compute_only: list[list[float]] | None = None
        alone: list[float] | None = None
        # The machine's speed right when the in-step factor is measured, checked the way
        # validate checks it before each live job: its drift reference.
        sv = self.result.get("speed_variation") or {}
        unit = self.speed_unit()  # type: ignore[attr-defined]
        reps = int(sv.get("reps") or 1)
        check: dict[str, Any] = {"reps": reps, "shape": list(unit.shape)}
        self.result["train_speed_check"] = check
        self.sync()
        check["block_times_s"] = self.gather_floats(
            self.speed_blocks(unit, reps, self.args.speed_blocks, 1)  # type: ignore[attr-defined]
        )
        paired: list[float] = []
        half = self.half_rows() if wrap in ("ddp", "none") else None
        halves: list[float] = []
        if half is not None:
            self.beat(detail="train warm-up at half batch")
            step(wrap == "none", half)
        if wrap == "ddp":
            # Steps without and with gradient sync alternate, so that the machine's drift moves
            # both alike: the paired differences are what synchronisation costs in the step.
            # Each step without sync is followed by two with it, and the second is the one
            # timed: the first after a no_sync step runs slower than a steady one (measured on
            # the 2-core VM: paired differences 30-50 ms where steady steps differ by 20-40).
            self.sync()
            mine: list[float] = []
            synced: list[float] = []
            for i in range(self.train_steps):
                mine += self._timed_one(step, f"train step without gradient sync {i}", False)
                if half is not None:
                    what = f"train step without gradient sync at half batch {i}"
                    halves += self._timed_one(step, what, False, half)
                self._timed_one(step, f"train step {i} (settling)", True)
                synced += self._timed_one(step, f"train step {i}", True)
            compute_only = self.gather_floats(mine)
            slowest = [max(r[i] for r in compute_only) for i in range(len(mine))]
            paired = [self.reduce_max(t) - c for t, c in zip(synced, slowest, strict=True)]

            # ... and by one process per host while the host's others sleep: how much of the
            # difference is the host's other devices being busy (shared caches, memory bus).
            def by_itself() -> list[float]:
                check["alone_block_times_s"] = self.speed_blocks(  # type: ignore[attr-defined]
                    unit, reps, self.args.speed_blocks, 1
                )
                return timed("train step without gradient sync, alone on the host", False)

            blocks = check["block_times_s"][self.rank]
            alone = self.alone_on_host(
                by_itself, sum(blocks) * (1 + 1 / len(blocks)) + sum(compute_only[self.rank])
            )
        self.sync()
        if wrap == "ddp":
            times = synced  # the steady synchronised steps timed above
        elif half is not None:  # one process: full and half batch alternate
            times = []
            for i in range(self.train_steps):
                times += self._timed_one(step, f"train step {i}", True)
                halves += self._timed_one(step, f"train step at half batch {i}", True, half)
        else:
            times = timed("train step")
        if wrap == "none":  # one process: the step is all compute-stream work
            compute_only = [list(times)]
        if paired:
            self.result["train_sync_cost"] = {
                "how": "paired: a step without gradient sync, one with it to settle, then the "
                "timed one with it; slowest rank of each",
                "differences_s": paired,
                "median_s": statistics.median(paired),
            }
        # per-step time = slowest rank's (MAX over ranks, step by step)
        times = [self.reduce_max(t) for t in times]
        self.result["train"] = {
            "model": {
                **cfg,
                "mlp": "gelu",
                "norm": "layernorm",
                "position": "learned",
                "tied_embeddings": False,
                "linear_bias": False,
                "attention": "scaled_dot_product_attention(is_causal=True)",
            },
            "params": params,
            "dtype": "fp32",
            "optimizer": "adamw (foreach)",
            "wrapper": wrap,
            "bucket_cap_mb": 25,
            "world_size": self.world,
            "nodes": self.nodes,
            "procs_per_node": self.local_world,
            "threads_per_process": self.threads,
            "batch_per_rank": cfg["batch"],
            "warmup_steps": self.args.train_warmup,
            "step_times_s": times,
            "step_time_median_s": statistics.median(times),
            "step_time_min_s": min(times),
        }
        if compute_only is not None:
            self.result["train"].update(
                {
                    "compute_step_times_s": compute_only,
                    "compute_step_median_s": statistics.median(
                        t for rank_times in compute_only for t in rank_times
                    ),
                    "compute_step_how": (
                        "the same step with DDP's no_sync (no all-reduce, no bucket copies), "
                        "every rank at once; per rank"
                        if wrap == "ddp"
                        else "the step itself (one process: no communication)"
                    ),
                }
            )
        if halves:
            per_rank = self.gather_floats(halves) if wrap == "ddp" else [halves]
            self.result["train"].update(
                {
                    "half_batch": half,
                    "compute_half_step_times_s": per_rank,
                    "compute_half_step_median_s": statistics.median(
                        t for rank_times in per_rank for t in rank_times
                    ),
                }
            )
        if alone:  # rank 0 is local rank 0 of its host
            self.result["train"].update(
                {
                    "alone_compute_step_times_s": alone,
                    "alone_compute_step_median_s": statistics.median(alone),
                }
            )
