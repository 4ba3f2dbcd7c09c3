"""Activation recomputation: which forward ops run again before a layer's backward pass
under each recomputation mode and software stack's policy (Megatron's attention core, or
torchtitan's op-level policy of every second matmul), and which forward collectives run
again with them."""

from __future__ import annotations

from dataclasses import replace

from ..config.scenario import ResolvedScenario
from .model import alternate_recomputed, layer_matmuls
from .ops import Op, layer_ops, matmul_out_widths


def attention_core(forward: list[Op]) -> list[Op]:
    """The ops selective recomputation runs again in the backward pass (Korthikanti et al.
    2022, Sec. 5: the QK^T product, softmax, softmax dropout and attention over V): the fused
    attention kernel (with the packing around it, where the stack packs), or everything from
    the score GEMM to the value GEMM."""
    fused = [o for o in forward if o.kind == "attention" or o.name == "attention_repack"]
    if fused:
        return fused
    names = [o.name for o in forward]
    if "attn_scores" not in names:
        return []
    return forward[names.index("attn_scores") : names.index("attn_values") + 1]


# Forward ops that save no tensor for their backward (a collective's output and a sum's inputs
# are not kept), so an early-stopping recomputation need not reach them.
_SAVES_NOTHING = ("residual_add",)


def full_recomputed_ops(rs: ResolvedScenario, forward: list[Op]) -> list[Op]:
    """The forward ops full recomputation runs again before a layer's backward: all of them,
    or, under PyTorch's early-stopping non-reentrant checkpoint (the stack's
    ``recompute_early_stop``), those up to the last one that saves a tensor. Recomputation
    stops when the last saved tensor is packed again. ``nn.Linear`` packs its inputs before its
    kernel runs, so the layer's last matmul and the collectives and residual add after it are
    not run again (traced on torch 2.13: the MLP's second ``addmm`` and the final ``add`` are
    absent). An fp8 linear layer is an ``autograd.Function`` (TransformerEngine's ``_Linear``,
    torchao's float8 matmul), which packs what it saves only once its forward has returned, so
    its matmul runs again; so does one whose output a dropout masks (the mask is saved)."""
    if not rs.recompute_early_stop:
        return forward
    end = len(forward)
    while end > 0 and (
        forward[end - 1].kind == "collective" or forward[end - 1].name in _SAVES_NOTHING
    ):
        end -= 1
    if end > 0 and forward[end - 1].kind == "gemm" and rs.training.precision != "fp8":
        end -= 1
    return forward[:end]


def skips_last_matmul(rs: ResolvedScenario) -> bool:
    """Whether recomputation leaves the layer's last matmul out (``full_recomputed_ops``; under
    torchtitan's op-level policy only where that matmul is one it runs again): what the
    hardware FLOPs count must agree with."""
    rc = rs.parallelism.recompute
    alternate = rc == "selective" and rs.selective_policy == "alternate_matmuls"
    if rc != "full" and not alternate:
        return False
    if not rs.recompute_early_stop:
        return False
    fwd = layer_ops(rs)
    if not any(o.kind == "gemm" for o in fwd[len(full_recomputed_ops(rs, fwd)) :]):
        return False
    return not alternate or layer_matmuls(rs.model)[-1][0] in alternate_recomputed(rs.model)


def recomputed_ops(rs: ResolvedScenario, forward: list[Op]) -> list[Op]:
    """The forward ops selective recomputation runs again before a layer's backward, by the
    stack's policy: the attention core, or (``alternate_matmuls``, torchtitan's op-level
    policy, which saves the outputs of every ``mm``, of the SDPA kernel and of TP's
    reduce-scatters, except every second ``mm``'s) every second matmul, every elementwise op,
    the TP collectives whose outputs are not kept, and, without a fused attention kernel, the
    batched attention products. The recomputed part of a fused GEMM runs as a GEMM of that
    part's width on this rank."""
    if rs.selective_policy != "alternate_matmuls":
        return attention_core(forward)
    # The op-level policy runs under the same non-reentrant checkpoint, so an early-stopping
    # one stops at the same place as full recomputation (traced on torch 2.13 with torchtitan's
    # policy: neither the final residual add nor a last matmul the policy would run again is).
    forward = full_recomputed_ops(rs, forward)
    again = alternate_recomputed(rs.model)
    width = matmul_out_widths(rs)
    present = {n for n, _w in layer_matmuls(rs.model)}
    parts = {
        "qkv_proj": ("wq", "wk", "wv"),
        "out_proj": ("wo",),
        "mlp_up": ("w1", "w3"),
        "mlp_down": ("w2",),
    }
    core = {o.name for o in attention_core(forward)} if not rs.flash_attention else set()
    out: list[Op] = []
    for o in forward:
        if o.kind == "memory" or o.name in core:
            out.append(o)
        elif o.kind == "collective":
            if recomputes_collective(rs, o):
                out.append(o)
        elif o.kind == "gemm" and o.name in parts and o.dims is not None:
            names = [n for n in parts[o.name] if n in present]
            share = sum(width[n] for n in names if n in again) / sum(width[n] for n in names)
            if share > 0:
                b, m_, n, k = o.dims
                part = max(1, round(n * share))
                out.append(replace(o, flops=o.flops * part / n, dims=(b, m_, part, k)))
    return out


def recomputes_collective(rs: ResolvedScenario, op: Op) -> bool:
    """Whether recomputation runs a layer's forward collective ``op`` again: every TP and CP
    one under full recomputation; under torchtitan's op-level policy the TP ones whose output
    it does not keep (all but the reduce-scatters: SP's all-gathers, the all-reduces without
    SP). A backward-only collective is never a forward one to run again."""
    if op.only == "backward":
        return False
    rc = rs.parallelism.recompute
    if rc == "full":
        if rs.recompute_early_stop:
            again = full_recomputed_ops(rs, layer_ops(rs))
            return any(o.name == op.name for o in again if o.kind == "collective")
        return op.name.startswith(("tp_", "cp_"))
    if rc == "selective" and rs.selective_policy == "alternate_matmuls":
        if op.group != "tp" or op.collective == "reduce_scatter":
            return False
        if rs.recompute_early_stop:
            again = full_recomputed_ops(rs, layer_ops(rs))
            return any(o.name == op.name for o in again if o.kind == "collective")
        return True
    return False
