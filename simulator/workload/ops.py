"""Per-layer operation list of one micro-batch on one rank, sharded by TP, SP and CP.

Each :class:`Op` carries the FLOPs and memory bytes the engine times, or, for a collective, the
message size and the group it runs in. The list is the forward pass; the engine derives the
backward pass (GEMMs and attention twice the FLOPs, memory-bound ops twice the bytes, and the
mirrored TP/CP collectives).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from ..config.scenario import ResolvedScenario
from ..config.software import on
from .elementwise import (
    FP8_CAST_BYTES,
    activation_ops,
    fp8_casts,
    norm_ops,
    repack_ops,
    residual_bytes,
    residual_ops,
    softmax_ops,
    weight_casts,
)
from .model import attention_core_flops_per_token
from .op import CollKind, Op, OpKind, act_bytes

# re-exported: the operation type and the figures other modules read with the lists
__all__ = [
    "FP8_CAST_BYTES",
    "CollKind",
    "Op",
    "OpKind",
    "act_bytes",
    "backward_op",
    "backward_ops",
    "embedding_ops",
    "head_ops",
    "kv_per_rank",
    "layer_ops",
    "matmul_out_widths",
    "pp_recv_ops",
    "residual_bytes",
    "tokens_per_rank",
]


def kv_per_rank(rs: ResolvedScenario) -> float:
    """Width of the keys (or the values) one TP rank holds: its share of the KV heads, or,
    with more TP ranks than KV heads, one whole head (Megatron replicates K and V then)."""
    m = rs.model
    return m.kv_dim / rs.tp if rs.tp <= m.n_kv_heads else float(m.head_dim)


def matmul_out_widths(rs: ResolvedScenario) -> dict[str, float]:
    """Width of each layer matmul's output on one TP rank (names as ``model.layer_matmuls``):
    the column-parallel ones split over TP (K and V at this rank's width), the row-parallel
    ones (wo, w2) a whole partial sum until their reduction."""
    m, t, kvr = rs.model, rs.tp, kv_per_rank(rs)
    return {
        "wq": m.hidden / t,
        "wk": kvr,
        "wv": kvr,
        "wo": m.hidden,
        "w1": m.ffn / t,
        "w3": m.ffn / t,
        "w2": m.hidden,
    }


def tokens_per_rank(rs: ResolvedScenario) -> int:
    """Tokens of one micro-batch held by one rank before TP sharding (CP splits the sequence)."""
    return rs.training.micro_batch * rs.training.seq_len // rs.cp


# The all-gathers that feed a transformer block's fp8 linear layers (QKV and the MLP's first);
# the output layer stays in 16 bits under fp8 recipes.
FP8_GATHERED = ("tp_attn_in", "tp_mlp_in")


def _fp8_gather(rs: ResolvedScenario) -> bool:
    """Whether the stack all-gathers a linear layer's fp8 input (``fp8_tp_all_gather``)."""
    return rs.training.precision == "fp8" and on(rs.software.fp8_tp_all_gather)


def _tp_comm(rs: ResolvedScenario, name: str, nbytes: float, closing: bool) -> list[Op]:
    """The collective that ends (g) or starts (f) a TP region in the forward pass."""
    if rs.tp == 1:
        return []
    if rs.parallelism.sequence_parallel:
        if not closing and name in FP8_GATHERED and _fp8_gather(rs):
            # the fp8 cast of the input goes round (a byte per 16-bit element); the input
            # gradient comes back in 16 bits
            return [
                Op(name, "collective", collective="all_gather", group="tp",
                   msg_bytes=nbytes / 2, backward_bytes=nbytes)
            ]  # fmt: skip
        kind: CollKind = "reduce_scatter" if closing else "all_gather"
        return [Op(name, "collective", collective=kind, group="tp", msg_bytes=nbytes)]
    if closing:
        return [Op(name, "collective", collective="all_reduce", group="tp", msg_bytes=nbytes)]
    return []


def _attn_out_comm(rs: ResolvedScenario, nbytes: float) -> list[Op]:
    """The TP collective after the attention block. With a parallel residual (GPT-NeoX
    ``gpt_j_residual``, megatron/model/transformer.py ParallelTransformerLayer: the attention's
    and the MLP's row-parallel outputs are added and all-reduced once) the forward has no
    reduction of its own here; its branch's input gradient is still all-reduced in the backward
    (each branch opens its own TP region from its own norm), so without sequence parallelism
    that all-reduce stays as a backward-only one. With sequence parallelism the forward's
    reduce-scatter (and its backward all-gather) merges with the MLP's."""
    ops = _tp_comm(rs, "tp_attn_out", nbytes, closing=True)
    if not rs.model.parallel_residual:
        return ops
    if rs.parallelism.sequence_parallel:
        return []
    return [replace(op, only="backward") for op in ops]


def _gemm(name: str, b: int, m: int, n: int, k: int, wide: bool = False, weight: bool = True) -> Op:
    return Op(name, "gemm", flops=2.0 * b * m * n * k, dims=(b, m, n, k), wide=wide, weight=weight)


def layer_ops(rs: ResolvedScenario) -> list[Op]:
    """Forward operations of one transformer layer for one micro-batch on one rank."""
    m = rs.model
    t = rs.tp
    sp = rs.parallelism.sequence_parallel
    T = tokens_per_rank(rs)
    s = rs.training.seq_len
    h, f = m.hidden, m.ffn
    a = act_bytes(rs)
    act = T * h * a  # one hidden-state tensor of the micro-batch
    norm_tokens = T // t if sp else T  # SP shards the norm/dropout regions over the sequence
    n_in = 2 if m.mlp == "swiglu" else 1
    ops: list[Op] = weight_casts(rs)
    ops += [
        *norm_ops(rs, "attn_norm", norm_tokens * h),
        *_tp_comm(rs, "tp_attn_in", act, closing=False),
        _gemm("qkv_proj", 1, T, int(h // t + 2 * kv_per_rank(rs)), h),
    ]
    cp_ring: list[Op] = []
    if rs.cp > 1:
        # Ring attention (Liu et al. 2023; TransformerEngine's and Megatron-Core's default
        # 'p2p' context parallelism): K and V chunks pass round the CP ring while each rank
        # computes attention over the chunk it holds, so the exchange hides behind the kernel
        # but for its first chunk's share. The backward passes K and V round again (each rank
        # kept only its own) and the K and V gradients the other way: an all-gather's and a
        # reduce-scatter's worth of traffic beside the attention backward.
        kv_bytes = 2 * T * kv_per_rank(rs) * a * rs.cp

        def ring(name: str, coll: CollKind, only: Literal["forward", "backward"]) -> Op:
            return Op(name, "collective", collective=coll, group="cp", msg_bytes=kv_bytes,
                      overlapped=True, cover=(rs.cp - 1) / rs.cp, only=only)  # fmt: skip

        cp_ring = [ring("cp_kv_gather", "all_gather", "forward")]
        # (listed before the kernel, backward-only: the backward runs them after its own, as
        # ``backward_ops`` reverses the list; each mirrors to the other collective)
        ops += [
            ring("cp_dkv_reduce", "all_gather", "backward"),
            ring("cp_kv_regather", "reduce_scatter", "backward"),
        ]
    core = attention_core_flops_per_token(m, s) * T / t
    qkvo_bytes = T * (2 * h / t + 2 * kv_per_rank(rs)) * a
    if rs.flash_attention:
        # under context parallelism the kernel runs once per chunk of s/cp keys (ring)
        kv = s // rs.cp
        ops.append(Op("attention", "attention", flops=core, bytes=qkvo_bytes, kv_len=kv))
        ops += repack_ops(rs, T * h * a / t, T * kv_per_rank(rs) * a)
    else:
        heads = m.heads // t
        scores = rs.training.micro_batch * heads * (s // rs.cp) * s * a
        bh = rs.training.micro_batch * heads
        sq, hd = s // rs.cp, m.head_dim
        ops += [_gemm("attn_scores", bh, sq, s, hd, wide=True, weight=False)]
        ops += softmax_ops(rs, scores)
        ops += [_gemm("attn_values", bh, sq, hd, s, wide=True, weight=False)]
    ops += cp_ring
    ops += [
        _gemm("out_proj", 1, T, h, h // t),
        *_attn_out_comm(rs, act),
        *residual_ops(rs, norm_tokens * h),
        *norm_ops(rs, "mlp_norm", norm_tokens * h),
        *_tp_comm(rs, "tp_mlp_in", act, closing=False),
        _gemm("mlp_up", 1, T, n_in * f // t, h),
        *activation_ops(rs, T * f / t),
        _gemm("mlp_down", 1, T, h, f // t),
        *_tp_comm(rs, "tp_mlp_out", act, closing=True),
        *residual_ops(rs, norm_tokens * h),
    ]
    return fp8_casts(rs, ops) + ops


def embedding_ops(rs: ResolvedScenario) -> list[Op]:
    """First pipeline stage: vocabulary-parallel embedding lookup (and its TP reduction)."""
    T = tokens_per_rank(rs)
    h = rs.model.hidden
    a = act_bytes(rs)
    ops = [Op("embedding", "memory", bytes=T * h * (a + residual_bytes(rs)))]
    if rs.tp > 1 and not rs.parallelism.sequence_parallel:
        # the vocabulary shards' partial lookups summed; its backward sends nothing (each rank
        # holds the whole output gradient): Megatron's reduce_from_tensor_model_parallel_region
        ops.append(
            Op("tp_embedding", "collective", collective="all_reduce", group="tp",
               msg_bytes=T * h * a, only="forward")
        )  # fmt: skip
        return ops
    ops += _tp_comm(rs, "tp_embedding", T * h * a, closing=True)
    return ops


def pp_recv_ops(rs: ResolvedScenario) -> list[Op]:
    """A pipeline stage receiving its input without sequence parallelism: each TP rank got a
    1/t slice of the activation (or its gradient) and all-gathers the whole over the fast
    fabric before the pass can start (Megatron's scatter/gather, Narayanan et al. SC21 §4.1;
    megatron/p2p_communication.py gather_split_1d_tensor). With SP the tensor stays split."""
    if rs.pp <= 1 or rs.tp <= 1 or rs.parallelism.sequence_parallel:
        return []
    nbytes = tokens_per_rank(rs) * rs.model.hidden * act_bytes(rs)
    return [
        Op("pp_recv_gather", "collective", collective="all_gather", group="tp", msg_bytes=nbytes)
    ]


def head_ops(rs: ResolvedScenario) -> list[Op]:
    """Last pipeline stage: final norm, vocabulary-parallel logits and cross-entropy."""
    m = rs.model
    T = tokens_per_rank(rs)
    t = rs.tp
    a = act_bytes(rs)
    norm_tokens = T // t if rs.parallelism.sequence_parallel else T
    # Without sequence parallelism the output layer's input gradient is summed over the
    # vocabulary shards in the backward (Megatron's copy_to_tensor_model_parallel_region).
    into = (
        [Op("tp_head_in", "collective", collective="all_reduce", group="tp",
            msg_bytes=T * m.hidden * a, only="backward")]
        if t > 1 and not rs.parallelism.sequence_parallel
        else _tp_comm(rs, "tp_head_in", T * m.hidden * a, closing=False)
    )  # fmt: skip
    logits = T * m.vocab / t
    # fp32 softmax over the vocabulary shard: read logits, write probabilities, read back
    # (two tensors, three passes), unless the stack says what its loss moves
    traffic = rs.software.loss_traffic
    fwd, bwd = traffic.value if traffic is not None else (a + 4 + 4, None)
    ops = [
        *norm_ops(rs, "final_norm", norm_tokens * m.hidden),
        *into,
        _gemm("logits", 1, T, m.vocab // t, m.hidden, wide=True),
        Op(
            "cross_entropy",
            "memory",
            bytes=logits * fwd,
            backward_bytes=None if bwd is None else logits * bwd,
            footprint=logits * (a + 4),
        ),
    ]
    if t > 1:
        ops.append(
            Op(
                "tp_loss_stats",
                "collective",
                collective="all_reduce",
                group="tp",
                msg_bytes=T * 4 * 2,
                # the backward computes the gradient from the saved softmax, sending nothing
                # (Megatron's _VocabParallelCrossEntropy.backward)
                only="forward",
            )
        )
    return ops


def backward_op(op: Op) -> Op:
    """The backward counterpart of a forward operation."""
    if op.kind == "collective":
        mirror: dict[str, CollKind] = {
            "all_gather": "reduce_scatter",
            "reduce_scatter": "all_gather",
        }
        coll = mirror.get(op.collective or "", op.collective)
        # (a backward-only one runs here: the copy's ``only`` is "both"; a CP ring's keeps
        # its overlap with the attention kernel)
        ring = op.overlapped and op.group == "cp"
        size = op.msg_bytes if op.backward_bytes is None else op.backward_bytes
        other = None if op.backward_bytes is None else op.msg_bytes
        return Op(op.name + "_bwd", "collective", collective=coll, group=op.group,
                  msg_bytes=size, backward_bytes=other, overlapped=ring,
                  cover=op.cover)  # fmt: skip
    return Op(
        op.name + "_bwd",
        op.kind,
        flops=2 * op.flops,
        bytes=2 * op.bytes if op.backward_bytes is None else op.backward_bytes,
        dims=op.dims,
        backward=True,
        wide=op.wide,
        weight=op.weight,
        kv_len=op.kv_len,
        footprint=op.footprint,
    )


def backward_ops(forward: list[Op]) -> list[Op]:
    """Backward pass in reverse order. A TP all-reduce closing a region in the forward pass
    becomes an all-reduce at the region's start in the backward pass; the count is the same.
    A collective that runs in the forward pass only, and an elementwise op whose backward runs
    no kernel (``backward_bytes`` 0: an add passes its gradient through), are left out."""
    return [
        backward_op(op)
        for op in reversed(forward)
        if op.only != "forward" and not (op.kind == "memory" and op.backward_bytes == 0.0)
    ]
