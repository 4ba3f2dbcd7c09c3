"""Pipeline schedules: the order in which one pipeline rank runs its forward and backward passes.

Each entry is ``(kind, micro_batch, chunk)`` with kind "F" or "B"; ``chunk`` is the model chunk
(virtual stage) for the interleaved schedule, else 0. The orders follow GPipe (Huang et al.
2019), 1F1B (PipeDream-Flush, Narayanan et al. 2021) and Megatron-LM's interleaved 1F1B.
"""

from __future__ import annotations

Step = tuple[str, int, int]


def gpipe(m: int) -> list[Step]:
    return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]


def one_f_one_b(stage: int, p: int, m: int) -> list[Step]:
    warmup = min(p - stage - 1, m)
    order: list[Step] = [("F", i, 0) for i in range(warmup)]
    f, b = warmup, 0
    while f < m:
        order.append(("F", f, 0))
        f += 1
        order.append(("B", b, 0))
        b += 1
    order += [("B", i, 0) for i in range(b, m)]
    return order


def interleaved(stage: int, p: int, m: int, v: int) -> list[Step]:
    """Megatron-LM's interleaved schedule (needs m to be a multiple of p)."""
    total = m * v

    def fwd(k: int) -> Step:
        chunk = (k // p) % v
        mb = (k // (p * v)) * p + k % p
        return ("F", mb, chunk)

    def bwd(k: int) -> Step:
        chunk = v - 1 - (k // p) % v
        mb = (k // (p * v)) * p + k % p
        return ("B", mb, chunk)

    warmup = min((p - stage - 1) * 2 + (v - 1) * p, total)
    order = [fwd(k) for k in range(warmup)]
    f, b = warmup, 0
    while f < total:
        order.append(fwd(f))
        f += 1
        order.append(bwd(b))
        b += 1
    order += [bwd(k) for k in range(b, total)]
    return order


def schedule(kind: str, stage: int, p: int, m: int, v: int = 1) -> list[Step]:
    if p == 1:
        return gpipe(m) if kind == "gpipe" else one_f_one_b(0, 1, m)
    if kind == "gpipe":
        return gpipe(m)
    if kind == "interleaved" and v > 1:
        return interleaved(stage, p, m, v)
    return one_f_one_b(stage, p, m)


def bubble_fraction(kind: str, p: int, m: int, v: int = 1) -> float:
    """Analytical idle fraction with uniform stages and free communication: (p-1)/(m+p-1) for
    GPipe and 1F1B, (p-1)/(v·m+p-1) for the interleaved schedule."""
    if kind == "interleaved":
        return (p - 1) / (v * m + p - 1)
    return (p - 1) / (m + p - 1)
