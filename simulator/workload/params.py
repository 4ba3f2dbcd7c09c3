"""Parameters one rank holds: a layer's tensor-parallel shard, the embedding and output
layer at the pipeline's ends, and a stage's total (what the memory model and the gradient
buckets count)."""

from __future__ import annotations

from ..config.scenario import ResolvedScenario
from .model import param_breakdown
from .ops import kv_per_rank


def layer_params_per_rank(rs: ResolvedScenario) -> float:
    """One layer's parameters on one TP rank: its TP shard, K and V at this rank's share of the
    KV heads (one whole head where TP exceeds them), and the replicated norm weights and
    row-parallel biases (the attention output's and the MLP's second layer's, added after the
    reduction on every rank: Megatron's RowParallelLinear keeps the whole bias)."""
    m = rs.model
    pb = param_breakdown(m, rs.training.seq_len)
    kv_w = 2 * m.kv_dim * (m.hidden + (1 if m.linear_bias else 0))
    kv_rank = kv_w * kv_per_rank(rs) / m.kv_dim
    row_bias = 2 * m.hidden if m.linear_bias else 0
    sharded = pb.attention_per_layer - kv_w + pb.mlp_per_layer - row_bias
    return sharded / rs.tp + kv_rank + row_bias + pb.norms_per_layer


def end_params(rs: ResolvedScenario) -> tuple[float, float]:
    """Parameters on one TP rank outside the layers: the embedding (with learned positions) on
    the first stage, and the output layer (the tied embedding's copy under a pipeline) with the
    final norm on the last."""
    pb = param_breakdown(rs.model, rs.training.seq_len)
    emb = pb.embedding / rs.tp + pb.positions
    head = (pb.lm_head or (pb.embedding if rs.pp > 1 else 0)) / rs.tp + pb.final_norm
    return emb, head


def stage_params(rs: ResolvedScenario, stage: int) -> float:
    """Parameters held by one rank of a pipeline stage: its layers' TP shard, plus the
    vocabulary-parallel embedding on the first stage and the output layer on the last (a tied
    embedding is held by both when PP > 1, as in Megatron)."""
    p = rs.stage_layers()[stage] * layer_params_per_rank(rs)
    emb, head = end_params(rs)
    if stage == 0:
        p += emb
    if stage == rs.pp - 1:
        p += head
    return p


__all__ = ["end_params", "layer_params_per_rank", "stage_params"]
