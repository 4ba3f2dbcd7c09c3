"""Pipeline schedules: the order in which one pipeline rank runs its forward and backward passes.

Each entry is ``(kind, micro_batch, chunk)`` with kind "F" or "B"; ``chunk`` is the model chunk
(virtual stage) for the interleaved schedule, else 0. The orders follow GPipe (Huang et al.
2019), 1F1B (PipeDream-Flush, Narayanan et al. 2021) and Megatron-LM's interleaved 1F1B.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

Step = tuple[str, int, int]


def gpipe(m: int) -> list[Step]:
    return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]


def _alternate(fwd: list[Step], bwd: list[Step], warmup: int) -> list[Step]:
    """``warmup`` forwards, then one forward and one backward in turn, then the backwards
    left (both lists in their order of execution)."""
    steady = len(fwd) - warmup
    out = fwd[:warmup]
    out += [x for pair in zip(fwd[warmup:], bwd[:steady], strict=True) for x in pair]
    out += bwd[steady:]
    return out


def one_f_one_b(stage: int, p: int, m: int) -> list[Step]:
    warmup = min(p - stage - 1, m)
    return _alternate([("F", i, 0) for i in range(m)], [("B", i, 0) for i in range(m)], warmup)


def interleaved_warmup(stage: int, p: int, m: int, v: int) -> int:
    """Chunk forwards before the first backward in Megatron-LM's interleaved schedule
    (schedules.py, forward_backward_pipelining_with_interleaving): 2(p-r-1) + (v-1)p on rank r,
    or all of them where the micro-batches are as many as the stages ('if num_microbatches ==
    pipeline_parallel_size: num_warmup_microbatches = total_num_microbatches')."""
    total = m * v
    if m == p:
        return total
    return min((p - stage - 1) * 2 + (v - 1) * p, total)


def interleaved(stage: int, p: int, m: int, v: int) -> list[Step]:
    """Megatron-LM's interleaved schedule (needs m to be a multiple of p): the k-th forward
    runs chunk (k // p) mod v of micro-batch (k // (p·v))·p + k mod p; backwards run the
    chunks in reverse."""
    total = m * v
    pv = p * v
    fwd = [("F", (k // pv) * p + k % p, (k // p) % v) for k in range(total)]
    bwd = [("B", (k // pv) * p + k % p, v - 1 - (k // p) % v) for k in range(total)]
    return _alternate(fwd, bwd, interleaved_warmup(stage, p, m, v))


def schedule(kind: str, stage: int, p: int, m: int, v: int = 1) -> list[Step]:
    if p == 1:
        return gpipe(m) if kind == "gpipe" else one_f_one_b(0, 1, m)
    if kind == "gpipe":
        return gpipe(m)
    if kind == "interleaved" and v > 1:
        return interleaved(stage, p, m, v)
    return one_f_one_b(stage, p, m)


def schedule_arrays(
    kind: str, stage: int, p: int, m: int, v: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`schedule` as arrays: whether each entry is a forward, its micro-batch, its chunk."""
    import numpy as np

    if kind == "interleaved" and v > 1 and p > 1:
        k = np.arange(m * v)
        mb = (k // (p * v)) * p + k % p
        ch = (k // p) % v
        f = (mb, ch)
        b = (mb, v - 1 - ch)
        warmup = interleaved_warmup(stage, p, m, v)
    else:
        mb = np.arange(m)
        zero = np.zeros(m, dtype=mb.dtype)
        f = b = (mb, zero)
        warmup = m if kind == "gpipe" else min(p - stage - 1, m)
    n = len(f[0])
    steady = n - warmup
    fwd = np.concatenate(
        (np.ones(warmup, bool), np.tile([True, False], steady), np.zeros(n - steady, bool))
    )
    out = []
    for xf, xb in zip(f, b, strict=True):
        mid = np.empty(2 * steady, dtype=xf.dtype)
        mid[0::2], mid[1::2] = xf[warmup:], xb[:steady]
        out.append(np.concatenate((xf[:warmup], mid, xb[steady:])))
    return fwd, out[0], out[1]


def bubble_fraction(kind: str, p: int, m: int, v: int = 1) -> float:
    """Analytical idle fraction with uniform stages and free communication: (p-1)/(m+p-1) for
    GPipe and 1F1B, (p-1)/(v·m+p-1) for the interleaved schedule."""
    if kind == "interleaved":
        return (p - 1) / (v * m + p - 1)
    return (p - 1) / (m + p - 1)
