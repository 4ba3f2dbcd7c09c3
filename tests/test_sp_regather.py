"""Under sequence parallelism a column-parallel layer needs its whole input for the weight
gradient. Megatron's and TransformerEngine's layers keep only the sequence shard and gather it
again in the backward (beside the input-gradient GEMM when the backward is asynchronous,
exposed otherwise); DTensor's plan (torchtitan, eager PyTorch TP) gathers the block input once
and keeps it whole (``software.sp_keeps_gathered_input``): no gather in the backward, more
memory."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import CATALOG_SCENARIO

from simulator.config.loading import resolve_dict
from simulator.simulate import simulate
from simulator.workload.activations import activation_bytes_per_layer, matmul_input_bytes
from simulator.workload.ops import layer_ops
from simulator.workload.tp_backward import stack_backward


def _rs(software: str = "megatron-core", tp_backward: bool | None = None, sp: bool = True) -> Any:
    data: dict[str, Any] = {**CATALOG_SCENARIO, "name": "sp", "software": software}
    data["training"] = {"seq_len": 4096, "global_batch": 8, "micro_batch": 1}
    data["parallelism"] = {"tp": 8, "sequence_parallel": sp}
    if tp_backward is not None:
        data["parallelism"]["overlap"] = {"tp_backward": tp_backward}
    return resolve_dict(data)


def _regathers(rs: Any) -> list[Any]:
    return [o for o in stack_backward(rs, layer_ops(rs)) if o.name.endswith("_regather")]


@pytest.mark.parametrize("overlapped", [True, False])
def test_a_kept_shard_is_gathered_again_in_the_backward(overlapped: bool) -> None:
    rs = _rs(tp_backward=overlapped)
    again = _regathers(rs)
    assert sorted(o.name for o in again) == ["mlp_up_regather", "qkv_proj_regather"]
    gathers = [o for o in layer_ops(rs) if o.group == "tp" and o.collective == "all_gather"]
    assert sorted(o.msg_bytes for o in again) == sorted(o.msg_bytes for o in gathers)
    assert all(o.overlapped == overlapped for o in again)


def test_without_sequence_parallelism_nothing_is_gathered_again() -> None:
    assert _regathers(_rs(tp_backward=False, sp=False)) == []


@pytest.mark.parametrize("software", ["torchtitan", "pytorch-eager"])
def test_dtensor_keeps_the_gathered_input_and_gathers_nothing_again(software: str) -> None:
    keeps = _rs(software)
    assert _regathers(keeps) == []
    shard = keeps.model_copy(
        update={"software": keeps.software.model_copy(update={"sp_keeps_gathered_input": None})}
    )
    assert sorted(o.name for o in _regathers(shard)) == ["mlp_up_regather", "qkv_proj_regather"]
    # the two matmul inputs (attention's, the MLP's) whole instead of one TP shard each
    sbh = 4096 * 1 * keeps.model.hidden
    extra = 2 * matmul_input_bytes(keeps) * sbh * (1 - 1 / 8)
    diff = activation_bytes_per_layer(keeps) - activation_bytes_per_layer(shard)
    assert diff == pytest.approx(extra, rel=1e-12)


def test_overlapping_the_backward_is_never_slower() -> None:
    """The reviewer's case: TP 8 through the host's PCIe, where the exposed re-gathers cost the
    most; overlap on was 9.9% slower than off while off left the gathers out."""
    model = {"name": "tiny", "layers": 2, "hidden": 2048, "heads": 16, "kv_heads": 8}
    model |= {"ffn_hidden": 5632, "vocab": 32000}
    t = {}
    for on in (False, True):
        data: dict[str, Any] = {**CATALOG_SCENARIO, "name": "pcie", "model": model}
        data["cluster"] = {"gpu": "h100-pcie-80gb", "gpus_per_node": 8, "nodes": 1}
        data["cluster"] |= {"fabric": "pcie5-host", "storage": "local-nvme"}
        data["training"] = {"seq_len": 1024, "global_batch": 1, "micro_batch": 1}
        data["parallelism"] = {"tp": 8, "sequence_parallel": True}
        data["parallelism"]["overlap"] = {"tp_backward": on}
        data["run"] = {"stragglers": "off"}
        t[on] = simulate(resolve_dict(data), scaling=False).metrics
    assert t[True].step_time_s <= t[False].step_time_s
    assert t[True].breakdown_s["comm_tp"] < t[False].breakdown_s["comm_tp"]


@pytest.mark.parametrize("overlapped", [True, False])
def test_fp8_all_gathers_move_the_fp8_cast(overlapped: bool) -> None:
    """Under fp8 a stack that gathers the linear layers' fp8 input (``fp8_tp_all_gather``:
    TransformerEngine, torchao's float8 TP) moves one byte per element in the forward
    all-gathers and in their backward re-gathers; the input gradients' reduce-scatters stay
    16-bit, and the output layer's gather (16-bit under fp8 recipes) too."""
    base = _rs(tp_backward=overlapped)
    fp8 = base.model_copy(
        update={"training": base.training.model_copy(update={"precision": "fp8"})}
    )
    assert fp8.software.fp8_tp_all_gather is not None and fp8.software.fp8_tp_all_gather.value
    wide = {o.name: o.msg_bytes for o in layer_ops(base) if o.group == "tp"}
    narrow = {o.name: o.msg_bytes for o in layer_ops(fp8) if o.group == "tp"}
    for name, size in wide.items():
        half = name in ("tp_attn_in", "tp_mlp_in")
        assert narrow[name] == (size / 2 if half else size), name
    back = {o.name: o.msg_bytes for o in stack_backward(fp8, layer_ops(fp8)) if o.group == "tp"}
    assert back["tp_attn_in_bwd"] == wide["tp_attn_in"]  # the 16-bit input gradient
    assert back["tp_mlp_in_bwd"] == wide["tp_mlp_in"]
    assert back["qkv_proj_regather"] == wide["tp_attn_in"] / 2  # the saved fp8 input
    assert back["mlp_up_regather"] == wide["tp_mlp_in"] / 2
    # a stack that gathers the 16-bit input, as without the switch
    plain = fp8.model_copy(
        update={"software": fp8.software.model_copy(update={"fp8_tp_all_gather": None})}
    )
    assert {o.name: o.msg_bytes for o in layer_ops(plain) if o.group == "tp"} == wide
