"""The accuracy mechanisms against their analytical limits.

Each effect added for accuracy (GEMM shape efficiency and the fp8 curve, fp8 casts,
memory-bound kernels, software-stack overlap and fusion, blocking pipeline sends) is checked
where its answer is known in closed form (NCCL's protocols and algorithms: test_nccl_model.py);
the published sets against their bands: test_accuracy_bands.py.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest
from conftest import REPO, fig, inline_scenario

from simulator.config.loading import load_scenario, resolve_dict
from simulator.engine.compute import OpTimer
from simulator.simulate import simulate
from simulator.workload.ops import Op, backward_op, layer_ops


def _gpu(**eff: float) -> Any:
    data = inline_scenario()
    data["cluster"]["gpu"]["sm_count"] = fig(132)
    for k, v in eff.items():
        data["cluster"]["gpu"]["efficiency"][k] = fig(v)
    return resolve_dict(data).gpu


def test_large_square_gemm_reaches_best_efficiency() -> None:
    gpu = _gpu()
    t = OpTimer(gpu, "bf16")
    n = 128 * 132  # whole waves of 128x128 tiles
    secs = t.gemm_time(1, n, n, n) - t.launch
    eff = 2.0 * n**3 / secs / t.gemm_peak
    assert eff == pytest.approx(t.mm_max, rel=0.01)


def test_fp8_gemms_follow_their_own_curve_and_the_wide_ones_stay_16_bit() -> None:
    gpu = _gpu(matmul_fp8_max=0.6, matmul_fp8_half_flops=5e9)
    t8, t16 = OpTimer(gpu, "fp8"), OpTimer(gpu, "bf16")
    n = 128 * 132
    eff = 2.0 * n**3 / (t8.gemm_time(1, n, n, n) - t8.launch) / gpu.peak_flops("fp8")
    assert eff == pytest.approx(0.6 * 2.0 * n**3 / (2.0 * n**3 + 5e9), rel=1e-6)
    # A GEMM fp8 training keeps in 16-bit (the logits, the attention products) runs at the
    # 16-bit rate and curve, as under bf16.
    wide = Op("logits", "gemm", flops=2.0 * n**3, dims=(1, n, n, n), wide=True)
    assert t8.time(wide) == pytest.approx(t16.time(wide))
    assert t8.time(replace(wide, wide=False)) < t16.time(wide)


def test_fp8_backward_gemms_promote_their_sums_and_run_slower_than_the_forward() -> None:
    """fp8 training's input- and weight-gradient GEMMs promote partial sums to FP32 (no fast
    accumulation) and run at ``matmul_fp8_promoted_accum`` of the forward's rate; the GEMMs it
    keeps in 16 bits, bf16 training, and a GPU without the figure (Blackwell) are unchanged."""
    n = 128 * 132  # whole waves, so the rate is the only difference
    fwd = Op("x", "gemm", flops=2.0 * n**3, dims=(1, n, n, n))
    bwd = backward_op(fwd)
    slow, fast = _gpu(matmul_fp8_promoted_accum=0.8), _gpu()
    t_slow, t_fast = OpTimer(slow, "fp8"), OpTimer(fast, "fp8")
    assert t_slow.time(fwd) == pytest.approx(t_fast.time(fwd))
    body = t_fast.time(bwd) - 2 * t_fast.launch  # two products, each compute-bound
    assert t_slow.time(bwd) - 2 * t_slow.launch == pytest.approx(body / 0.8, rel=1e-9)
    wide = backward_op(replace(fwd, wide=True))
    assert t_slow.time(wide) == pytest.approx(t_fast.time(wide))
    assert OpTimer(slow, "bf16").time(bwd) == pytest.approx(OpTimer(fast, "bf16").time(bwd))
    # a stack whose backward accumulates fast too (torchao's rowwise recipes) runs it at the
    # forward's rate
    fast_bwd = OpTimer(slow, "fp8", fp8_backward_fast=True)
    assert fast_bwd.time(bwd) == pytest.approx(t_fast.time(bwd))
    from simulator.catalog import load_catalog

    cat = load_catalog()
    for stack in ("megatron-core", "pytorch-fsdp", "torchtitan"):  # TE; torchao tensorwise
        flag = cat.get(stack, "software").fp8_backward_fast_accum
        assert flag is not None and not flag.value, stack
    for name in ("h100-sxm-80gb", "h200-sxm-141gb", "h100-pcie-80gb"):  # Hopper: fast mode
        assert cat.get(name, "gpu").efficiency.matmul_fp8_promoted_accum is not None, name
    for name in ("b200", "gb200"):  # Blackwell accumulates fp8 in full FP32: no fast mode
        assert cat.get(name, "gpu").efficiency.matmul_fp8_promoted_accum is None, name


def test_fp8_training_casts_every_fp8_gemm_input_and_output_gradient() -> None:
    from simulator.workload.ops import FP8_CAST_BYTES, backward_ops

    def ops(precision: str) -> list[Op]:
        return layer_ops(resolve_dict(inline_scenario(precision=precision, tp=2)))

    assert not [o for o in ops("bf16") if o.name == "fp8_casts"]
    fwd = ops("fp8")
    (cast,) = [o for o in fwd if o.name == "fp8_casts"]
    gemms = [o.dims for o in fwd if o.kind == "gemm" and not o.wide and o.dims]
    assert len(gemms) == 4  # qkv, out, up, down; the attention products are not cast
    assert cast.bytes == FP8_CAST_BYTES * sum(b * m * k for b, m, _, k in gemms)
    (back,) = [o for o in backward_ops(fwd) if o.name == "fp8_casts_bwd"]
    assert back.bytes == FP8_CAST_BYTES * sum(b * m * n for b, m, n, _ in gemms)


def test_wave_quantisation_costs_a_partial_wave() -> None:
    t = OpTimer(_gpu(), "bf16")
    # 133 tiles of 128×128 on 132 SMs: two waves for 133/132 of one wave's work; 67 tiles of
    # 256×128: one wave, half full. The better of the two.
    assert t.wave_efficiency(1, 128 * 133, 128) == pytest.approx(max(133 / 264, 67 / 132))
    assert t.wave_efficiency(1, 128 * 132, 128) == 1.0


def test_small_output_is_split_along_k_not_run_as_a_partial_wave() -> None:
    from simulator.engine.compute import SPLIT_K_COST

    t = OpTimer(_gpu(), "bf16")
    # 1024×512 output: 32 tiles of 128×128 on 132 SMs. One wave would leave 100 SMs idle
    # (0.24); split-K fills them and pays for the partial sums.
    fill = 32 / 132
    assert t.wave_efficiency(1, 1024, 512) == pytest.approx(1 / (1 + SPLIT_K_COST * (1 - fill)))
    # Never worse than waves, and a full wave is unaffected.
    for m, n in [(128, 128), (256, 4096), (2048, 1024), (128 * 132, 128)]:
        tiles = -(-m // 128) * -(-n // 128)
        assert t.wave_efficiency(1, m, n) >= min(1.0, tiles / 132) - 1e-12


def test_thin_batched_gemm_is_memory_bound() -> None:
    t = OpTimer(_gpu(), "bf16")
    b, s, d = 64, 2048, 8  # QK^T with a tiny head: the s×s output dominates
    secs = t.gemm_time(b, s, s, d) - t.launch
    nbytes = 2 * b * (s * d + d * s + s * s)
    assert secs == pytest.approx(nbytes / t.mem_bw, rel=1e-9)


def test_memory_bound_kernel_takes_bytes_over_bandwidth() -> None:
    t = OpTimer(_gpu(), "bf16")
    op = Op("x", "memory", bytes=1e9)
    assert t.time(op) == pytest.approx(1e9 / t.mem_bw + t.launch)


def test_backward_gemm_is_its_two_products() -> None:
    t = OpTimer(_gpu(), "bf16")
    fwd = Op("g", "gemm", flops=2.0 * 4096 * 1024 * 512, dims=(1, 4096, 1024, 512))
    bwd = Op("g_bwd", "gemm", flops=2 * fwd.flops, dims=fwd.dims, backward=True)
    assert t.time(bwd) == pytest.approx(
        t.gemm_time(1, 4096, 512, 1024) + t.gemm_time(1, 512, 1024, 4096)
    )


def _step(data: dict[str, Any]) -> Any:
    return simulate(resolve_dict(data), scaling=False)


def test_a_stack_that_overlaps_nothing_exposes_all_dp_communication() -> None:
    base = inline_scenario(nodes=2, global_batch=32)
    over = copy.deepcopy(base)
    over["parallelism"]["overlap"] = {"dp_grad": True}
    none = copy.deepcopy(base)
    none["parallelism"]["overlap"] = {"dp_grad": False}
    a, b = _step(over).metrics, _step(none).metrics
    assert b.idle_s["comm_dp"] > a.idle_s["comm_dp"]
    assert b.step_time_s == pytest.approx(
        a.busy_s + b.idle_s["comm_dp"] + b.idle_s["data_stall"], rel=0.02
    )


def test_blocking_pipeline_sends_cost_time_on_the_compute_stream() -> None:
    base = inline_scenario(nodes=2, global_batch=16, pp=4, tp=4)
    blocking = copy.deepcopy(base)
    blocking["parallelism"]["overlap"] = {"pp_p2p": False}
    a, b = _step(base).metrics, _step(blocking).metrics
    assert b.step_time_s > a.step_time_s
    assert b.breakdown_s["comm_pp"] > a.breakdown_s["comm_pp"]


def test_unfused_softmax_chain_moves_more_bytes() -> None:
    data = inline_scenario("megatron-1.7b", flash_attention=False)
    fused = resolve_dict({**data, "software": "megatron-lm-2021"})
    eager = resolve_dict({**data, "software": "pytorch-fsdp"})

    def mem(rs: Any) -> float:
        return sum(o.bytes for o in layer_ops(rs) if o.kind == "memory")

    assert mem(eager) > mem(fused)
    assert (
        _step({**data, "software": "pytorch-fsdp"}).metrics.step_time_s
        > _step({**data, "software": "megatron-lm-2021"}).metrics.step_time_s
    )


def test_the_2019_stack_runs_the_softmax_chain_and_residual_kernels_apart() -> None:
    """Megatron-LM 2019 (mpu/transformer.py) masks and softmaxes the scores with separate
    PyTorch kernels and runs dropout and the residual add apart, where the 2021 code fuses
    each chain into one kernel: the same layer moves more bytes, in exactly those ops, and its
    step is slower; everything else (GEMMs, collectives) is the 2021 stack's."""
    data = inline_scenario("megatron-1.7b", flash_attention=False)
    old = resolve_dict({**data, "software": "megatron-lm-2019"})
    new = resolve_dict({**data, "software": "megatron-lm-2021"})
    names = {o.name for o in layer_ops(old) if o.kind == "memory"}
    assert {"scale", "mask", "softmax", "dropout", "residual_add"} <= names
    assert "scale_mask_softmax" not in names and "bias_dropout_add" not in names
    gemms = [(o.name, o.flops) for o in layer_ops(old) if o.kind == "gemm"]
    assert gemms == [(o.name, o.flops) for o in layer_ops(new) if o.kind == "gemm"]
    assert (
        _step({**data, "software": "megatron-lm-2019"}).metrics.step_time_s
        > _step({**data, "software": "megatron-lm-2021"}).metrics.step_time_s
    )


