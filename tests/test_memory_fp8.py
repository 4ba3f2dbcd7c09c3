"""What fp8 training keeps for backward: TransformerEngine's linear layers save the fp8 copy of
their input (1 byte per element) that they cast for the forward GEMM, torchao's keep the 16-bit
input; everything else a layer saves keeps the training dtype's width."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import CATALOG_SCENARIO

from simulator.config.loading import resolve_dict
from simulator.workload.activations import activation_bytes_per_layer
from simulator.workload.memory import memory_report


def _rs(precision: str, software: str, flash: bool = True, tp: int = 2) -> Any:
    data = {**CATALOG_SCENARIO, "name": f"fp8-{software}"}
    data["training"] = {
        "seq_len": 4096,
        "global_batch": 64,
        "micro_batch": 2,
        "precision": precision,
        "flash_attention": flash,
    }
    data["parallelism"] = {"tp": tp, "sequence_parallel": tp > 1}
    data["software"] = software
    return resolve_dict(data)


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_te_keeps_fp8_matmul_inputs(tp: int) -> None:
    """Two norm outputs (the QKV and up-projection inputs) and the down-projection input drop
    from 2 bytes to 1; the output projection keeps an fp8 copy beside the attention kernel's own
    16-bit output: (2 - 1 + f/h)·sbh/t bytes fewer per layer."""
    bf, f8 = _rs("bf16", "megatron-core", tp=tp), _rs("fp8", "megatron-core", tp=tp)
    m = bf.model
    sbh = 4096 * 2 * m.hidden
    saved = activation_bytes_per_layer(bf) - activation_bytes_per_layer(f8)
    assert saved == pytest.approx((1 + m.ffn / m.hidden) * sbh / tp, rel=1e-12)


def test_without_fused_attention_the_projection_keeps_only_its_fp8_copy() -> None:
    bf = _rs("bf16", "megatron-core", flash=False)
    f8 = _rs("fp8", "megatron-core", flash=False)
    m = bf.model
    sbh = 4096 * 2 * m.hidden
    saved = activation_bytes_per_layer(bf) - activation_bytes_per_layer(f8)
    assert saved == pytest.approx((2 + 1 + m.ffn / m.hidden) * sbh / 2, rel=1e-12)


def test_torchao_float8_keeps_16_bit_inputs() -> None:
    bf, f8 = _rs("bf16", "torchtitan"), _rs("fp8", "torchtitan")
    assert activation_bytes_per_layer(f8) == activation_bytes_per_layer(bf)


def test_fp8_never_needs_more_memory_than_bf16() -> None:
    for stack in ("megatron-core", "pytorch-fsdp", "torchtitan"):
        for flash in (True, False):
            bf = memory_report(_rs("bf16", stack, flash=flash)).peak
            f8 = memory_report(_rs("fp8", stack, flash=flash)).peak
            assert f8.activations_gb <= bf.activations_gb, (stack, flash)
