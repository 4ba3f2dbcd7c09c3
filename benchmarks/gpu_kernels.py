"""Kernel-level measurements on one GPU, for the GPU profiles' efficiency figures.

Times, with CUDA events after warm-up (median of several timed runs):

- GEMMs over a grid of M, N, K in bf16 (and fp8 where ``torch._scaled_mm`` runs), including the
  transposed layouts of the backward pass: achieved TFLOP/s by shape;
- attention: ``scaled_dot_product_attention`` (flash backend) and the unfused eager form
  (QK^T, softmax, dropout, ·V), forward and forward+backward;
- memory-bound kernels (copy, add, GELU, LayerNorm, softmax) at several sizes: GB/s;
- the per-kernel cost of a tiny eager op (launch overhead);
- whole transformer layers (the probe's block: LayerNorm, QKV, SDPA, out-proj, GELU MLP) in
  eager PyTorch, forward+backward, bf16 weights and autocast over fp32 weights.

Writes one JSON file (``--out``). Needs CUDA; on CPU ``--smoke`` runs a tiny grid to test the
script itself. Usage: ``python benchmarks/gpu_kernels.py --out h100-kernels.json``.
"""

# ruff: noqa: B023 - every closure runs inside the iteration that made it

from __future__ import annotations

import argparse
import datetime as dt
import json
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from calibrate.model import Block  # noqa: E402
from calibrate.probe import atomic_write_json  # noqa: E402


def timeit(fn: Any, cuda: bool, target_s: float = 0.05, reps: int = 3) -> float:
    """Median over ``reps`` runs of the mean time per call (seconds)."""
    for _ in range(3):
        fn()
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    if cuda:
        torch.cuda.synchronize()
    one = max(time.perf_counter() - t0, 1e-6)
    iters = max(2, min(200, int(target_s / one)))
    out = []
    for _ in range(reps):
        if cuda:
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(iters):
                fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) / 1e3 / iters)
        else:
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            out.append((time.perf_counter() - t0) / iters)
    return statistics.median(out)


def _gemm_row(dtype: str, layout: str, m: int, n: int, k: int, t: float) -> dict[str, Any]:
    return {
        "dtype": dtype,
        "layout": layout,
        "m": m,
        "n": n,
        "k": k,
        "time_s": t,
        "tflops": 2.0 * m * n * k / t / 1e12,
    }


