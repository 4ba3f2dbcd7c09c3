"""The memory-bound operations around a layer's GEMMs, as a software stack runs them: norms,
the activation, residual adds and dropout, unfused attention's softmax chain, flash attention's
repacking, and the casts of autocast over fp32 weights and of fp8 training. Each counts the
bytes its kernels read and write, one pass per kernel the stack launches."""

from __future__ import annotations

from ..config.scenario import ResolvedScenario
from ..config.software import off, on
from .model import layer_matmul_params
from .op import Op, act_bytes

# fp8 training casts each fp8 GEMM's 16-bit input to fp8 with its transpose (kept for the
# weight gradient) in one pass, and the incoming gradient likewise in the backward pass:
# TransformerEngine's Linear runs fp8_cast_transpose_fused on the input in forward and on
# grad_output in backward (transformer_engine/pytorch/module/linear.py,
# base.grad_output_preprocess): read 2 bytes, write 1 + 1 per element.
FP8_CAST_BYTES = 4


def fp8_casts(rs: ResolvedScenario, gemms: list[Op]) -> list[Op]:
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


def fp32_softmax(rs: ResolvedScenario) -> str | None:
    """How the stack's unfused softmax chain works in fp32 (``fusion.softmax_upcast``), or None:
    the chain is fused, in 16 bits, or its scores are already fp32 (nothing to cast: Megatron's
    input_in_float16 is false)."""
    fusion = rs.software.fusion
    if fusion.scale_mask_softmax.value or fusion.softmax_upcast is None or act_bytes(rs) >= 4:
        return None
    return fusion.softmax_upcast.value


def softmax_ops(rs: ResolvedScenario, scores: float) -> list[Op]:
    """Unfused attention between the two batched GEMMs, over the s×s score tensor (``scores``
    bytes): scale, causal mask and softmax, one kernel each (read and write) unless the stack
    fuses them; then dropout (read, write, and a one-byte mask per element) if the model has
    it. Where the stack's unfused chain works in fp32 (``fusion.softmax_upcast``) and the
    scores are 16-bit, its passes move 4-byte elements and casts come on either side (each
    backward as its own kernels, counted as they run)."""
    ops: list[Op] = []
    a = act_bytes(rs)
    up = fp32_softmax(rs)
    if rs.software.fusion.scale_mask_softmax.value:
        ops.append(Op("scale_mask_softmax", "memory", bytes=2 * scores))
    elif up is None:
        ops += [
            Op("scale", "memory", bytes=2 * scores),
            Op("mask", "memory", bytes=2 * scores),
            Op("softmax", "memory", bytes=2 * scores),
        ]
    else:
        n = scores / a  # elements
        cast = n * (a + 4)  # read one width, write the other
        if up in ("scores_scaled", "scores"):
            # Megatron's FusedScaleMaskSoftmax.forward_torch_softmax with softmax_in_fp32:
            # input.float(), input * scale (only with query-key layer scaling: Megatron-Core
            # folds 1/sqrt(d) into the score GEMM), masked_fill_ (reads the one-byte mask),
            # softmax, back to 16 bits; the backward runs each op's gradient kernel (softmax's
            # reads its output and the gradient)
            ops.append(Op("softmax_upcast", "memory", bytes=cast, backward_bytes=cast))
            if up == "scores_scaled":
                ops.append(Op("scale", "memory", bytes=8 * n, backward_bytes=8 * n))
            ops += [
                Op("mask", "memory", bytes=9 * n, backward_bytes=9 * n),
                Op("softmax", "memory", bytes=8 * n, backward_bytes=12 * n),
                Op("softmax_downcast", "memory", bytes=cast, backward_bytes=cast),
            ]
        else:
            # Hugging Face eager attention: scale and an additive mask in 16 bits (the add's
            # backward passes the gradient through: no kernel), softmax(..., dtype=float32),
            # then .to() the 16-bit dtype. ATen runs an fp16 input's softmax to fp32 as one
            # kernel (read 2, write 4; its backward reads the fp32 gradient and output and
            # writes 2) but casts a bf16 input to fp32 first, then a plain fp32 softmax.
            ops += [
                Op("scale", "memory", bytes=2 * scores, backward_bytes=2 * scores),
                Op("mask", "memory", bytes=3 * scores, backward_bytes=0.0),
            ]
            if rs.training.precision == "fp16":
                ops.append(Op("softmax", "memory", bytes=cast, backward_bytes=n * (8 + a)))
            else:
                ops += [
                    Op("softmax_upcast", "memory", bytes=cast, backward_bytes=cast),
                    Op("softmax", "memory", bytes=8 * n, backward_bytes=12 * n),
                ]
            ops.append(Op("softmax_downcast", "memory", bytes=cast, backward_bytes=cast))
    if rs.model.dropout:
        ops.append(Op("attn_dropout", "memory", bytes=2.5 * scores))
    return ops


