"""How a rank's gradients (and gathered parameters) fall into DP buckets, tensor by tensor.

PyTorch DDP (``torch/csrc/distributed/c10d/reducer.cpp``, ``compute_bucket_assignment_by_size``),
Megatron-Core's ``_ParamAndGradBuffer`` and DeepSpeed's ZeRO buckets all fill a bucket with whole
parameter tensors, in the order backward completes their gradients, and close it at the first
tensor that takes it to its size: a tensor is never split, so a tensor larger than the bucket
goes out alone, and a bucket size below one layer's largest tensor makes at most one collective
per tensor, not one per bucket-size of bytes.

A layer's tensors here are its four weight matrices as Megatron lays them out (fused QKV,
attention output, fused MLP input, MLP output), sized on one TP rank; norm weights and biases,
tiny, travel with them, so the four add up to the layer's parameters on the rank.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from ..config.scenario import ResolvedScenario
from .memory import layer_params_per_rank

# A bucket closes at its size to within rounding: a layer's tensors, scaled to sum to the
# layer, must fill a bucket of exactly one layer (FSDP's unit) however the floats fall.
FULL = 1.0 - 1e-9


def layer_tensors(rs: ResolvedScenario) -> tuple[float, ...]:
    """One layer's parameters on one TP rank as the tensors backward completes them in: MLP
    output, MLP input, attention output, QKV (elements; they sum to the layer's share)."""
    m = rs.model
    h, kv, f = m.hidden, m.kv_dim, m.ffn
    n_in = 2 if m.mlp == "swiglu" else 1
    raw = (f * h, n_in * h * f, h * h, h * (h + 2 * kv))
    scale = layer_params_per_rank(rs) / sum(raw)
    return tuple(r * scale for r in raw)


def fill(tensors: Iterable[float], cap: float) -> list[float]:
    """The buckets ``tensors`` (bytes, in order) fill at ``cap`` bytes a bucket: each closes at
    the first tensor that takes it to ``cap``; what is left at the end is a last bucket. An
    infinite cap is one bucket of everything."""
    out: list[float] = []
    pending = 0.0
    for t in tensors:
        pending += t
        if pending >= cap * FULL:
            out.append(pending)
            pending = 0.0
    if pending > 0.0 or not out:
        out.append(pending)
    return out


def bucket_count(
    layers: int, tensor_bytes: tuple[float, ...], extras: tuple[float, ...], cap: float
) -> int:
    """Buckets of a reduction over ``layers`` layers of ``tensor_bytes`` each and the
    ``extras`` tensors (embedding, output layer): at most one per tensor, counted without
    listing them where every tensor fills a bucket alone."""
    if math.isinf(cap):
        return 1
    extras = tuple(e for e in extras if e > 0)
    if cap <= min(tensor_bytes + extras, default=cap):
        return max(1, layers * len(tensor_bytes) + len(extras))
    if cap >= sum(tensor_bytes) and cap >= max(extras, default=0.0):
        # whole layers per bucket: no tensor boundary matters
        total = layers * sum(tensor_bytes) + sum(extras)
        return max(1, math.ceil(total / cap - 1e-9))
    seq = [t for _ in range(layers) for t in tensor_bytes] + list(extras)
    return len(fill(seq, cap))
