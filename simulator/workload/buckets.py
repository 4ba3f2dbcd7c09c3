"""How a rank's gradients (and gathered parameters) fall into DP buckets, tensor by tensor.

PyTorch DDP (``torch/csrc/distributed/c10d/reducer.cpp``, ``compute_bucket_assignment_by_size``),
Megatron-Core's ``_ParamAndGradBuffer`` and DeepSpeed's ZeRO buckets all fill a bucket with whole
parameter tensors, in the order backward completes their gradients, and close it at the first
tensor that takes it to its size: a tensor is never split, so a tensor larger than the bucket
goes out alone, and a bucket size below one layer's largest tensor makes at most one collective
per tensor, not one per bucket-size of bytes. Each model chunk (interleaved pipelines) is a
module of its own with its own buckets.

A layer's tensors here are its four weight matrices as Megatron lays them out (fused QKV,
attention output, fused MLP input, MLP output), sized on one TP rank; norm weights and biases,
tiny, travel with them, so the four add up to the layer's parameters on the rank. Backward
completes the output layer's first (last chunk of the last stage), then each layer's from its
MLP output back to its QKV, and the embedding's last (first chunk of the first stage).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..config.scenario import ResolvedScenario
from .memory import end_params, layer_params_per_rank

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


def _closes(tensors: list[float], cap: float) -> list[tuple[float, int]]:
    """Each bucket ``tensors`` (bytes, in order) fill at ``cap`` bytes a bucket, with the
    position of its last tensor: a bucket closes at the first tensor that takes it to ``cap``;
    what is left at the end is a last bucket."""
    out: list[tuple[float, int]] = []
    pending = 0.0
    for i, t in enumerate(tensors):
        pending += t
        if pending >= cap * FULL:
            out.append((pending, i))
            pending = 0.0
    if pending > 0.0:
        out.append((pending, len(tensors) - 1))
    return out


def fill(tensors: Iterable[float], cap: float) -> list[float]:
    """The buckets ``tensors`` (bytes, in order) fill at ``cap`` bytes a bucket (an infinite cap
    is one bucket of everything)."""
    return [size for size, _ in _closes(list(tensors), cap)] or [0.0]


def chunk_tensors(
    rs: ResolvedScenario, stage: int, chunk: int, width: float, ends: bool = True
) -> list[float]:
    """Bytes (``width`` a parameter) of the tensors of model chunk ``chunk`` on ``stage`` in
    the order backward completes them; without ``ends``, its layers' only."""
    layers = rs.chunk_layers(stage)[chunk]
    one = [t * width for t in layer_tensors(rs)]
    seq = one * layers
    if ends:
        emb, head = end_params(rs)
        if stage == rs.pp - 1 and chunk == rs.parallelism.virtual_stages - 1 and head > 0:
            seq.insert(0, head * width)
        if stage == 0 and chunk == 0 and emb > 0:
            seq.append(emb * width)
    return seq


def chunk_bucket_count(
    rs: ResolvedScenario, stage: int, chunk: int, width: float, cap: float, ends: bool = True
) -> int:
    """Buckets of one chunk's gradients (or parameters) at ``cap`` bytes a bucket."""
    seq = chunk_tensors(rs, stage, chunk, width, ends)
    if not seq:
        return 0
    if cap <= min(seq):
        return len(seq)  # every tensor alone
    return len(fill(seq, cap))


def gather_groups(
    rs: ResolvedScenario, stage: int, chunk: int, width: float, cap: float
) -> tuple[list[float], list[int]]:
    """A chunk's layer parameters as the buckets a ZeRO-1/2 all-gather moves them in, in
    forward order (the gradient buckets, gathered from the one backward fills last), and for
    each layer (forward order) the index of the bucket it waits for: the last to arrive of
    those holding its tensors."""
    seq = chunk_tensors(rs, stage, chunk, width, ends=False)
    per = len(layer_tensors(rs))
    layers = len(seq) // per if per else 0
    closes = _closes(seq, cap)
    n = len(closes)
    # backward position -> backward bucket index
    owner = []
    k = 0
    for i in range(len(seq)):
        while closes[k][1] < i:
            k += 1
        owner.append(k)
    # forward layer j holds backward positions (layers-1-j)*per .. +per-1; the bucket of the
    # first of them is gathered last (buckets go out in reverse of their backward order)
    waits = [n - 1 - owner[(layers - 1 - j) * per] for j in range(layers)]
    return [size for size, _ in reversed(closes)], waits
