"""Fused attention kernels against the figures their profiles cite: the architecture-specific
kernel where the GPU has one, the efficiency curve over key length, context parallelism's chunks,
the H100 device run and the Blackwell cuDNN timings, and the convention that lets a causal
kernel's efficiency pass 1. (Split from test_accuracy.)"""

from __future__ import annotations

import pytest
from conftest import REPO, fig, inline_scenario
from test_accuracy import _gpu

from simulator.config.loading import resolve_dict
from simulator.engine.compute import OpTimer
from simulator.errors import UserError
from simulator.workload.ops import Op, backward_op, layer_ops


def test_flash3_stack_uses_the_architecture_kernel_where_the_gpu_has_one() -> None:
    op = Op("attention", "attention", flops=1e13, bytes=1e6)
    hopper = _gpu(attention_max=0.5, attention_flash3_max=0.6)
    fa2, fa3 = OpTimer(hopper, "bf16", 0.0, "flash2"), OpTimer(hopper, "bf16", 0.0, "flash3")
    share = 3 * fa2.attn_fwd_share  # the forward's part of the pair's time (test_attention_split)
    assert fa2.time(op) - fa2.launch == pytest.approx(share * 1e13 / (fa2.attn_peak * 0.5))
    assert fa3.time(op) - fa3.launch == pytest.approx(share * 1e13 / (fa3.attn_peak * 0.6))
    # A GPU with no architecture-specific kernel runs the portable one under either stack.
    ampere = _gpu(attention_max=0.5)
    assert OpTimer(ampere, "bf16", 0.0, "flash3").time(op) == fa2.time(op)


def test_attention_efficiency_follows_the_key_length_where_the_profile_has_a_curve() -> None:
    flat = OpTimer(_gpu(attention_max=0.6), "bf16")
    curve = OpTimer(_gpu(attention_max=0.6, attention_half_seq=1300), "bf16")

    def secs(t: OpTimer, s: int) -> float:
        # the same FLOPs at every length: only the kernel's efficiency differs
        return t.time(Op("attention", "attention", flops=1e13, bytes=1e6, kv_len=s)) - t.launch

    assert secs(curve, 1300) == pytest.approx(2 * secs(flat, 1300))  # half at half_seq
    assert secs(curve, 1024) > secs(curve, 2048) > secs(curve, 8192) > secs(flat, 8192)
    assert secs(curve, 10**7) == pytest.approx(secs(flat, 10**7), rel=2e-4)  # the asymptote
    assert secs(flat, 1024) == secs(flat, 8192)
    # the backward pass keeps the forward's key length
    fwd = Op("attention", "attention", flops=1e13, bytes=1e6, kv_len=2048)
    assert backward_op(fwd).kv_len == 2048


def test_the_architecture_kernel_is_never_slower_than_the_portable_one() -> None:
    gpu = _gpu(attention_max=0.33, attention_flash3_max=0.96, attention_flash3_half_seq=1340)
    fa2, fa3 = OpTimer(gpu, "bf16", 0.0, "flash2"), OpTimer(gpu, "bf16", 0.0, "flash3")
    for s in (128, 512, 1024, 8192):
        op = Op("attention", "attention", flops=1e13, bytes=1e6, kv_len=s)
        assert fa3.time(op) <= fa2.time(op)
    short = Op("attention", "attention", flops=1e13, bytes=1e6, kv_len=256)
    assert fa3.time(short) == fa2.time(short)  # 0.96·256/1596 < 0.33: the portable kernel's


def test_context_parallel_attention_runs_per_chunk_of_keys() -> None:
    data = inline_scenario(gpus_per_node=8, global_batch=8)
    data["parallelism"] = {"cp": 2}
    rs = resolve_dict(data)
    (att,) = [op for op in layer_ops(rs) if op.kind == "attention"]
    assert att.kv_len == rs.training.seq_len // 2


def test_h100_attention_curve_reproduces_the_device_run() -> None:
    """The H100 profile's Hopper-native attention curve against the kernel timings it cites
    (causal, head dim 128, forward+backward in the engine's FLOP convention)."""
    import json

    from simulator.catalog import load_catalog

    gpu = load_catalog().get("h100-sxm-80gb", "gpu")
    t = OpTimer(gpu, "bf16", 0.0, "flash3")
    runs = json.loads((REPO / "benchmarks/results/h100-kernels-2026-11-23.json").read_text())
    rows = [a for a in runs["attention"] if a["causal"] and a["head_dim"] == 128]
    assert len(rows) == 8
    for a in rows:
        op = Op("attention", "attention", flops=a["flops_fwd_full"], bytes=0.0, kv_len=a["seq"])
        fwd, bwd = t.time(op) - t.launch, t.time(backward_op(op)) - t.launch
        assert fwd + bwd == pytest.approx(a["sdpa_fwd_bwd_s"], rel=0.06), a
        assert fwd == pytest.approx(a["sdpa_fwd_s"], rel=0.35), a  # one share, 0.17-0.27 measured


