"""Time of each operation on a GPU.

Compute time comes from the GPU profile: GEMMs at FLOPs / (peak · achieved efficiency), the
efficiency rising with operation size as ``matmul_max · F / (F + matmul_half_flops)``; fused
attention at ``attention_max`` of peak (``attention_flash3_max`` under a flash3 software stack,
where the GPU has one), times ``s / (s + attention_half_seq)`` (``attention_flash3_half_seq``)
over a key length s where the profile measured that curve; memory-bound operations at bytes /
(bandwidth · achieved fraction), the cache's bandwidth for those that fit a profile's
``cache_mb``; each kernel pays a launch overhead. fp8 training's backward GEMMs run at
``matmul_fp8_promoted_accum`` of the fp8 rate (they promote partial sums to FP32 where the
forward's accumulate fast). A calibrated profile may add
``gemm_weight_bandwidth`` (a linear layer's weight streamed afresh by every pass, on top of the
GEMM) and ``in_step_factor``: how much slower the operations run inside a real training step
than timed alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config.hardware import GPUProfile
from ..config.software import attention_kernel
from ..workload.ops import Op

if TYPE_CHECKING:
    from ..config.scenario import ResolvedScenario

# Thread-block tiles cuBLAS/CUTLASS pick among for large 16-bit GEMMs on A100 and H100
# (CUTLASS default GemmShape<128, 256, 64> and its transposes, and 128×128).
GEMM_TILES = ((128, 256), (256, 128), (128, 128))
# An output of fewer 128×128 tiles than the GPU has SMs is split along K (cuBLAS split-K and
# stream-K kernels) so that every SM works, at the cost of writing and reducing partial sums:
# the share ``1 - fill`` of SMs a one-wave launch would leave idle costs SPLIT_K_COST of that
# share in time. Device run 2026-11-23 on one H100 SXM (benchmarks/results/
# h100-kernels-2026-11-23.json): outputs of 32-64 tiles with K = 8192-16384 (1024x512x16384
# 468 TFLOP/s, 1024x1024x16384 570, 2048x512x16384 556, 1024x1024x8192 569, 2048x512x8192
# 506, 256x4096x8192 506) run at 0.67-0.81 of the ~700 TFLOP/s large outputs of the same K
# reach, i.e. 1 / (1 + c (1 - fill)) with c = 0.45-0.75 (mean 0.55); a one-wave launch of
# those tiles would run at 0.24-0.48.
SPLIT_K_COST = 0.55


def _on_curve(peak_eff: float, half: float, length: int) -> float:
    """An attention kernel's efficiency at key length ``length``: ``peak_eff·s/(s + half)``
    where the profile measured a curve (``half`` > 0) and the op carries its length."""
    if half > 0 and length > 0:
        return peak_eff * length / (length + half)
    return peak_eff


def tiered_seconds(
    nbytes: float, mem_bps: float, cache_bytes: float, cache_bps: float, working: float = 0.0
) -> float:
    """Seconds a memory-bound operation moving ``nbytes`` takes: at the cache's bandwidth while
    its working set (``working``; 0: the bytes it moves) fits the cache, at memory bandwidth
    from twice the cache, linear in between. Without a cache figure, memory bandwidth."""
    if cache_bytes <= 0.0 or cache_bps <= 0.0:
        return nbytes / mem_bps
    hit = min(1.0, max(0.0, 2.0 - (working or nbytes) / cache_bytes))
    return nbytes * (hit / cache_bps + (1.0 - hit) / mem_bps)


class OpTimer:
    def __init__(
        self,
        gpu: GPUProfile,
        precision: str,
        host_us_per_kernel: float = 0.0,
        flash_kernel: str = "flash2",
        head_dim: int = 128,
        fp8_backward_fast: bool = False,
        host_us_per_collective: float = 0.0,
    ) -> None:
        e = gpu.efficiency
        # Fused attention kernels are compiled for head dimensions in steps of 32 (to 192;
        # 256 above) and run a head dimension between them as the next one up, its padding
        # computed (Dao-AILab/flash-attention csrc/flash_attn/flash_api.cpp:
        # head_size_rounded = round_multiple(head_size, 32)): a head of 80 runs as 96.
        step = 32 if head_dim <= 192 else 256
        self.attn_pad = head_dim / (-(-head_dim // step) * step) if head_dim > 0 else 1.0
        self.host_s = host_us_per_kernel * 1e-6
        self.host_coll_s = host_us_per_collective * 1e-6
        # A board power limit below the TDP slows the tensor cores' clock (GPUProfile.clock_scale).
        clock = gpu.clock_scale
        self.gemm_peak = gpu.peak_flops(precision) * clock
        # The GEMMs fp8 training keeps in 16-bit, and attention, run at the 16-bit rate.
        self.wide_peak = gpu.peak_flops("bf16" if precision == "fp8" else precision) * clock
        self.attn_peak = self.wide_peak
        self.mm_max = e.matmul_max.value
        self.mm_half = e.matmul_half_flops.value
        # fp8 GEMMs follow their own curve where the profile measures one; the GEMMs fp8
        # training keeps in 16-bit (``Op.wide``) follow the 16-bit one.
        self.wide_max, self.wide_half = self.mm_max, self.mm_half
        # The backward's fp8 GEMMs promote partial sums to FP32 (TransformerEngine's
        # _2X_ACC_DGRAD/_2X_ACC_WGRAD, torchao's default grad_input/grad_weight gemm configs)
        # unless the stack accumulates them fast too (torchao's rowwise recipes); the
        # forward's accumulate fast, as the measured fp8 curve does.
        self.fp8_bwd_rate = 1.0
        if precision == "fp8":
            self.mm_max = (e.matmul_fp8_max or e.matmul_max).value
            self.mm_half = (e.matmul_fp8_half_flops or e.matmul_half_flops).value
            if e.matmul_fp8_promoted_accum is not None and not fp8_backward_fast:
                self.fp8_bwd_rate = e.matmul_fp8_promoted_accum.value
        flash3 = e.attention_flash3_max if flash_kernel == "flash3" else None
        self.attn_eff = (flash3 or e.attention_max).value
        half = e.attention_flash3_half_seq if flash3 else e.attention_half_seq
        self.attn_half = half.value if half else 0.0
        # the portable kernel, which an architecture-specific one never runs slower than
        self.attn2_eff = e.attention_max.value if flash3 else 0.0
        self.attn2_half = e.attention_half_seq.value if flash3 and e.attention_half_seq else 0.0
        # The attention efficiencies time forward+backward together (3× the forward's
        # products in the engine's convention); this is the forward's part of that time.
        share = e.attention_forward_share
        self.attn_fwd_share = share.value if share else 2.0 / 7.0
        self.mem_bw = gpu.memory_bandwidth_gbps.value * 1e9 * e.memory_bandwidth.value
        cache, cache_bw = gpu.cache_mb, gpu.cache_bandwidth_gbps
        self.cache_bytes = cache.value * 1e6 if cache else 0.0
        self.cache_bw = cache_bw.value * 1e9 * e.memory_bandwidth.value if cache_bw else 0.0
        self.launch = e.kernel_launch_us.value * 1e-6
        opt = e.optimizer_bandwidth or e.memory_bandwidth
        self.opt_bw = gpu.memory_bandwidth_gbps.value * 1e9 * opt.value
        per_tensor = e.optimizer_us_per_tensor
        self.opt_tensor_s = per_tensor.value * 1e-6 if per_tensor else 0.0
        wbw = e.gemm_weight_bandwidth
        self.weight_bw = gpu.memory_bandwidth_gbps.value * 1e9 * wbw.value if wbw else 0.0
        self.scale = e.in_step_factor.value if e.in_step_factor else 1.0
        self.sms = int(gpu.sm_count.value) if gpu.sm_count else 0
        self.el = 4 if precision == "fp32" else (1 if precision == "fp8" else 2)
        self.wide_el = 4 if precision == "fp32" else 2

    def gemm_efficiency(self, flops: float, wide: bool = False) -> float:
        if wide:
            return self.wide_max * flops / (flops + self.wide_half)
        return self.mm_max * flops / (flops + self.mm_half)

    def wave_efficiency(self, b: int, m: int, n: int) -> float:
        """Share of the SMs' time doing useful work when the output's tiles run in waves: the
        best of the usual CUTLASS/cuBLAS thread-block tiles (128×256, 256×128, 128×128), or,
        for an output too small to fill one wave, of splitting K over the idle SMs."""
        if self.sms <= 0:
            return 1.0
        best = 0.0
        for tm, tn in GEMM_TILES:
            tiles = b * -(-m // tm) * -(-n // tn)
            waves = -(-tiles // self.sms)
            best = max(best, tiles / (waves * self.sms))
        small = b * -(-m // 128) * -(-n // 128)
        if small < self.sms:
            best = max(best, 1.0 / (1.0 + SPLIT_K_COST * (1.0 - small / self.sms)))
        return best

    def gemm_time(
        self,
        b: int,
        m: int,
        n: int,
        k: int,
        wide: bool = False,
        streamed: float = 0.0,
        rate: float = 1.0,
    ) -> float:
        """One (batched) GEMM: the slower of its tensor-core time (shape-dependent efficiency:
        size curve times wave quantisation, times ``rate``) and its memory traffic (read both
        inputs, write the output), plus the launch. ``wide``: at the 16-bit rate even in fp8
        training. ``streamed``: bytes of a weight operand (or weight gradient) that move on top
        of the GEMM at ``gemm_weight_bandwidth``, so no longer part of its own traffic."""
        if min(b, m, n, k) <= 0:
            return 0.0
        flops = 2.0 * b * m * n * k
        eff = self.gemm_efficiency(flops, wide) * self.wave_efficiency(b, m, n) * rate
        compute = flops / ((self.wide_peak if wide else self.gemm_peak) * eff)
        el = self.wide_el if wide else self.el
        memory = max(0.0, el * b * (m * k + k * n + m * n) - streamed) / self.mem_bw
        weight = streamed / self.weight_bw if streamed > 0.0 else 0.0
        return weight + max(compute, memory) + self.launch

    def time(self, op: Op) -> float:
        if op.kind == "gemm" and op.dims is not None:
            b, m, n, k = op.dims
            w = op.wide
            el = self.wide_el if w else self.el
            # a weight streamed by each pass: read by the forward and the input gradient, and
            # written (at least 16-bit, also in fp8 training) as the weight gradient
            read = el * b * k * n if op.weight and self.weight_bw > 0.0 else 0.0
            write = max(el, self.wide_el) * b * k * n if read else 0.0
            passes = 1.0
            if op.backward:  # dIn = dOut·W^T (m×k, reduce over n), dW = In^T·dOut (k×n, over m)
                r = 1.0 if w else self.fp8_bwd_rate
                dgrad = self.gemm_time(b, m, k, n, w, read, r) if op.part != "wgrad" else 0.0
                wgrad = self.gemm_time(b, k, n, m, w, write, r) if op.part != "dgrad" else 0.0
                t = dgrad + wgrad
                passes = 2.0 if op.part == "both" else 1.0
            else:
                t = self.gemm_time(b, m, n, k, w, read)
            return self._scaled(
                t, passes * 2.0 * b * m * n * k / (self.wide_peak if w else self.gemm_peak)
            )
        floor = 0.0
        if op.kind == "gemm":
            if op.flops <= 0:
                return 0.0
            t = op.flops / (self.gemm_peak * self.gemm_efficiency(op.flops))
            floor = op.flops / self.gemm_peak
        elif op.kind == "attention":
            eff = self.attn_pad * max(
                _on_curve(self.attn_eff, self.attn_half, op.kv_len),
                _on_curve(self.attn2_eff, self.attn2_half, op.kv_len),
            )
            # forward+backward at ``eff`` (or its bytes over bandwidth, the backward moving
            # twice the forward's), split by the measured forward share
            fwd_flops, fwd_bytes = (
                (op.flops / 2.0, op.bytes / 2.0) if op.backward else (op.flops, op.bytes)
            )
            pair = max(3.0 * fwd_flops / (self.attn_peak * eff), 3.0 * fwd_bytes / self.mem_bw)
            part = 1.0 - self.attn_fwd_share if op.backward else self.attn_fwd_share
            t = pair * part
            floor = 3.0 * fwd_flops / self.attn_peak * part
        elif op.kind == "memory":
            t = tiered_seconds(op.bytes, self.mem_bw, self.cache_bytes, self.cache_bw, op.footprint)
        else:
            raise ValueError(op.kind)
        return self._scaled(t + self.launch, floor)

    def _scaled(self, t: float, floor: float = 0.0) -> float:
        """``t`` times the in-step factor; a factor below 1 (a step that ran faster than its
        operations alone) never takes an operation below its FLOPs at the GPU's peak."""
        return t * self.scale if self.scale >= 1.0 else max(t * self.scale, floor)

    def memory_time(self, nbytes: float) -> float:
        t = tiered_seconds(nbytes, self.mem_bw, self.cache_bytes, self.cache_bw)
        return self._scaled(t + self.launch)

    def optimizer_time(self, nbytes: float, tensors: int = 0) -> float:
        """The optimizer step over ``nbytes`` of traffic, counted with each tensor touched once,
        visiting ``tensors`` parameter tensors."""
        return self._scaled(nbytes / self.opt_bw + tensors * self.opt_tensor_s + self.launch)


