"""The optimizer step's memory traffic under a software stack's extra passes.

A fused mixed-precision Adam update reads the gradient, reads and writes the fp32 master weight
and both moments, and writes the 16-bit working weight: 2 + 24 + 2 = 28 bytes per parameter
with 16-bit gradients. Megatron-LM's step (megatron/optimizer/optimizer.py) adds a copy of the
16-bit gradients into fp32 main gradients (which the update then reads), an unscale pass under
fp16 loss scaling, the clipping norm and a separate master-to-model weight copy over its shard,
and zeroes the whole gradient buffer (every parameter, not the shard)."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.config.loading import resolve_dict
from simulator.engine.sim import run_engine
from simulator.workload.memory import (
    buffer_bytes_per_param,
    optimizer_bytes_per_param,
    stage_params,
)

BASE: dict[str, Any] = {
    "name": "opt",
    "cluster": {
        "gpu": "a100-sxm4-80gb",
        "gpus_per_node": 8,
        "nodes": 1,
        "fabric": "nvlink3-nvswitch",
    },
    "model": {"layers": 4, "hidden": 2048, "heads": 16, "vocab": 32000},
    "training": {
        "seq_len": 1024,
        "global_batch": 8,
        "micro_batch": 1,
        "precision": "fp16",
        "grad_reduce_dtype": "bf16",
    },
    "parallelism": {"tp": 8},
    "run": {"stragglers": "off"},  # op times at the profile's speed
}


def _rs(software: Any, **training: Any) -> Any:
    data = {**BASE, "training": {**BASE["training"], **training}, "software": software}
    return resolve_dict(data)


def test_a_fused_update_touches_each_tensor_once() -> None:
    # a stack whose profile names no extra passes
    assert _rs("pytorch-fsdp").software.optimizer_passes is None
    assert optimizer_bytes_per_param(_rs("pytorch-fsdp")) == 28


def test_megatron_passes_add_their_traffic() -> None:
    # over the shard: grad copy 2 + 4 (+2: the update reads fp32), unscale 8, norm 4, weight
    # copy 4; over the whole buffer: zeroing it, 2
    meg = _rs("megatron-lm-2021")
    assert optimizer_bytes_per_param(meg) == 28 + 8 + 8 + 4 + 4
    assert buffer_bytes_per_param(meg) == 2
    # bf16 has no loss scaler, so no unscale pass
    bf16 = _rs("megatron-core", precision="bf16", grad_reduce_dtype="bf16")
    assert optimizer_bytes_per_param(bf16) == 28 + 8 + 4 + 4
    # fp32 main gradients need no copy: the update reads them anyway
    fp32g = _rs("megatron-core", precision="bf16", grad_reduce_dtype="fp32")
    assert optimizer_bytes_per_param(fp32g) == (4 + 24 + 2) + 4 + 4
    assert buffer_bytes_per_param(fp32g) == 4
    assert buffer_bytes_per_param(_rs("pytorch-fsdp")) == 0


def test_the_engine_charges_the_traffic_at_memory_bandwidth() -> None:
    fused, meg = _rs("pytorch-fsdp"), _rs("megatron-lm-2021")
    t_fused = run_engine(fused).classes[0].acc["optimizer"]
    t_meg = run_engine(meg).classes[0].acc["optimizer"]
    assert t_fused > 0
    # unsharded here, so the time grows with the bytes (a fixed launch cost aside)
    assert stage_params(fused, 0) == stage_params(meg, 0)
    assert t_meg / t_fused == pytest.approx(54 / 28, rel=0.02)


def test_megatron_adds_every_backward_into_the_gradient_buffer() -> None:
    """Megatron-LM 2021's DDP hook adds each backward's 16-bit weight gradients into the
    persistent buffer (read both, write the buffer): a memory-bound pass per layer and per
    micro-batch, which a stack that accumulates inside the GEMM does not make."""
    from simulator.engine.sim import Simulation

    off = {"value": False, "source": "test: accumulated inside the GEMM"}
    meg = Simulation(_rs("megatron-lm-2021"))
    fused = Simulation(_rs({"profile": "megatron-lm-2021", "grad_accumulate_add": off}))
    per_param = 2 * 2 + 2  # 16-bit buffer read and written, the fresh gradient read
    expect = meg.timer.memory_time(meg.layer_params * per_param)
    assert meg.p_bwd.duration - fused.p_bwd.duration == pytest.approx(expect, rel=1e-9)
    assert meg.p_fwd.duration == fused.p_fwd.duration
    head = meg.timer.memory_time(meg.head_params * per_param) if meg.head_params else 0.0
    assert meg.p_head_b.duration - fused.p_head_b.duration == pytest.approx(head, rel=1e-9)


def test_megatron_2022_fuses_the_add_into_the_gemm_only_for_fp32_gradients() -> None:
    """Megatron-LM 2022's --gradient-accumulation-fusion runs only where gradients accumulate
    in fp32 (bf16 forces it): there the weight-gradient GEMM adds into the buffer and no add
    kernel runs; fp16 with 16-bit gradients keeps the 2021 add."""
    from simulator.engine.sim import Simulation

    fp16 = Simulation(_rs("megatron-lm-2022"))
    old16 = Simulation(_rs("megatron-lm-2021"))
    bf16 = Simulation(_rs("megatron-lm-2022", precision="bf16", grad_reduce_dtype="fp32"))
    old_bf16 = Simulation(_rs("megatron-lm-2021", precision="bf16", grad_reduce_dtype="fp32"))
    per_param = 2 * 4 + 2  # fp32 buffer read and written, the fresh 16-bit gradient read
    add = old_bf16.timer.memory_time(old_bf16.layer_params * per_param)
    # 2022 differs from 2021 only by the asynchronous TP backward (and, in bf16, the add)
    tp_gain = old16.p_bwd.duration - fp16.p_bwd.duration
    assert tp_gain > 0
    assert old_bf16.p_bwd.duration - bf16.p_bwd.duration == pytest.approx(tp_gain + add, rel=1e-6)


def test_zeroing_covers_the_whole_buffer_under_a_sharded_optimizer() -> None:
    """With the distributed optimizer (ZeRO-1) the update runs on 1/DP of the parameters but
    every rank still zeroes its whole gradient buffer."""
    from simulator.engine.sim import Simulation

    data = {**BASE, "software": "megatron-core"}
    data["parallelism"] = {"tp": 4, "sharding": {"kind": "zero", "stage": 1}}
    rs = resolve_dict(data)
    sim = Simulation(rs)
    params = sim._stage_params(0)
    shard = params / sim.shard_n
    assert sim.shard_n == 2
    want = shard * optimizer_bytes_per_param(rs) + params * buffer_bytes_per_param(rs)
    assert sim._optimizer_time(shard, params) == pytest.approx(sim.timer.optimizer_time(want))


def test_deepspeed_bf16_optimizer_casts_before_its_add() -> None:
    """DeepSpeed's BF16_Optimizer adds each backward's bf16 gradients into fp32 ones as
    ``hp_grad.add_(lp.grad.to(fp32))``: the cast writes an fp32 temporary that the add reads,
    18 bytes per parameter where an add that converts on the fly moves 10."""
    from simulator.engine.sim import Simulation

    no = {"value": False, "source": "test: converted inside the add"}
    kw = {"precision": "bf16", "grad_reduce_dtype": "fp32"}
    ds = Simulation(_rs("megatron-deepspeed", **kw))
    inline = Simulation(_rs({"profile": "megatron-deepspeed", "grad_accumulate_cast": no}, **kw))
    t = ds.timer.memory_time
    extra = t(ds.layer_params * 18) - t(ds.layer_params * 10)  # the temporary, written and read
    assert ds.p_bwd.duration - inline.p_bwd.duration == pytest.approx(extra, rel=1e-9)
    assert ds.p_fwd.duration == inline.p_fwd.duration
