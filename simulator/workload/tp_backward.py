"""Megatron's asynchronous tensor-parallel backward: a column-parallel layer's collectives run
beside its own backward GEMMs (the transformer layers' QKV and MLP-up projections, and the
output layer).

In the forward pass a column-parallel linear layer (the QKV projection, the MLP's up
projection) starts a TP region; its backward computes the input gradient (dgrad), launches that
gradient's reduction asynchronously (an all-reduce, or with sequence parallelism a
reduce-scatter) and computes the weight gradient (wgrad) while it runs. With sequence
parallelism the layer kept only its sequence shard of the input, so the backward first gathers
the whole input again, asynchronously, beside the dgrad GEMM (Korthikanti et al. 2022,
arXiv 2205.05198, Sec. 4.2.2; NVIDIA/Megatron-LM megatron/mpu/layers.py
LinearWithGradAccumulationAndAsyncAllreduce and ColumnParallelLinearWithSequenceParallelism,
megatron/core/tensor_parallel/layers.py LinearWithGradAccumulationAndAsyncCommunication).

:func:`async_tp_backward` rewrites a layer's backward operation list (``ops.backward_ops``)
accordingly: each column-parallel GEMM's backward splits into its dgrad and wgrad products, and
the collective each overlaps follows it, marked ``overlapped`` (``engine.program`` hides it
behind the GEMM before it).
"""

from __future__ import annotations

from dataclasses import replace

from ..config.scenario import ResolvedScenario
from ..config.software import on
from .ops import Op, backward_ops

# The column-parallel GEMMs (``ops.layer_ops``, ``ops.head_ops``: Megatron's output layer runs
# the same linear function), whose backward reduces the input gradient over the TP group.
COLUMN_PARALLEL = ("qkv_proj_bwd", "mlp_up_bwd", "logits_bwd")


def async_tp_backward(bwd: list[Op], sequence_parallel: bool, regather: bool = True) -> list[Op]:
    """``bwd`` (one layer's backward, as ``ops.backward_ops`` gives it) with each column-parallel
    GEMM's collectives beside its backward products. Without sequence parallelism the TP
    all-reduce that ``backward_ops`` places at the mirror of the forward's closing one moves
    after the GEMM's dgrad and overlaps its wgrad; with it, the reduce-scatter after the GEMM
    overlaps the wgrad, and a re-gather of the input (the forward's all-gather) overlaps the
    dgrad, unless ``regather`` is false (a stack that keeps the gathered input:
    ``software.sp_keeps_gathered_input``)."""
    out: list[Op] = []
    held: Op | None = None  # a non-SP all-reduce on its way to its column-parallel GEMM
    i = 0
    while i < len(bwd):
        op = bwd[i]
        i += 1
        if op.group == "tp" and op.collective == "all_reduce" and not sequence_parallel:
            if held is not None:
                out.append(held)
            held = op
            continue
        if op.kind != "gemm" or op.name not in COLUMN_PARALLEL or op.dims is None:
            out.append(op)
            continue
        dgrad = replace(op, name=op.name[:-4] + "_dgrad", flops=op.flops / 2, part="dgrad")
        wgrad = replace(op, name=op.name[:-4] + "_wgrad", flops=op.flops / 2, part="wgrad")
        nxt = bwd[i] if i < len(bwd) else None
        nxt_tp = nxt is not None and nxt.kind == "collective" and nxt.group == "tp"
        if sequence_parallel and nxt is not None and nxt_tp:
            # the reduce-scatter of the input gradient (mirror of the forward's all-gather)
            again = [_regather(op, nxt, overlapped=True)] if regather else []
            out += [dgrad, *again, wgrad, replace(nxt, overlapped=True)]
            i += 1
        elif held is not None:
            out += [dgrad, wgrad, replace(held, overlapped=True)]
            held = None
        elif nxt is not None and nxt_tp and nxt.collective == "all_reduce":
            # already after its GEMM (the output layer's backward-only all-reduce)
            out += [dgrad, wgrad, replace(nxt, overlapped=True)]
            i += 1
        else:
            out.append(op)
    if held is not None:
        out.append(held)
    return out


def _regather(gemm: Op, grad_rs: Op, overlapped: bool = False) -> Op:
    """The all-gather of column-parallel ``gemm``'s saved input shard before its backward: the
    forward all-gather's bytes (its fp8 cast where the stack gathers that), which the input
    gradient's reduce-scatter ``grad_rs`` carries as its mirror's size."""
    size = grad_rs.msg_bytes if grad_rs.backward_bytes is None else grad_rs.backward_bytes
    return replace(
        grad_rs,
        name=gemm.name[:-4] + "_regather",
        collective="all_gather",
        msg_bytes=size,
        overlapped=overlapped,
    )


def regather_backward(bwd: list[Op]) -> list[Op]:
    """``bwd`` (one layer's backward under sequence parallelism, as ``ops.backward_ops`` gives
    it) with each column-parallel GEMM's input gathered again over TP just before the GEMM, on
    the compute stream: the layer kept only its sequence shard, and with nothing overlapped the
    gather is exposed (its size is the forward's all-gather, whose mirror, the reduce-scatter
    of the input gradient, follows the GEMM)."""
    out: list[Op] = []
    for i, op in enumerate(bwd):
        nxt = bwd[i + 1] if i + 1 < len(bwd) else None
        if (
            op.kind == "gemm"
            and op.name in COLUMN_PARALLEL
            and nxt is not None
            and nxt.kind == "collective"
            and nxt.group == "tp"
        ):
            out.append(_regather(op, nxt))
        out.append(op)
    return out


def stack_backward(rs: ResolvedScenario, forward: list[Op]) -> list[Op]:
    """The backward of ``forward`` as ``rs``'s stack runs it: with the asynchronous TP backward,
    or with TP communication overlap (whose collectives can only start once the GEMM that
    produces their input has run), each column-parallel GEMM's collectives sit beside its own
    backward products; otherwise where ``ops.backward_ops`` puts them. Under sequence
    parallelism a stack that keeps only the sequence shard of a column-parallel layer's input
    gathers it again in the backward (``software.sp_keeps_gathered_input`` unset), beside the
    input-gradient GEMM where the backward is asynchronous, else exposed before it."""
    bwd = backward_ops(forward)
    ov = rs.parallelism.overlap
    sp = rs.tp > 1 and rs.parallelism.sequence_parallel
    regather = sp and not on(rs.software.sp_keeps_gathered_input)
    if rs.tp > 1 and (ov.tp_backward or ov.tp_comm):
        return async_tp_backward(bwd, rs.parallelism.sequence_parallel, regather)
    return regather_backward(bwd) if regather else bwd
