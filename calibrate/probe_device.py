"""The probe's per-device phases: GEMMs, per-op overhead and attention; speed variation; memory-
bound copies of growing size; storage. (The training job's own operations:
:mod:`calibrate.probe_job_ops`.)"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from .probe_base import (
    ProbeBase,
)


class DevicePhases(ProbeBase):
    def phase_compute(self) -> None:
        torch = self.torch
        dtypes = ["fp32", "bf16"] + (["fp16"] if self.cuda else [])
        tdt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
        cfg = self.model_config()
        T, h, V = cfg["batch"] * cfg["seq"], cfg["hidden"], cfg["vocab"]
        # The training job's own GEMM shapes (forward and backward), then square sizes, kept
        # in that order so that a short time budget still times the job's. Each call is timed
        # with its operands out of cache, as in a training step, where the other operations
        # have evicted them: on the 2-core VM the job's GEMMs ran 2-3% slower so, and those of
        # a model with a quarter of its hidden size 17-20% (2026-11-24), a cost per call that
        # GEMMs timed back to back hide.
        squares = [(n, n, n) for n in (64, 128, 256, 384, 512, 768, 1024)]
        if self.cuda:
            squares += [(n, n, n) for n in (2048, 4096, 8192)]
        shapes = [
            (T, h, 3 * h),
            (T, h, h),
            (T, h, 4 * h),
            (T, 4 * h, h),
            (T, h, V),
            (T, V, h),
            (h, T, 4 * h),
            (4 * h, T, h),
            (h, T, V),
        ] + squares
        rows: list[dict[str, Any]] = []
        self.result["matmul"] = rows
        a = self.args
        cut = False
        for dname in dtypes:
            for i, (m, k, n) in enumerate(shapes):
                # past the phase's share of the budget, the rest of the sweep is skipped (at
                # least 6 shapes of the training dtype are kept: the fit needs them)
                if (i >= 6 or dname != dtypes[0]) and self.phase_left() < 0:
                    cut = True
                    break
                self.beat(detail=f"matmul {dname} {m}x{k}x{n}")
                x = torch.randn(m, k, device=self.device).to(tdt[dname])
                y = torch.randn(k, n, device=self.device).to(tdt[dname])
                t, warm, it = self._timeit_cold(lambda x=x, y=y: torch.matmul(x, y))
                fl = 2.0 * m * k * n
                rows.append(
                    {
                        "dtype": dname,
                        "m": m,
                        "k": k,
                        "n": n,
                        "flops": fl,
                        "time_s": t,
                        "warm_time_s": warm,
                        "timing": "cold",
                        "iters": it,
                        "tflops": fl / t / 1e12,
                    }
                )
            if cut:
                break
        if cut:
            self.result["notes"].append(
                f"time budget ({a.time_budget:g} s): GEMM sweep cut to {len(rows)} timings"
            )
        self._flush = None  # the cache-emptying buffer's memory back
        self.save()
        # Per-operation overhead (the CPU's "kernel launch"): a one-element in-place add.
        self.beat(detail="op overhead")
        one = torch.zeros(1, device=self.device)
        t, it = self._timeit(lambda: one.add_(1.0), target_s=0.05, max_iters=2000)
        self.result["op_overhead"] = {
            "op": "x.add_(1) on a 1-element tensor",
            "time_s": t,
            "iters": it,
        }
        # The same overhead inside a training step: the probe transformer at a size where its
        # operations do next to no work (hidden 8, 4 tokens), forward, loss and backward: each
        # operation's Python module call, autograd bookkeeping and backward dispatch.
        self.beat(detail="training-step overhead")
        from .model import ProbeTransformer

        tiny = {"layers": 4, "hidden": 8, "heads": 1, "vocab": 16, "seq": 4, "batch": 1}
        net = ProbeTransformer(
            **{k: tiny[k] for k in ("layers", "hidden", "heads", "vocab", "seq")}
        )
        net = net.to(self.device)
        idx = torch.randint(0, tiny["vocab"], (1, tiny["seq"] + 1), device=self.device)

        def tiny_step() -> None:
            logits = net(idx[:, :-1])
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, tiny["vocab"]), idx[:, 1:].reshape(-1)
            )
            loss.backward()

        t, it = self._timeit(tiny_step, target_s=0.1, max_iters=200)
        self.result["step_overhead"] = {
            "model": tiny,
            "what": "forward, cross-entropy and backward of the probe transformer at hidden 8",
            "time_s": t,
            "iters": it,
        }
        # Attention: scaled_dot_product_attention (causal) forward + backward on the training
        # job's shape, FLOPs counted as the simulator does (full s×s, backward = 2× forward);
        # then at half, twice and four times its sequence (batch scaled to keep the tokens):
        # the kernel's efficiency follows the keys each query visits.
        self.beat(detail="attention")
        b, s, nh = cfg["batch"], cfg["seq"], cfg["heads"]
        curve = []
        for seq in sorted({max(16, s // 2), s, 2 * s, 4 * s}):
            bs = max(1, round(b * s / seq))
            curve.append(self._attention(bs, seq, nh, h // nh))
        self.result["attention"] = next(r for r in curve if r["seq"] == s)
        self.result["attention_curve"] = curve

    def _attention(self, b: int, s: int, nh: int, hd: int) -> dict[str, Any]:
        """Causal scaled_dot_product_attention forward + backward at one shape."""
        torch = self.torch
        import torch.nn.functional as F

        q, k_, v = (
            torch.randn(b, nh, s, hd, device=self.device, requires_grad=True) for _ in range(3)
        )

        def attn() -> None:
            o = F.scaled_dot_product_attention(q, k_, v, is_causal=True)
            o.sum().backward()

        t, it = self._timeit(attn)
        fl = 3 * 4.0 * s * nh * hd * b * s
        return {
            "batch": b,
            "seq": s,
            "heads": nh,
            "head_dim": hd,
            "dtype": "fp32",
            "flops_fwd_bwd": fl,
            "time_s": t,
            "iters": it,
            "tflops": fl / t / 1e12,
            "kernel": "scaled_dot_product_attention(is_causal=True)",
        }

    def speed_unit(self) -> Any:
        """The speed-variation work: a GEMM of the probe job's MLP shape and a GELU over its
        output, fp32 (``--speed-shape T,h`` gives the shape when another job runs)."""
        torch = self.torch
        if self.args.speed_shape:
            T, h = (int(x) for x in self.args.speed_shape.split(","))
        else:
            cfg = self.model_config()
            T, h = cfg["batch"] * cfg["seq"], cfg["hidden"]
        x = torch.randn(T, h, device=self.device)
        w = torch.randn(h, 4 * h, device=self.device)

        def unit() -> None:
            torch.nn.functional.gelu(torch.matmul(x, w))

        unit.shape = (T, h)  # type: ignore[attr-defined]
        return unit

    def speed_blocks(self, unit: Any, reps: int, blocks: int, warmup: int) -> list[float]:
        """Seconds of each of ``blocks`` blocks of ``reps`` units run back to back."""
        times: list[float] = []
        with self._local():
            for _ in range(blocks + warmup):
                t0 = time.perf_counter()
                for _ in range(reps):
                    unit()
                self._sync_dev()
                times.append(time.perf_counter() - t0)
        return times[warmup:]

    def phase_speed(self, block_s: float = 0.1, blocks: int = 24, warmup: int = 2) -> None:
        """How much a device's speed varies from one step-sized stretch of work to the next,
        and between devices: every rank at once runs the same block (a GEMM of the training
        job's MLP shape and a GELU over its output) back to back, timed block by block, with no
        synchronisation in between. Feeds ``speed_cv`` (stragglers).

        Then local rank 0 of each host runs a few blocks alone while the host's other processes
        wait: the reference ``validate`` compares a one-process run's speed check with, so that
        the machine's drift is told apart from how busy its host is."""
        unit = self.speed_unit()
        T, h = unit.shape
        # as many blocks as the phase's share holds (the alone blocks add a third), 12 at least
        # (speed_cv is an interquartile spread: it needs a dozen blocks per rank)
        fit = int(self.phase_left() / (1.4 * block_s)) - warmup
        blocks = max(12, min(blocks, fit))
        self.beat(detail="speed variation")
        for _ in range(3):
            unit()
        self._sync_dev()
        t0 = time.perf_counter()
        for _ in range(5):
            unit()
        self._sync_dev()
        per = max((time.perf_counter() - t0) / 5, 1e-7)
        reps = int(self.reduce_max(max(1, round(block_s / per))))
        self.sync()
        per_rank = self.gather_floats(self.speed_blocks(unit, reps, blocks, warmup))
        n_alone = max(4, blocks // 3)
        alone = self.alone_on_host(
            lambda: self.speed_blocks(unit, reps, n_alone, warmup),
            (n_alone + warmup) * max(per_rank[self.rank]),
        )
        self.result["speed_variation"] = {
            "work": f"{reps} × (matmul {T}x{h}x{4 * h} + GELU), fp32",
            "shape": [T, h],
            "reps": reps,
            "block_target_s": block_s,
            "warmup_blocks": warmup,
            "block_times_s": per_rank,
        }
        if alone:
            self.result["speed_variation"]["alone_block_times_s"] = alone

    def memory_copies(self) -> None:
        """Copies (and GELU + copy) from cache-sized to memory-sized tensors."""
        torch = self.torch
        rows: list[dict[str, Any]] = []
        self.result["memory"] = rows
        # Copies from cache-sized to memory-sized tensors (the cache tier's size and
        # bandwidth); GELU + copy at three sizes.
        for mb in (0.5, 1, 2, 4, 8, 16, 32, 64, 128):
            self.beat(detail=f"copy {mb:g} MiB")
            n = int(mb * 2**20) // 4
            src = torch.ones(n, device=self.device)
            dst = torch.empty(n, device=self.device)
            t, it = self._timeit(lambda src=src, dst=dst: dst.copy_(src), max_iters=1000)
            moved = 2 * n * 4  # read + write
            rows.append(
                {
                    "kind": "copy",
                    "bytes": n * 4,
                    "bytes_moved": moved,
                    "time_s": t,
                    "iters": it,
                    "gbps": moved / t / 1e9,
                }
            )
            if mb not in (8, 32, 128):
                continue
            t, it = self._timeit(lambda src=src, dst=dst: dst.copy_(torch.nn.functional.gelu(src)))
            moved = 4 * n * 4  # gelu: read + write a temporary, then copy it
            rows.append(
                {
                    "kind": "gelu+copy",
                    "bytes": n * 4,
                    "bytes_moved": moved,
                    "time_s": t,
                    "iters": it,
                    "gbps": moved / t / 1e9,
                }
            )

        self.save()

    def phase_storage(self) -> None:
        rows: dict[str, Any] = {}
        if self.local_rank != 0:
            return
        base = Path(self.args.storage_path or tempfile.gettempdir())
        size = self.args.storage_bytes
        path = base / f"clustersim-probe-{socket.gethostname()}-{os.getpid()}.bin"
        block = os.urandom(1 << 20)
        try:
            t0 = time.perf_counter()
            with open(path, "wb") as f:
                left = size
                while left > 0:
                    f.write(block[: min(left, len(block))])
                    left -= len(block)
                f.flush()
                os.fsync(f.fileno())
            tw = time.perf_counter() - t0
            self.beat(detail="storage read")
            fd = os.open(path, os.O_RDONLY)
            try:
                if hasattr(os, "posix_fadvise"):
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                t0 = time.perf_counter()
                os.read(fd, 4096)
                first = time.perf_counter() - t0
                os.lseek(fd, 0, os.SEEK_SET)
                t0 = time.perf_counter()
                while os.read(fd, 1 << 22):
                    pass
                tr = time.perf_counter() - t0
            finally:
                os.close(fd)
            rows = {
                "path": str(base),
                "bytes": size,
                "write_s": tw,
                "read_s": tr,
                "first_byte_s": first,
                "write_gbps": size / tw / 1e9,
                "read_gbps": size / tr / 1e9,
                "note": "sequential write with fsync, then read after posix_fadvise "
                "DONTNEED (the page cache may still serve part of the read)",
            }
        except OSError as exc:  # no room, no permission: storage is not measured, the rest is
            rows = {}
            if self.node == 0:
                self.result["notes"].append(
                    f"storage not measured: {size:,} bytes could not be written and read back "
                    f"under {base} ({exc.strerror or exc}); calibrate then estimates it (give "
                    "--storage-path a folder with room)"
                )
        finally:
            try:
                path.unlink()
            except OSError:
                pass
        if self.node == 0:
            self.result["storage"] = rows

    # training --------------------------------------------------------------------------------