def test_selective_recompute_reruns_the_whole_attention_core() -> None:
    """Selective recomputation (Korthikanti et al. 2022, Sec. 5) runs QK^T, softmax, its
    dropout and attention over V again before the backward pass: the backward grows by exactly
    their forward time, and not by the rest of the layer."""
    from simulator.engine.sim import Simulation
    from simulator.workload.recompute import attention_core

    data = inline_scenario("megatron-1.7b", flash_attention=False)
    data = {**data, "software": "megatron-lm-2021"}

    def sim(rc: str) -> Any:
        d = copy.deepcopy(data)
        d["parallelism"]["recompute"] = rc
        return Simulation(resolve_dict(d))

    none, sel = sim("none"), sim("selective")
    core = attention_core(layer_ops(none.rs))
    assert [o.name for o in core] == [
        "attn_scores",
        "scale_mask_softmax",
        "attn_dropout",
        "attn_values",
    ]
    timer = none.timer
    extra = sum(timer.time(o) for o in core)
    assert sel.p_bwd.duration - none.p_bwd.duration == pytest.approx(extra, rel=1e-9)
    assert sel.p_bwd.duration < sim("full").p_bwd.duration


def test_short_kernels_run_at_the_hosts_pace() -> None:
    from simulator.engine.program import build_program

    gpu = _gpu()
    tiny = [Op(f"k{i}", "memory", bytes=1e3) for i in range(10)]
    fast_host = build_program(tiny, OpTimer(gpu, "bf16", 0.0), {})
    slow_host = build_program(tiny, OpTimer(gpu, "bf16", 50.0), {})
    assert slow_host.duration == pytest.approx(10 * 50e-6)
    assert fast_host.duration < slow_host.duration
    big = [Op("big", "memory", bytes=1e10)]
    assert build_program(big, OpTimer(gpu, "bf16", 50.0), {}).duration == pytest.approx(
        build_program(big, OpTimer(gpu, "bf16", 0.0), {}).duration
    )