def efficiency_fallbacks(rs: ResolvedScenario) -> list[str]:
    """A note for each optional efficiency figure the GPU profile leaves out where this
    scenario would use it, naming the figure that times those kernels instead (so a new
    profile's gap never goes unannounced)."""
    g, tr = rs.gpu, rs.training
    e = g.efficiency
    out = []
    if tr.precision == "fp8" and e.matmul_fp8_max is None:
        out.append(
            f"GPU profile '{g.name}' gives no efficiency.matmul_fp8_max: fp8 GEMMs are timed "
            "at the fp8 peak with the 16-bit GEMM efficiency curve (matmul_max)"
        )
    if rs.parallelism.offload_activation_layers and e.host_link is None:
        out.append(
            f"GPU profile '{g.name}' gives no efficiency.host_link: activation offloading "
            "copies at the datasheet host_link_gbps, as no copy reaches (optimistic)"
        )
    kernel = attention_kernel(rs.software, g)
    fast = e.attention_flash3_max
    if rs.flash_attention and kernel == "flash2" and fast is not None:
        if fast.value >= 2.0 * e.attention_max.value:
            out.append(
                f"the '{rs.software.name}' stack runs the portable FlashAttention-2 kernel, "
                f"which reaches {e.attention_max.value:.2f} of the '{g.name}' peak; the GPU's "
                f"own fused attention (cuDNN, FlashAttention-3 class) reaches about "
                f"{fast.value:.2f}: a stack version that runs it is --set "
                "software.flash_kernel=flash3"
            )
    f = rs.fabric
    if g.compute_capability is None and f.ll128 is not None and f.ll128.value and rs.nodes > 1:
        hopper = f.switch_reduce_fraction is not None
        out.append(
            f"GPU profile '{g.name}' gives no compute_capability: NCCL's LL128 channels across "
            f"nodes are rated as {'Hopper' if hopper else 'Ampere'}'s, as the fabric "
            f"{'has' if hopper else 'has no'} NVLink SHARP"
        )
    if rs.flash_attention and kernel == "flash3" and fast is None:
        out.append(
            f"GPU profile '{g.name}' gives no efficiency.attention_flash3_max: the "
            f"'{rs.software.name}' stack's architecture-specific attention kernel is "
            "timed at attention_max, the portable (FlashAttention-2 class) figure"
        )
    return out