def _bias_add(rs: ResolvedScenario, fused: bool, name: str, elements: float) -> list[Op]:
    """A linear layer's bias added by a kernel of its own: where the stack's linear layers leave
    the bias to the next elementwise kernel (``fusion.skip_bias_add``: Megatron) and that kernel
    is not the fused one. Read and write the tensor; the backward reads the gradient once for
    the bias's gradient (the input's passes through). The fused kernels' and the GEMM's own
    bias-gradient reductions are not counted, here or there."""
    if fused or not rs.model.linear_bias or not on(rs.software.fusion.skip_bias_add):
        return []
    a = act_bytes(rs)
    return [Op(name, "memory", bytes=2 * a * elements, backward_bytes=a * elements)]


def _autocast_over_fp32(rs: ResolvedScenario) -> bool:
    """Mixed precision run by autocast over fp32 working weights (FSDP gathering fp32
    parameters, as Composer's 'DEFAULT' does)."""
    return rs.training.param_gather_dtype == "fp32" and rs.training.precision != "fp32"


def weight_casts(rs: ResolvedScenario) -> list[Op]:
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


def norm_ops(rs: ResolvedScenario, name: str, elements: float) -> list[Op]:
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


def activation_ops(rs: ResolvedScenario, elements: float) -> list[Op]:
    """The MLP's activation over ``elements`` of the hidden width: GELU reads and writes it;
    SwiGLU reads the gate and the up projection and writes their product, in one kernel unless
    the stack runs SiLU and the multiply apart (eager ``F.silu(gate) * up``)."""
    a = act_bytes(rs)
    if rs.model.mlp != "swiglu":
        bias = _bias_add(rs, rs.software.fusion.bias_gelu.value, "mlp_bias_add", elements)
        return [*bias, Op("activation", "memory", bytes=2 * elements * a)]
    fused = not off(rs.software.fusion.swiglu)
    # the gate's and the up projection's biases (Megatron's bias_swiglu fusion adds them)
    bias = _bias_add(rs, fused, "mlp_bias_add", 2 * elements)
    if fused:
        return [Op("activation", "memory", bytes=3 * elements * a)]
    return [
        *bias,
        Op("activation_silu", "memory", bytes=2 * elements * a),
        Op("activation_mul", "memory", bytes=3 * elements * a),
    ]


def residual_ops(rs: ResolvedScenario, elements: float) -> list[Op]:
    """Dropout of a block's output and the residual add over ``elements``: one kernel when the
    stack fuses bias, dropout and add (read the stream and the branch, write the stream, plus
    the dropout mask), else a dropout kernel and an add kernel."""
    a, r = act_bytes(rs), residual_bytes(rs)
    add = elements * (2 * r + a)
    fused = rs.software.fusion.bias_dropout_add.value
    bias = _bias_add(rs, fused, "bias_add", elements)
    if not rs.model.dropout:
        return [*bias, Op("residual_add", "memory", bytes=add)]
    mask = elements  # one byte per element
    if fused:
        return [Op("bias_dropout_add", "memory", bytes=add + mask)]
    return [
        *bias,
        Op("dropout", "memory", bytes=2 * a * elements + mask),
        Op("residual_add", "memory", bytes=add),
    ]


def repack_ops(rs: ResolvedScenario, q: float, kv: float) -> list[Op]:
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
