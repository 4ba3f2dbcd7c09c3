"""Activation memory: what one rank keeps for backward per layer and micro-batch, after
Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (2022), §4,
generalised to grouped-query attention, SwiGLU, fused attention and fp8 saved inputs; and what
full, selective and op-level selective recomputation keep of it. The stage totals are
:mod:`.memory`'s."""

from __future__ import annotations

from ..config.scenario import ResolvedScenario
from ..config.software import on
from .elementwise import fp32_softmax
from .model import alternate_recomputed, layer_matmuls
from .ops import act_bytes, kv_per_rank, matmul_out_widths


def activation_bytes_per_layer(rs: ResolvedScenario) -> float:
    """Bytes one rank keeps for backward per layer per micro-batch, with no recomputation."""
    m = rs.model
    t, cp = rs.tp, rs.cp
    sp = rs.parallelism.sequence_parallel
    b = rs.training.micro_batch
    s = rs.training.seq_len // cp
    h, f = m.hidden, m.ffn
    sbh = s * b * h
    a = act_bytes(rs)  # 2 bytes per element in Korthikanti et al.'s 16-bit accounting
    mm = matmul_input_bytes(rs)  # what a linear layer keeps of its input for the weight gradient
    # Tensors outside the TP regions: norm inputs (a bytes each) and the matmul inputs they feed
    # (mm bytes each), plus dropout masks (1 byte). SP shards them over TP (the matmul inputs
    # only where the stack keeps the shard and gathers it again in the backward: Megatron's
    # layers; DTensor keeps the gathered input); otherwise every TP rank holds them.
    outside = float(2 * a * sbh + (2 * sbh if m.dropout else 0))
    kept_inputs = float(2 * mm * sbh)
    if sp:
        outside /= t
        if not on(rs.software.sp_keeps_gathered_input):
            kept_inputs /= t
    outside += kept_inputs
    # Inside the attention region: Q (h) and the output-projection input (h), split over TP;
    # K and V at this rank's width (a whole head each where TP exceeds the KV heads). A fused
    # attention kernel keeps its output for its own backward; where the projection keeps an fp8
    # copy of it, that copy comes on top.
    if mm == a:
        proj_in = a
    else:
        proj_in = a + mm if rs.flash_attention else mm
    inside = s * b * h * (a + proj_in)
    kv_held = a * s * b * 2 * kv_per_rank(rs)
    if rs.flash_attention:
        inside += 4 * b * m.heads * s  # fp32 log-sum-exp per head and query
    else:
        scores = b * m.heads * s * rs.training.seq_len
        # the softmax output (what the product with V and the softmax's backward read), and
        # with dropout its output and its 1-byte mask
        inside += scores * (a + (a + 1 if m.dropout else 0))
        if fp32_softmax(rs) is not None:
            # an unfused softmax in fp32 keeps its fp32 output for its own backward beside the
            # 16-bit cast the product with V reads (elementwise.softmax_ops)
            inside += scores * 4
    # Inside the MLP region: the activation's inputs (a) and the down-projection input (mm).
    inside += s * b * f * (a * (2 if m.mlp == "swiglu" else 1) + mm)
    return outside + inside / t + kv_held


def matmul_input_bytes(rs: ResolvedScenario) -> int:
    """Bytes per element a transformer block's linear layer keeps of its input for the weight
    gradient: the training dtype's, or 1 where fp8 training keeps the fp8 copy it cast for the
    forward GEMM (the stack's ``fp8_saved_inputs``)."""
    flag = rs.software.fp8_saved_inputs
    if rs.training.precision == "fp8" and flag is not None and flag.value:
        return 1
    return act_bytes(rs)


def _full_recompute_bytes_per_layer(rs: ResolvedScenario) -> float:
    """Full recomputation keeps only each layer's input (sharded over TP with SP)."""
    s = rs.training.seq_len // rs.cp
    x = act_bytes(rs) * s * rs.training.micro_batch * rs.model.hidden
    return x / rs.tp if rs.parallelism.sequence_parallel else x


def _alternate_saved_per_layer(rs: ResolvedScenario) -> float:
    """Bytes a layer keeps per micro-batch under torchtitan's op-level policy (see
    ``recompute.recomputed_ops``): its input, the outputs of the matmuls it does not run again, of
    the fused attention kernel (with its fp32 log-sum-exp) and of SP's reduce-scatters; the
    elementwise results are recomputed. Column-parallel outputs are split over TP; a
    row-parallel one (wo, w2) is a whole partial sum until its reduction."""
    m = rs.model
    t = rs.tp
    b = rs.training.micro_batch
    s = rs.training.seq_len // rs.cp
    h = m.hidden
    a = act_bytes(rs)
    sp = rs.parallelism.sequence_parallel and t > 1
    width = matmul_out_widths(rs)
    again = alternate_recomputed(m)
    kept = sum(width[n] for n, _w in layer_matmuls(m) if n not in again)
    block_in = h / t if sp else h
    per_token = a * (block_in + kept + (2 * h / t if sp else 0.0))
    if rs.flash_attention:
        per_token += a * h / t + 4 * m.heads / t
    return per_token * s * b


def _selective_saving_per_layer(rs: ResolvedScenario) -> float:
    """Selective recomputation drops the attention core's s×s tensors (or, with fused attention,
    which already drops them, nothing further)."""
    if rs.flash_attention:
        return 0.0
    m = rs.model
    s = rs.training.seq_len // rs.cp
    scores = rs.training.micro_batch * m.heads * s * rs.training.seq_len
    a = act_bytes(rs)  # the softmax (and dropout) outputs at the activations' width
    return scores * (a + (a + 1 if m.dropout else 0)) / rs.tp