# GB/s of memory bandwidth per TFLOP/s of dense 16-bit peak: 2.4-7.2 across the bundled GPUs
# (V100 to GB200), 50-200 on a probed CPU; a figure outside this span is most likely a unit
# slip (4.0 written for 4 TB/s, or MB/s for GB/s).
PLAUSIBLE_BYTES_PER_FLOP = (0.2, 1000.0)


def unit_slips(rs: ResolvedScenario) -> list[str]:
    """A note for a profile figure so far from any real part that a unit was likely mistaken
    (the figure is used as given: the note only asks to check it)."""
    out = []
    g = rs.gpu
    try:
        peak = g.peak_flops(rs.training.precision if rs.training.precision != "fp8" else "bf16")
    except KeyError:
        peak = 0.0
    if peak > 0:
        ratio = g.memory_bandwidth_gbps.value / (peak / 1e12)
        lo, hi = PLAUSIBLE_BYTES_PER_FLOP
        if not lo <= ratio <= hi:
            out.append(
                f"GPU profile '{g.name}' gives {g.memory_bandwidth_gbps.value:g} GB/s of memory "
                f"bandwidth for {peak / 1e12:g} TFLOP/s ({ratio:.3g} GB/s per TFLOP/s; real "
                f"parts lie between {lo:g} and {hi:g}): check the units of "
                "memory_bandwidth_gbps (GB/s) and peak_tflops (TFLOP/s)"
            )
    net = rs.network
    if net is not None and net.port_gbps.value < 1.0:
        out.append(
            f"network profile '{net.name}' gives {net.port_gbps.value:g} Gb/s per port: "
            "check that port_gbps is in gigabits per second (a 400G NIC is 400)"
        )
    return out
