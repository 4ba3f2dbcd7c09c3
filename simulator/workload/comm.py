"""Bytes of every collective and point-to-point transfer one training step needs under a plan.

Sizes follow nccl-tests' convention: ``bytes`` is the full buffer S of the operation (for an
all-gather, the gathered output; for a reduce-scatter, the input). ``calls`` is per rank per step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..config.scenario import ResolvedScenario
from .buckets import chunk_bucket_count, end_params, gather_groups
from .memory import (
    gather_bytes_per_param,
    layer_gather_bytes_per_param,
    layer_params_per_rank,
    shard_group,
    stage_params,
)
from .model import param_breakdown
from .ops import (
    Op,
    act_bytes,
    embedding_ops,
    head_ops,
    layer_ops,
    tokens_per_rank,
)
from .recompute import recomputes_collective
from .tp_backward import stack_backward


@dataclass(frozen=True)
class CommItem:
    group: str  # tp, cp, pp, dp
    op: str  # all_reduce, all_gather, reduce_scatter, p2p
    bytes: float  # per call
    calls: float  # per rank per step
    group_size: int
    phase: str  # forward, backward, recompute, step

    @property
    def total_bytes(self) -> float:
        return self.bytes * self.calls


def grad_bytes_per_param(rs: ResolvedScenario) -> float:
    """Bytes per element of the gradient buffer the DP reduction reads (fp32 training has fp32
    gradients)."""
    return 4.0 if rs.grad_reduce_fp32 else 2.0


def grad_wire_bytes_per_param(rs: ResolvedScenario) -> float:
    """Bytes per gradient element on the wire of the DP reduction: the buffer's width, except
    where the stack casts an fp32 buffer to the 16-bit training dtype to communicate it
    (software ``grad_comm_16bit``: DeepSpeed's communication_data_type)."""
    flag = rs.software.grad_comm_16bit
    written = rs.training.grad_reduce_dtype is not None  # the scenario's choice is the wire's
    if rs.training.precision != "fp32" and not written and flag is not None and flag.value:
        return 2.0
    return grad_bytes_per_param(rs)


def pp_message_bytes(rs: ResolvedScenario) -> float:
    """Activation (or its gradient) sent between pipeline stages per micro-batch, per rank.

    With SP the tensor is already split over TP ranks; without it, each TP rank sends a 1/t
    slice and the receiver all-gathers it over the fast fabric (Megatron's scatter/gather)."""
    return tokens_per_rank(rs) * rs.model.hidden * act_bytes(rs) / rs.tp


def tied_embedding_bytes(rs: ResolvedScenario) -> float:
    """Bytes of the word-embedding gradient the first and last pipeline stages all-reduce
    between them each step when the output layer shares the embedding's weights (Megatron-LM's
    embedding group after the DP reduction, DeepSpeed's tied modules before it): one TP rank's
    vocabulary shard at the gradient buffer's width. Zero without a pipeline or tied
    weights."""
    if rs.pp <= 1 or not rs.model.tied_embeddings:
        return 0.0
    return param_breakdown(rs.model).embedding / rs.tp * grad_bytes_per_param(rs)


def dp_bucket_bytes(rs: ResolvedScenario, width: float) -> float:
    """Bytes per DP collective of elements ``width`` bytes wide: the scenario's bucket, else the
    stack's (in MB, or in parameters growing with DP×CP as Megatron-Core sizes it), except that
    PyTorch FSDP, and a stack gathering once under pipeline parallelism (FSDP2), gather and
    reduce-scatter one layer's parameters per collective, unless the scenario sets a bucket:
    FSDP's unit is the module it wraps, each transformer block (llm-foundry's, torchtitan's and
    metaseq's wrap policies), whatever bucket size the stack gives its DDP."""
    if rs.parallelism.dp_bucket_mb is None:
        if rs.gathers_once or rs.parallelism.sharding.kind == "fsdp":
            return max(1.0, layer_params_per_rank(rs) * width)
        sw = rs.software
        if sw.dp_bucket_params is not None and sw.dp_bucket_params_per_dp_rank is not None:
            per_rank = sw.dp_bucket_params_per_dp_rank.value
            return max(sw.dp_bucket_params.value, per_rank * rs.dp_cp) * width
    return rs.dp_bucket_bytes


def grad_bucket_bytes(rs: ResolvedScenario, width: float, stage: int = 0, chunk: int = 0) -> float:
    """Bytes per gradient reduction of model chunk ``chunk`` on pipeline stage ``stage``:
    :func:`dp_bucket_bytes`, or the chunk's whole gradient in one collective (``math.inf``)
    where Megatron-Core does not bucket: with its bucket rule, when the reduction does not
    overlap backward, and under ``dp_bucket_first_chunk_only`` on every chunk but the first
    stage's first (megatron/core/distributed/distributed_data_parallel.py: bucket_size None
    'if not overlap_grad_reduce', 'if disable_bucketing or pp_rank > 0'). A scenario's
    dp_bucket_mb keeps its buckets everywhere. ZeRO-2/3 and FSDP reduce every micro-batch's
    gradients, so they keep theirs too."""
    sw = rs.software
    if rs.parallelism.dp_bucket_mb is None and rs.zero_stage < 2 and not rs.gathers_once:
        if sw.dp_bucket_params is not None and not rs.parallelism.overlap.dp_grad:
            return math.inf
        flag = sw.dp_bucket_first_chunk_only
        if flag is not None and flag.value and (stage > 0 or chunk > 0):
            return math.inf
    return dp_bucket_bytes(rs, width)


def gather_buckets(rs: ResolvedScenario, params: float, stage: int = 0) -> tuple[float, int]:
    """ZeRO-1/2's parameter all-gather of ``params`` on ``stage`` in the gradient buckets'
    sizes (Megatron's distributed optimizer, FSDP's units), each chunk's layers in its own and
    the embedding and the output layer each in one: (bytes each, count)."""
    width = gather_bytes_per_param(rs)
    n = sum(
        len(gather_groups(rs, stage, c, width, grad_bucket_bytes(rs, width, stage, c))[0])
        for c in range(rs.parallelism.virtual_stages)
    )
    emb, head = end_params(rs)
    n += (stage == 0 and emb > 0) + (stage == rs.pp - 1 and head > 0)
    n = max(1, n)
    return params * width / n, n


def dp_buckets(rs: ResolvedScenario, stage: int = 0) -> tuple[float, int]:
    """One rank's DP reduction (over DP×CP) as equal gradient buckets: (bytes each, count),
    each model chunk filling its own buckets with whole tensors (:mod:`.buckets`)."""
    width = grad_wire_bytes_per_param(rs)
    total = stage_params(rs, stage) * width
    n = sum(
        chunk_bucket_count(rs, stage, c, width, grad_bucket_bytes(rs, width, stage, c))
        for c in range(rs.parallelism.virtual_stages)
    )
    n = max(1, n)
    return total / n, n


def step_comm(rs: ResolvedScenario, stage: int = 0) -> list[CommItem]:
    """Communication of one rank of a pipeline stage during one step."""
    items: list[CommItem] = []
    m = rs.micro_batches
    layers = rs.stage_layers()[stage]

    def add_ops(ops: list, count: float, recomputed: bool = False) -> None:
        """The collectives of ``ops``'s forward pass, of its backward as the stack runs it
        (mirrored, moved, re-gathered: ``tp_backward.stack_backward``, as the engine does) and,
        where recomputed, again."""

        def add(op: Op, phase: str) -> None:
            size = rs.tp if op.group == "tp" else rs.cp
            items.append(CommItem(op.group or "", op.collective or "", op.msg_bytes,
                                  count * m, size, phase))  # fmt: skip

        for op in ops:
            if op.kind != "collective" or op.group is None:
                continue
            if op.only != "backward":
                add(op, "forward")
            if recomputed and recomputes_collective(rs, op):
                add(op, "recompute")
        for op in stack_backward(rs, ops):
            if op.kind == "collective" and op.group is not None:
                add(op, "backward")

    # Full recomputation re-runs the transformer layers' forward pass only (as in
    # model.recompute_flops_per_token); the embedding and the logits/loss are not recomputed.
    add_ops(layer_ops(rs), layers, recomputed=True)
    if stage == 0:
        add_ops(embedding_ops(rs), 1)
    if stage == rs.pp - 1:
        add_ops(head_ops(rs), 1)

    if rs.pp > 1:
        v = rs.parallelism.virtual_stages
        # Each micro-batch crosses each of this rank's chunk boundaries once forward and once
        # backward; the first and last stage have one neighbour when v = 1.
        sends = m * v * (2 if 0 < stage < rs.pp - 1 or v > 1 else 1)
        items.append(CommItem("pp", "p2p", pp_message_bytes(rs), sends, 2, "forward+backward"))

    if rs.dp_cp > 1:
        z = rs.zero_stage
        params = stage_params(rs, stage)
        n = shard_group(rs)
        b, count = dp_buckets(rs, stage)
        if z == 0:
            items.append(CommItem("dp", "all_reduce", b, count, rs.dp_cp, "backward"))
        else:
            coll = "all_reduce" if rs.grads_all_reduced else "reduce_scatter"
            # ZeRO-2/3 and FSDP keep no full gradient: every micro-batch's is reduce-scattered.
            items.append(CommItem("dp", coll, b, count * (1 if z < 2 else m), n, "backward"))
            if n < rs.dp_cp:  # hybrid sharding: each reduce-scatter's shard, across replicas
                items.append(
                    CommItem(
                        "dp",
                        "all_reduce",
                        b / n,
                        count * (1 if z < 2 else m),
                        rs.dp_cp // n,
                        "backward",
                    )
                )
            if z < 3:  # once a step, in the gradient buckets
                each, gathers = gather_buckets(rs, params, stage)
                items.append(CommItem("dp", "all_gather", each, gathers, n, "step"))
            else:  # ZeRO-3: each layer before forward and before backward; the root unit
                # (embedding, output layer) once a micro-batch, kept through its backward
                emb, head = end_params(rs)
                ends = (emb if stage == 0 else 0.0) + (head if stage == rs.pp - 1 else 0.0)
                width = gather_bytes_per_param(rs)
                layers_b = (params - ends) * layer_gather_bytes_per_param(rs)
                items.append(CommItem("dp", "all_gather", layers_b, 2.0 * m, n, "forward+backward"))
                if ends > 0:
                    items.append(CommItem("dp", "all_gather", ends * width, m, n, "forward"))
    tied = tied_embedding_bytes(rs)
    if tied > 0 and stage in (0, rs.pp - 1):
        items.append(CommItem("embedding", "all_reduce", tied, 1, 2, "step"))
    return items


def comm_summary(rs: ResolvedScenario) -> dict[str, float]:
    """Bytes each rank of the busiest stage moves per step, by group."""
    best: dict[str, float] = {}
    for stage in range(rs.pp):
        per: dict[str, float] = {}
        for it in step_comm(rs, stage):
            per[it.group] = per.get(it.group, 0.0) + it.total_bytes
        for k, v in per.items():
            best[k] = max(best.get(k, 0.0), v)
    return best
