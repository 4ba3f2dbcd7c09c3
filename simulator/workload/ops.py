"""Per-layer operation list of one micro-batch on one rank, sharded by TP, SP and CP.

Each :class:`Op` carries the FLOPs and memory bytes the engine times, or, for a collective, the
message size and the group it runs in. The list is the forward pass; the engine derives the
backward pass (GEMMs and attention twice the FLOPs, memory-bound ops twice the bytes, and the
mirrored TP/CP collectives).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..config.scenario import ResolvedScenario
from ..config.software import off, on
from .model import attention_core_flops_per_token, layer_matmul_params

OpKind = Literal["gemm", "attention", "memory", "collective"]
CollKind = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "p2p"]


def act_bytes(rs: ResolvedScenario) -> int:
    """Bytes per activation element: 16-bit under bf16, fp16 and fp8 (fp8 GEMM inputs are
    cast), 32-bit under fp32."""
    return 4 if rs.training.precision == "fp32" else 2


@dataclass(frozen=True)
class Op:
    name: str
    kind: OpKind
    flops: float = 0.0
    bytes: float = 0.0
    collective: CollKind | None = None
    group: Literal["tp", "cp", "dp", "pp"] | None = None
    msg_bytes: float = 0.0  # collective: the full buffer S of nccl-tests' definition
    # GEMM: (batch, m, n, k) of the forward product out[m,n] = in[m,k] @ w[k,n]; the backward
    # pass runs the two products dIn = dOut @ w^T and dW = in^T @ dOut.
    dims: tuple[int, int, int, int] | None = None
    backward: bool = False
    backward_bytes: float | None = None  # memory traffic of its backward where not 2x forward
    # A GEMM that fp8 training leaves at the 16-bit tensor rate (attention scores and values,
    # the logits): fp8 recipes cast only the transformer blocks' linear layers.
    wide: bool = False
    # Attention: the keys each query attends over, the length the kernel's efficiency follows.
    kv_len: int = 0
    # Memory-bound: the bytes of the distinct tensors it touches, where it passes over them
    # more than once (0: the bytes it moves); what decides whether it runs in a cache.
    footprint: float = 0.0
    # GEMM: a linear layer's product, whose [k, n] operand is a weight (its gradient in dW):
    # the operand each pass streams afresh (see efficiency.gemm_weight_bandwidth).
    weight: bool = False
    # Backward GEMM: both products (dIn and dW), or only one of them where a stack runs a
    # collective between the two (see workload.tp_backward).
    part: Literal["both", "dgrad", "wgrad"] = "both"
    # Collective: the stack launches it asynchronously beside the GEMM before it.
    overlapped: bool = False
    # Collective: the pass it runs in, where it has no mirror in the other (an all-reduce
    # whose conjugate is the identity: the embedding's forward one, the output layer's backward
    # one without sequence parallelism).
    only: Literal["both", "forward", "backward"] = "both"


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


def _tp_comm(rs: ResolvedScenario, name: str, nbytes: float, closing: bool) -> list[Op]:
    """The collective that ends (g) or starts (f) a TP region in the forward pass."""
    if rs.tp == 1:
        return []
    if rs.parallelism.sequence_parallel:
        kind: CollKind = "reduce_scatter" if closing else "all_gather"
        return [Op(name, "collective", collective=kind, group="tp", msg_bytes=nbytes)]
    if closing:
        return [Op(name, "collective", collective="all_reduce", group="tp", msg_bytes=nbytes)]
    return []


def _gemm(name: str, b: int, m: int, n: int, k: int, wide: bool = False, weight: bool = True) -> Op:
    return Op(name, "gemm", flops=2.0 * b * m * n * k, dims=(b, m, n, k), wide=wide, weight=weight)


# fp8 training casts each fp8 GEMM's 16-bit input to fp8 with its transpose (kept for the
# weight gradient) in one pass, and the incoming gradient likewise in the backward pass:
# TransformerEngine's Linear runs fp8_cast_transpose_fused on the input in forward and on
# grad_output in backward (transformer_engine/pytorch/module/linear.py,
# base.grad_output_preprocess): read 2 bytes, write 1 + 1 per element.
FP8_CAST_BYTES = 4


def _fp8_casts(rs: ResolvedScenario, gemms: list[Op]) -> list[Op]:
    """One memory-bound pass over the inputs of the layer's fp8 GEMMs (forward) and over their
    output gradients (backward); nothing outside fp8 training."""
    if rs.training.precision != "fp8":
        return []
    fp8 = [o.dims for o in gemms if o.kind == "gemm" and not o.wide and o.dims is not None]
    inputs = sum(b * m * k for b, m, _, k in fp8)
    outputs = sum(b * m * n for b, m, n, _ in fp8)
    return [
        Op(
            "fp8_casts",
            "memory",
            bytes=FP8_CAST_BYTES * inputs,
            backward_bytes=FP8_CAST_BYTES * outputs,
        )
    ]


def _softmax_ops(rs: ResolvedScenario, scores: float) -> list[Op]:
    """Unfused attention between the two batched GEMMs, over the s×s score tensor (``scores``
    bytes): scale, causal mask and softmax, one kernel each (read and write) unless the stack
    fuses them; then dropout (read, write, and a one-byte mask per element) if the model has
    it."""
    ops: list[Op] = []
    if rs.software.fusion.scale_mask_softmax.value:
        ops.append(Op("scale_mask_softmax", "memory", bytes=2 * scores))
    else:
        ops += [
            Op("scale", "memory", bytes=2 * scores),
            Op("mask", "memory", bytes=2 * scores),
            Op("softmax", "memory", bytes=2 * scores),
        ]
    if rs.model.dropout:
        ops.append(Op("attn_dropout", "memory", bytes=2.5 * scores))
    return ops


def _autocast_over_fp32(rs: ResolvedScenario) -> bool:
    """Mixed precision run by autocast over fp32 working weights (FSDP gathering fp32
    parameters, as Composer's 'DEFAULT' does)."""
    return rs.training.param_gather_dtype == "fp32" and rs.training.precision != "fp32"


def _weight_casts(rs: ResolvedScenario) -> list[Op]:
    """Autocast over fp32 working weights (FSDP gathering fp32 parameters, as Composer's
    'DEFAULT' mixed precision does) casts each weight to 16 bits at every use in the forward
    pass: read 4 bytes, write 2 per weight (the backward casts the gradient back)."""
    if not _autocast_over_fp32(rs):
        return []
    weights = layer_matmul_params(rs.model) / rs.tp
    return [Op("autocast_weight_cast", "memory", bytes=6.0 * weights)]


def residual_bytes(rs: ResolvedScenario) -> int:
    """Bytes per element of the residual stream. Under autocast over fp32 working weights (FSDP
    gathering fp32 parameters, Composer's 'DEFAULT') the embedding's output is fp32 and adding
    a 16-bit branch output to it promotes the sum to fp32 (PyTorch's type promotion), so the
    stream between the blocks stays fp32; otherwise it has the activations' width."""
    return 4 if _autocast_over_fp32(rs) else act_bytes(rs)


def _norm(rs: ResolvedScenario, name: str, elements: float) -> list[Op]:
    """A norm reads the residual stream and writes its 16-bit (or fp32) output: one kernel,
    unless the model's RMSNorm runs as the eager composite (Hugging Face's LlamaRMSNorm,
    llm-foundry's and torchtitan's eager RMSNorm): an fp32 upcast, square, mean, the
    rsqrt-scaled product, the downcast and the weight, each a pass over the tensor."""
    r, a = residual_bytes(rs), act_bytes(rs)
    if rs.model.norm != "rmsnorm" or not off(rs.software.fusion.rms_norm):
        return [Op(name, "memory", bytes=elements * (r + a))]
    ops = [] if r == 4 else [Op(f"{name}_upcast", "memory", bytes=elements * (r + 4))]
    rows = elements / rs.model.hidden
    return ops + [
        Op(f"{name}_square", "memory", bytes=elements * 8),
        Op(f"{name}_mean", "memory", bytes=elements * 4),
        Op(f"{name}_rsqrt", "memory", bytes=rows * 16),  # + eps, then rsqrt, on one per row
        Op(f"{name}_scale", "memory", bytes=elements * 8),
        Op(f"{name}_downcast", "memory", bytes=elements * (4 + a)),
        Op(f"{name}_weight", "memory", bytes=elements * 2 * a),
    ]


def _activation(rs: ResolvedScenario, elements: float) -> list[Op]:
    """The MLP's activation over ``elements`` of the hidden width: GELU reads and writes it;
    SwiGLU reads the gate and the up projection and writes their product, in one kernel unless
    the stack runs SiLU and the multiply apart (eager ``F.silu(gate) * up``)."""
    a = act_bytes(rs)
    if rs.model.mlp != "swiglu":
        return [Op("activation", "memory", bytes=2 * elements * a)]
    if not off(rs.software.fusion.swiglu):
        return [Op("activation", "memory", bytes=3 * elements * a)]
    return [
        Op("activation_silu", "memory", bytes=2 * elements * a),
        Op("activation_mul", "memory", bytes=3 * elements * a),
    ]


def _residual(rs: ResolvedScenario, elements: float) -> list[Op]:
    """Dropout of a block's output and the residual add over ``elements``: one kernel when the
    stack fuses bias, dropout and add (read the stream and the branch, write the stream, plus
    the dropout mask), else a dropout kernel and an add kernel."""
    a, r = act_bytes(rs), residual_bytes(rs)
    add = elements * (2 * r + a)
    if not rs.model.dropout:
        return [Op("residual_add", "memory", bytes=add)]
    mask = elements  # one byte per element
    if rs.software.fusion.bias_dropout_add.value:
        return [Op("bias_dropout_add", "memory", bytes=add + mask)]
    return [
        Op("dropout", "memory", bytes=2 * a * elements + mask),
        Op("residual_add", "memory", bytes=add),
    ]


def _repack(rs: ResolvedScenario, q: float, kv: float) -> list[Op]:
    """A stack that runs flash attention through its variable-length entry point copies Q, K
    and V into packed tensors (a gather: read and write each) and the output back into the
    padded batch (write zeros, then copy: three passes); the backward scatters the three
    gradients into zeroed tensors (three passes each) and gathers the output's (two). ``q``
    and ``kv`` are the bytes of Q (and the output) and of K or V."""
    if not on(rs.software.attention_repack):
        return []
    fwd = 2 * (q + 2 * kv) + 3 * q
    bwd = 3 * (q + 2 * kv) + 2 * q
    return [Op("attention_repack", "memory", bytes=fwd, backward_bytes=bwd)]


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
    ops: list[Op] = _weight_casts(rs)
    ops += [
        *_norm(rs, "attn_norm", norm_tokens * h),
        *_tp_comm(rs, "tp_attn_in", act, closing=False),
        _gemm("qkv_proj", 1, T, int(h // t + 2 * kv_per_rank(rs)), h),
    ]
    if rs.cp > 1:
        kv_bytes = 2 * T * kv_per_rank(rs) * a
        ops.append(
            Op(
                "cp_kv_gather",
                "collective",
                collective="all_gather",
                group="cp",
                msg_bytes=kv_bytes * rs.cp,
            )
        )
    core = attention_core_flops_per_token(m, s) * T / t
    qkvo_bytes = T * (2 * h / t + 2 * kv_per_rank(rs)) * a
    if rs.flash_attention:
        # under context parallelism the kernel runs once per chunk of s/cp keys (ring)
        kv = s // rs.cp
        ops.append(Op("attention", "attention", flops=core, bytes=qkvo_bytes, kv_len=kv))
        ops += _repack(rs, T * h * a / t, T * kv_per_rank(rs) * a)
    else:
        heads = m.heads // t
        scores = rs.training.micro_batch * heads * (s // rs.cp) * s * a
        bh = rs.training.micro_batch * heads
        sq, hd = s // rs.cp, m.head_dim
        ops += [_gemm("attn_scores", bh, sq, s, hd, wide=True, weight=False)]
        ops += _softmax_ops(rs, scores)
        ops += [_gemm("attn_values", bh, sq, hd, s, wide=True, weight=False)]
    ops += [
        _gemm("out_proj", 1, T, h, h // t),
        *_tp_comm(rs, "tp_attn_out", act, closing=True),
        *_residual(rs, norm_tokens * h),
        *_norm(rs, "mlp_norm", norm_tokens * h),
        *_tp_comm(rs, "tp_mlp_in", act, closing=False),
        _gemm("mlp_up", 1, T, n_in * f // t, h),
        *_activation(rs, T * f / t),
        _gemm("mlp_down", 1, T, h, f // t),
        *_tp_comm(rs, "tp_mlp_out", act, closing=True),
        *_residual(rs, norm_tokens * h),
    ]
    return _fp8_casts(rs, ops) + ops


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
    ops = [
        *_norm(rs, "final_norm", norm_tokens * m.hidden),
        *into,
        _gemm("logits", 1, T, m.vocab // t, m.hidden, wide=True),
        # fp32 softmax over the vocabulary shard: read logits, write probabilities, read back
        # (two tensors, three passes).
        Op(
            "cross_entropy",
            "memory",
            bytes=T * m.vocab / t * (a + 4 + 4),
            footprint=T * m.vocab / t * (a + 4),
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
        return Op(
            op.name + "_bwd", "collective", collective=coll, group=op.group, msg_bytes=op.msg_bytes
        )  # (a backward-only one runs here: the copy's ``only`` is "both")
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
    A collective that runs in the forward pass only is left out."""
    return [backward_op(op) for op in reversed(forward) if op.only != "forward"]