def test_a_kernel_after_host_bound_ones_starts_when_issued() -> None:
    """The host issues kernels one per host_us_per_kernel; each runs when issued and the GPU
    is free: a long kernel after ten short ones starts at the tenth issue, not at zero."""
    from simulator.engine.program import build_program

    timer = OpTimer(_gpu(), "bf16", 50.0)
    tiny = [Op(f"k{i}", "memory", bytes=1e3) for i in range(10)]
    big = Op("big", "memory", bytes=1e10)
    g = timer.time(big)
    assert g > 100e-6
    assert build_program([*tiny, big], timer, {}).duration == pytest.approx(10 * 50e-6 + g)


def test_tp_overlap_never_gets_slower_with_a_faster_gemm() -> None:
    """An overlapped TP collective hides behind the GEMM before it from the GEMM's start to
    the span's end: a faster GEMM in a host-bound span (the GPU waiting on the host) leaves
    the span as long and the collective as hidden, never more exposed."""
    from simulator.engine.program import build_program

    tiny = [Op(f"k{i}", "memory", bytes=1e3) for i in range(20)]
    coll = Op("rs", "collective", collective="reduce_scatter", group="tp", msg_bytes=1e6)
    by_pace = []
    for pace in (1.0, 1.2):  # and the straggler's stretch never shortens the step
        totals = []
        for m in (4096, 2048, 1024, 512, 256):
            gemm = Op("g", "gemm", flops=2.0 * m * 4096 * 4096, dims=(1, m, 4096, 4096))
            # four GEMM spans whose collectives the GEMMs hide, then short kernels
            ops = [*tiny, gemm, coll] * 4 + tiny * 3
            prog = build_program(
                ops, OpTimer(_gpu(), "bf16", 30.0), {"tp:reduce_scatter:1000000.0": 400e-6},
                overlap_tp=True, pace=pace,
            )  # fmt: skip
            totals.append(prog.duration)
        assert totals == sorted(totals, reverse=True), totals
        by_pace.append(totals)
    assert all(b >= a for a, b in zip(*by_pace, strict=True)), by_pace


