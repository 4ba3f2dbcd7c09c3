"""The probe's training phase: a small real training step (DDP or FSDP), with and without
gradient synchronisation."""

from __future__ import annotations

import contextlib
import statistics
import time

from .probe_base import (
    ProbeBase,
)


class TrainPhase(ProbeBase):
    def phase_train(self) -> None:
        torch = self.torch
        from .model import ProbeTransformer

        cfg = self.model_config()
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

        def step(grad_sync: bool = True) -> float:
            opt.zero_grad(set_to_none=True)
            with contextlib.nullcontext() if grad_sync else model.no_sync():  # type: ignore[operator]
                logits = model(tokens[:, :-1])
                loss = lossf(logits.reshape(-1, cfg["vocab"]), tokens[:, 1:].reshape(-1))
                loss.backward()
            opt.step()
            self._sync_dev()
            return float(loss.detach())

        def timed(what: str, grad_sync: bool = True) -> list[float]:
            out: list[float] = []
            for i in range(self.args.train_steps):
                self.beat(detail=f"{what} {i}")
                t0 = time.perf_counter()
                step(grad_sync)
                out.append(time.perf_counter() - t0)
            return out

        for i in range(self.args.train_warmup):
            self.beat(detail=f"train warm-up {i}")
            step()
        # The same step without gradient synchronisation (DDP's no_sync: no all-reduce, no
        # bucket copies), every rank at once: the compute-stream work of one step on a device
        # whose host is fully busy, as the simulator's compute and optimizer time describe it.
        compute_only: list[list[float]] | None = None
        alone: list[float] | None = None
        if wrap == "ddp":
            self.sync()
            compute_only = self.gather_floats(timed("train step without gradient sync", False))
            # ... and by one process per host while the host's others wait: how much of the
            # difference is the host's other devices being busy (shared caches, memory bus).
            self.sync()
            if self.local_world > 1 and self.local_rank == 0:
                alone = timed("train step without gradient sync, alone on the host", False)
        self.sync()
        times = timed("train step")
        if wrap == "none":  # one process: the step is all compute-stream work
            compute_only = [list(times)]
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
        if alone:  # rank 0 is local rank 0 of its host
            self.result["train"].update(
                {
                    "alone_compute_step_times_s": alone,
                    "alone_compute_step_median_s": statistics.median(alone),
                }
            )