# cuDNN 9.10.2 through PyTorch SDPA on one B200 (NVIDIA/cudnn-frontend, benchmark/
# sdpa_benchmark_bf16_training/artifacts/sdpa_benchmark_results_NVIDIA_B200.csv @87a1bcd):
# batch 1, 128 query heads, head dim 128, causal; (seq, forward ms, backward ms)
B200_CUDNN = ((2048, 0.262, 0.895), (8192, 1.816, 5.815), (16384, 6.475, 20.466),
              (32768, 24.518, 77.677), (65536, 98.489, 327.462))  # fmt: skip


@pytest.mark.parametrize("name", ["b200", "gb200"])
def test_blackwell_attention_reproduces_the_cited_cudnn_timings(name: str) -> None:
    """The Blackwell profiles' cuDNN attention curve against the kernel timings it cites,
    counted the engine's way (full s x s scores, backward 2x the forward: 12/7 of the source's
    own TFLOP/s, which halves a causal run's scores and counts the backward at 2.5x); the
    GB200 at the same share of its higher peak."""
    from simulator.catalog import load_catalog

    gpu = load_catalog().get(name, "gpu")
    t = OpTimer(gpu, "bf16", 0.0, "flash3")
    clock = gpu.peak_flops("bf16") / 2250e12
    for s, fwd_ms, bwd_ms in B200_CUDNN:
        op = Op("attention", "attention", flops=4.0 * s * s * 128 * 128, bytes=0.0, kv_len=s)
        fwd, bwd = t.time(op) - t.launch, t.time(backward_op(op)) - t.launch
        # the fit's residuals, in relative error over 2k-128k: -13.5% to +11.4%
        assert (fwd + bwd) * clock == pytest.approx((fwd_ms + bwd_ms) * 1e-3, rel=0.16), s
        assert fwd / (fwd + bwd) == pytest.approx(fwd_ms / (fwd_ms + bwd_ms), abs=0.02)


def test_attention_efficiency_may_pass_one_but_not_twelve_sevenths() -> None:
    """A causal kernel computes about half the s x s scores the engine counts: efficiencies up
    to 12/7 are figures, beyond that a slip."""
    assert OpTimer(_gpu(attention_max=0.5, attention_flash3_max=1.5), "bf16").attn_eff == 0.5
    data = inline_scenario()
    data["cluster"]["gpu"]["efficiency"]["attention_flash3_max"] = fig(1.8)
    with pytest.raises(UserError, match="attention_flash3_max"):
        resolve_dict(data)


def test_a_faster_gpu_never_slows_a_host_bound_context_parallel_step() -> None:
    """A CP ring hides behind everything from the attention's start to its span's end: under a
    host-bound stack a faster attention kernel left the span as long and hid less of the ring
    (+0.85% at 10x the peak; a physics review)."""
    from conftest import inline_scenario

    from simulator.simulate import simulate

    data = inline_scenario(gpus_per_node=4, global_batch=2)
    data["model"] = {"name": "small", "layers": 12, "hidden": 1024, "heads": 16}
    data["model"] |= {"vocab": 32000, "mlp": "swiglu"}
    data["software"] = "nanotron"
    data["training"] |= {"seq_len": 2048, "micro_batch": 2, "precision": "bf16"}
    data["parallelism"] = {"tp": 2, "cp": 2, "sharding": {"kind": "fsdp"}}
    data["run"] = {"stragglers": "off"}
    steps = []
    for scale in (1.0, 1.5, 2.0, 10.0):
        d = dict(data, cluster=dict(data["cluster"]))
        d["cluster"]["gpu"] = dict(d["cluster"]["gpu"])
        d["cluster"]["gpu"]["peak_tflops"] = {"bf16": fig(989.4 * scale)}
        steps.append(simulate(resolve_dict(d), scaling=False).metrics.step_time_s)
    assert steps == sorted(steps, reverse=True), steps
