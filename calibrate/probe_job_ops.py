"""The probe's timings of the training job's own operations on its shapes: its memory-bound
operations (forward and backward) and its optimizer step, over the job's tensors and over many
tiny ones."""

from __future__ import annotations

from typing import Any

from .probe_base import ProbeBase

# The optimizer timed over many tiny tensors: its per-tensor cost, bytes negligible beside it.
TINY_TENSORS, TINY_ELEMENTS = 256, 64
# The job's memory-bound operations are also timed on these multiples of its token count.
TOKEN_SCALES = (0.25, 0.5, 2.0, 4.0)


class JobOpsPhase(ProbeBase):
    def job_memory_ops(self) -> None:
        """The training job's own memory-bound operations on its shapes, forward and backward
        (as Vidur and vTrain profile a model's operators), and its optimizer step: the
        simulator's byte counts over these times give the bandwidth fractions it uses."""
        torch = self.torch
        from .model import ProbeTransformer

        dev = self.device
        cfg = self.model_config()
        T, h, V = cfg["batch"] * cfg["seq"], cfg["hidden"], cfg["vocab"]
        rows: dict[str, Any] = {}
        for key, (what, fn) in self._memory_ops(T, h, V).items():
            self.beat(detail=f"job op {key}")
            t, it = self._timeit(fn, target_s=0.1)
            rows[key] = {"op": what, "time_s": t, "iters": it}
        # The same operations on fewer and more tokens: how their time grows with the bytes
        # (the cache tier the simulator's memory-bound operations follow), measured on these
        # kernels rather than on plain copies.
        scaled: list[dict[str, Any]] = []
        for i, scale in enumerate(TOKEN_SCALES):
            # past the phase's share, the larger multiples are skipped (two sizes per kind
            # already test a tier's shape against its own speed)
            if i >= 2 and self.phase_left() < 0:
                self.result["notes"].append(
                    f"time budget ({self.args.time_budget:g} s): job operations timed on "
                    f"{i + 1} token counts instead of {len(TOKEN_SCALES) + 1}"
                )
                break
            n = max(1, round(T * scale))
            for key, (what, fn) in self._memory_ops(n, h, V).items():
                self.beat(detail=f"job op {key} ×{scale:g} tokens")
                t, it = self._timeit(fn, target_s=0.04)
                scaled.append({"key": key, "op": what, "scale": n / T, "time_s": t, "iters": it})
        self.result["job_ops_scaled"] = scaled
        self.beat(detail="job op optimizer")
        model = ProbeTransformer(
            **{k: cfg[k] for k in ("layers", "hidden", "heads", "vocab", "seq")}
        )
        model = model.to(dev)
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        t, it = self._timeit(opt.step, target_s=0.1)
        n = sum(p.numel() for p in model.parameters())
        rows["optimizer"] = {
            "op": f"AdamW (foreach) step over the job's {n} fp32 parameters",
            "params": n,
            "tensors": len(list(model.parameters())),
            "time_s": t,
            "iters": it,
        }
        # ... and over many tiny tensors (a few bytes each): its cost per tensor
        self.beat(detail="job op optimizer over tiny tensors")
        tiny = [
            torch.nn.Parameter(torch.zeros(TINY_ELEMENTS, device=dev)) for _ in range(TINY_TENSORS)
        ]
        for p in tiny:
            p.grad = torch.randn_like(p)
        opt = torch.optim.AdamW(tiny, lr=1e-4, foreach=True)
        t, it = self._timeit(opt.step, target_s=0.1)
        rows["optimizer_tensors"] = {
            "op": f"AdamW (foreach) step over {TINY_TENSORS} tensors of {TINY_ELEMENTS} fp32",
            "params": TINY_TENSORS * TINY_ELEMENTS,
            "tensors": TINY_TENSORS,
            "time_s": t,
            "iters": it,
        }
        self.result["job_ops"] = rows

    def _memory_ops(self, T: int, h: int, V: int) -> dict[str, tuple[str, Any]]:
        """The job's memory-bound operations on ``T`` tokens: what each is, and a call that
        runs it once (forward and backward where the job runs both)."""
        torch = self.torch
        F = torch.nn.functional
        dev = self.device

        def fwd_bwd(make: Any) -> Any:
            def run() -> None:
                for leaf in (x_h, x_4h, logits, w, b):
                    leaf.grad = None  # as zero_grad(set_to_none=True): no accumulation adds
                out = make()
                out.backward(gout[out.shape])

            return run

        x_h = torch.randn(T, h, device=dev, requires_grad=True)
        x_4h = torch.randn(T, 4 * h, device=dev, requires_grad=True)
        logits = torch.randn(T, V, device=dev, requires_grad=True)
        target = torch.randint(0, V, (T,), device=dev)
        w, b = torch.ones(h, device=dev, requires_grad=True), torch.zeros(h, device=dev)
        b.requires_grad_(True)
        gout = {
            torch.Size([T, h]): torch.randn(T, h, device=dev),
            torch.Size([T, 4 * h]): torch.randn(T, 4 * h, device=dev),
            torch.Size([]): torch.ones((), device=dev),
        }
        a1, a2 = torch.randn(T, h, device=dev), torch.randn(T, h, device=dev)
        return {
            "layernorm": (
                f"layer_norm ({T}x{h}) fwd+bwd",
                fwd_bwd(lambda: F.layer_norm(x_h, (h,), w, b)),
            ),
            "gelu": (f"gelu ({T}x{4 * h}) fwd+bwd", fwd_bwd(lambda: F.gelu(x_4h))),
            "add": (f"add ({T}x{h})", lambda: torch.add(a1, a2)),
            "cross_entropy": (
                f"cross_entropy ({T}x{V}) fwd+bwd",
                fwd_bwd(lambda: F.cross_entropy(logits, target)),
            ),
        }