def test_hiding_a_tp_collective_never_slows_a_host_bound_step() -> None:
    """nanotron's asynchronous TP backward (its default) on a host-bound 3.6B step: the
    collectives it hides took the host's lead with them, and the step ran 4% slower with the
    overlap on than off (a physics review); the host keeps what it gained."""
    base = REPO / "scenarios" / "llama3-8b-8xh100.yaml"
    common = ["model=megatron-3.6b", "software=nanotron", "parallelism.tp=2"]
    common += ["parallelism.sequence_parallel=true", "training.seq_len=2048"]
    common += ["training.global_batch=8"]
    steps = [
        simulate(load_scenario(base, [*common, f"parallelism.overlap.{k}={v}"]), scaling=False)
        for k, v in (("tp_backward", "false"), ("tp_backward", "true"), ("tp_comm", "true"))
    ]
    off, backward, both = (s.metrics.step_time_s for s in steps)
    assert both <= backward <= off
    assert steps[0].metrics.breakdown_s["host"] > 0.05 * off  # host-bound indeed


def _program_time(
    shape: list[tuple[str, float, bool]],
    coll_time: dict[str, float],
    host: float,
    pace: float,
    scale: float = 1.0,
    overlap: bool = False,
) -> float:
    """How long a program of ``shape`` (GEMMs, short kernels, TP collectives) takes."""
    from simulator.engine.program import build_program

    ops = []
    for kind, x, overlapped in shape:
        if kind == "gemm":
            m = max(16, int(4096 * x * scale))
            ops.append(Op("g", "gemm", flops=2.0 * m * 4096**2, dims=(1, m, 4096, 4096)))
        elif kind == "memory":
            ops.append(Op("k", "memory", bytes=1e8 * x))
        else:
            ops.append(Op("c", "collective", collective="all_reduce", group="tp",
                          msg_bytes=x, overlapped=overlapped))  # fmt: skip
    timer = OpTimer(_gpu(), "bf16", host)
    return build_program(ops, timer, coll_time, overlap_tp=overlap, pace=pace).duration


def test_random_programs_are_monotone_in_gpu_speed_overlap_and_pace() -> None:
    """Programs of GEMMs, short kernels and TP collectives (some the stack overlaps) at random
    host speeds: smaller GEMMs, the TP overlap on, or a smaller straggler stretch never make
    one longer (a review found all three broken once the host's lead crossed spans)."""
    import random

    rnd = random.Random(7)
    for _ in range(300):
        shape: list[tuple[str, float, bool]] = []
        coll_time: dict[str, float] = {}
        for i in range(rnd.randint(2, 12)):
            r = rnd.random()
            kind = "gemm" if r < 0.35 else "memory" if r < 0.7 else "coll"
            shape.append((kind, rnd.uniform(0.1, 1.0) if kind != "coll" else i, rnd.random() < 0.3))
            if kind == "coll":
                coll_time[f"tp:all_reduce:{float(i)}"] = rnd.uniform(0.0, 2e-3)
        host, pace = rnd.uniform(0.0, 200.0), rnd.choice([1.0, 1.1, 1.5])
        base = _program_time(shape, coll_time, host, pace)
        assert _program_time(shape, coll_time, host, pace, scale=0.5) <= base * (1 + 1e-9)
        assert _program_time(shape, coll_time, host, pace, overlap=True) <= base * (1 + 1e-9)
        assert _program_time(shape, coll_time, host, pace * 1.2) >= base * (1 - 1e-9)