def gemms(dev: torch.device, cuda: bool, smoke: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    if smoke:
        ms, ks, ns = [64, 128], [64, 256], [64, 128]
    else:
        ms = [256, 1024, 2048, 4096, 8192, 16384]
        ks = [512, 1024, 2048, 4096, 8192, 16384]
        ns = [512, 1024, 2048, 4096, 8192, 16384, 32768]
    dt_ = torch.bfloat16 if cuda else torch.float32
    for m in ms:
        for k in ks:
            for n in ns:
                if m * n * k > 16384 * 16384 * 32768 // 2:
                    continue
                a = torch.randn(m, k, device=dev, dtype=dt_)
                b = torch.randn(k, n, device=dev, dtype=dt_)
                t = timeit(lambda a=a, b=b: a @ b, cuda, target_s=0.03)
                rows.append(_gemm_row("bf16", "NN", m, n, k, t))
    # Backward-pass layouts of a linear layer y = x W^T (x: T×h, W: f×h): dX = dY W (NN),
    # dW = dY^T X (TN) on typical shapes.
    shapes = (
        [(64, 64, 64)]
        if smoke
        else [
            (4096, 4096, 4096),
            (8192, 4096, 12288),
            (8192, 12288, 4096),
            (16384, 8192, 8192),
            (8192, 2048, 8192),
            (2048, 8192, 8192),
            (4096, 16384, 4096),
        ]
    )
    for m, k, n in shapes:
        a = torch.randn(k, m, device=dev, dtype=dt_)
        b = torch.randn(k, n, device=dev, dtype=dt_)
        t = timeit(lambda a=a, b=b: a.t() @ b, cuda, target_s=0.03)
        rows.append(_gemm_row("bf16", "TN", m, n, k, t))
        a2 = torch.randn(m, k, device=dev, dtype=dt_)
        b2 = torch.randn(n, k, device=dev, dtype=dt_)
        t = timeit(lambda a=a2, b=b2: a @ b.t(), cuda, target_s=0.03)
        rows.append(_gemm_row("bf16", "NT", m, n, k, t))
    if cuda and hasattr(torch, "_scaled_mm"):
        for m, k, n in [
            (1024, 1024, 1024),
            (2048, 2048, 2048),
            (4096, 4096, 4096),
            (8192, 8192, 8192),
            (16384, 8192, 8192),
            (8192, 4096, 16384),
            (2048, 4096, 4096),
            (4096, 8192, 28672),
        ]:
            try:
                a = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
                b = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()
                one = torch.tensor(1.0, device=dev)
                fn = lambda a=a, b=b, one=one: torch._scaled_mm(  # noqa: E731
                    a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16
                )
                t = timeit(fn, cuda, target_s=0.03)
                rows.append(_gemm_row("fp8", "NT", m, n, k, t))
            except Exception as e:  # noqa: BLE001
                rows.append({"dtype": "fp8", "error": repr(e)[:200]})
                break
    return rows


def attention(dev: torch.device, cuda: bool, smoke: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    dt_ = torch.bfloat16 if cuda else torch.float32
    cases = (
        [(2, 4, 128, 32)]
        if smoke
        else [
            (b, nh, s, d)
            for d, nh in ((64, 32), (128, 16), (128, 32))
            for s, b in ((1024, 8), (2048, 4), (4096, 2), (8192, 1))
        ]
    )
    for b, nh, s, d in cases:
        for causal in (True, False):
            q, k, v = (
                torch.randn(b, nh, s, d, device=dev, dtype=dt_, requires_grad=True)
                for _ in range(3)
            )
            g = torch.randn(b, nh, s, d, device=dev, dtype=dt_)
            fl_fwd = 4.0 * b * nh * s * s * d  # full s×s, as the simulator counts

            def sdpa_f(q=q, k=k, v=v, causal=causal) -> Any:
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

            def sdpa_fb(q=q, k=k, v=v, g=g, causal=causal) -> None:
                o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                o.backward(g)

            def eager(q=q, k=k, v=v, causal=causal) -> Any:
                sc = (q @ k.transpose(-1, -2)) * d**-0.5
                if causal:
                    sc = sc.masked_fill(
                        torch.ones(s, s, device=dev, dtype=torch.bool).triu(1), float("-inf")
                    )
                p = F.dropout(torch.softmax(sc.float(), -1).to(q.dtype), 0.1)
                return p @ v

            def eager_fb(g=g, eager=eager) -> None:
                eager().backward(g)

            row: dict[str, Any] = {
                "batch": b,
                "heads": nh,
                "seq": s,
                "head_dim": d,
                "causal": causal,
                "flops_fwd_full": fl_fwd,
            }
            with torch.no_grad():
                row["sdpa_fwd_s"] = timeit(sdpa_f, cuda)
            row["sdpa_fwd_bwd_s"] = timeit(sdpa_fb, cuda)
            if b * nh * s * s * 4 <= 8 * 2**30:  # score tensor fits comfortably
                with torch.no_grad():
                    row["eager_fwd_s"] = timeit(eager, cuda)
                row["eager_fwd_bwd_s"] = timeit(eager_fb, cuda)
            rows.append(row)
            del q, k, v, g
    return rows


def memory(dev: torch.device, cuda: bool, smoke: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    dt_ = torch.bfloat16 if cuda else torch.float32
    el = dt_.itemsize if hasattr(dt_, "itemsize") else 2
    sizes = [2**20] if smoke else [2**20, 2**22, 2**24, 2**26, 2**28]
    h = 4096 if not smoke else 64
    for n in sizes:
        x = torch.randn(n, device=dev, dtype=dt_)
        y = torch.randn(n, device=dev, dtype=dt_)
        z = torch.empty_like(x)
        x2 = x.view(-1, h)
        ln = torch.nn.LayerNorm(h, device=dev, dtype=dt_)
        xg = x2.detach().clone().requires_grad_(True)
        gy = torch.randn_like(x2)
        ops = {
            "copy": (lambda: z.copy_(x), 2),
            "add": (lambda: torch.add(x, y, out=z), 3),
            "gelu": (lambda: F.gelu(x), 2),
            "layernorm_fwd": (lambda: ln(x2), 2),
            "softmax_fwd": (lambda: torch.softmax(x2, -1), 2),
            "layernorm_fwd_bwd": (lambda: ln(xg).backward(gy), 7),
            "gelu_fwd_bwd": (lambda: F.gelu(xg).backward(gy), 5),
        }
        for name, (fn, touches) in ops.items():
            t = timeit(fn, cuda)
            moved = touches * n * el
            rows.append(
                {
                    "op": name,
                    "elements": n,
                    "bytes_moved": moved,
                    "time_s": t,
                    "gbps": moved / t / 1e9,
                    "touches": touches,
                }
            )
    return rows


def launch(dev: torch.device, cuda: bool) -> dict[str, Any]:
    one = torch.zeros(1, device=dev)
    t = timeit(lambda: one.add_(1.0), cuda, target_s=0.05)
    small = torch.zeros(64, 64, device=dev)

    def chain() -> None:
        for _ in range(20):
            small.mul_(1.0)

    t20 = timeit(chain, cuda, target_s=0.05) / 20
    return {"tiny_add_s": t, "chain_of_20_per_op_s": t20}


def layers(dev: torch.device, cuda: bool, smoke: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    cases = (
        [(64, 4, 64, 2)]
        if smoke
        else [
            (1024, 16, 2048, 8),
            (2048, 16, 2048, 4),
            (2048, 16, 2048, 8),
            (4096, 32, 2048, 2),
            (4096, 32, 2048, 4),
            (4096, 32, 4096, 2),
            (8192, 64, 2048, 2),
        ]
    )
    for h, nh, s, b in cases:
        for mode in ("bf16", "autocast"):
            if not cuda and mode == "autocast":
                continue
            blk = Block(h, nh).to(dev)
            if mode == "bf16" and cuda:
                blk = blk.to(torch.bfloat16)
            x = torch.randn(
                b,
                s,
                h,
                device=dev,
                dtype=torch.bfloat16 if mode == "bf16" and cuda else torch.float32,
                requires_grad=True,
            )

            def fb(blk=blk, x=x, mode=mode) -> None:
                ctx = (
                    torch.autocast("cuda", dtype=torch.bfloat16)
                    if mode == "autocast"
                    else torch.autocast("cpu", enabled=False)
                )
                with ctx:
                    y = blk(x)
                y.float().sum().backward()

            def fwd(blk=blk, x=x, mode=mode) -> None:
                ctx = (
                    torch.autocast("cuda", dtype=torch.bfloat16)
                    if mode == "autocast"
                    else torch.autocast("cpu", enabled=False)
                )
                with torch.no_grad(), ctx:
                    blk(x)

            t_fb = timeit(fb, cuda, target_s=0.1)
            t_f = timeit(fwd, cuda, target_s=0.1)
            T = b * s
            fl_fwd = 2.0 * T * 12 * h * h + 4.0 * T * s * h
            rows.append(
                {
                    "hidden": h,
                    "heads": nh,
                    "seq": s,
                    "batch": b,
                    "mode": mode,
                    "fwd_s": t_f,
                    "fwd_bwd_s": t_fb,
                    "model_flops_fwd_bwd": 3 * fl_fwd,
                    "tflops_fwd_bwd": 3 * fl_fwd / t_fb / 1e12,
                }
            )
            del blk, x
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--smoke", action="store_true", help="tiny grid (tests the script on CPU)")
    args = p.parse_args(argv)
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    out: dict[str, Any] = {
        "format": "clustersim-gpu-kernels",
        "host": socket.gethostname(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "sm_count": torch.cuda.get_device_properties(0).multi_processor_count if cuda else None,
    }
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False
    path = Path(args.out)
    for name, fn in (
        ("launch", lambda: launch(dev, cuda)),
        ("memory", lambda: memory(dev, cuda, args.smoke)),
        ("gemm", lambda: gemms(dev, cuda, args.smoke)),
        ("attention", lambda: attention(dev, cuda, args.smoke)),
        ("layers", lambda: layers(dev, cuda, args.smoke)),
    ):
        t0 = time.perf_counter()
        try:
            out[name] = fn()
        except Exception as e:  # noqa: BLE001 - keep what was measured
            out[name + "_error"] = repr(e)[:500]
        print(f"{name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        atomic_write_json(path, out)
        if cuda:
            torch.cuda.empty_cache()
    json.dumps(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
