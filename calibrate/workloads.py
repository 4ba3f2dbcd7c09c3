"""The training jobs ``validate`` runs live: the probe's own job (in-sample: calibration fitted
its in-step factor on it) and workload shapes calibration never saw, each derived from the
probe's job so that a larger or smaller probe gets proportionate ones.

Each out-of-sample shape moves one share of the step away from the probe job's:

- ``wide``: twice the hidden size, half the layers: larger GEMMs than any the in-step factor
  was fitted on (compute-bound, tests the GEMM curve's extrapolation).
- ``long-seq``: four times the sequence, a quarter of the batch: the s×s attention's share grows.
- ``narrow-deep``: a quarter of the hidden size, four times the layers, twice the batch: small
  GEMMs, so memory-bound elementwise work and per-operation overhead take a larger share.
- ``comm-heavy``: the probe's model on a quarter of its batch: the same parameters (and so the
  same gradient all-reduce) for a quarter of the compute, so communication takes a larger share.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KEYS = ("layers", "hidden", "heads", "vocab", "seq", "batch")
NAMES = ("probe-job", "wide", "long-seq", "narrow-deep", "comm-heavy")


@dataclass(frozen=True)
class Workload:
    name: str
    cfg: dict[str, int]
    in_sample: bool
    what: str

    def job(self) -> dict[str, Any]:
        return {"name": self.name, **self.cfg}


def _heads(hidden: int, want: int) -> int:
    """The largest head count ≤ ``want`` that divides ``hidden`` (at least 1)."""
    for h in range(max(1, want), 0, -1):
        if hidden % h == 0:
            return h
    return 1


def workloads(base: dict[str, Any]) -> list[Workload]:
    b = {k: int(base[k]) for k in KEYS}
    L, h, nh, V, s, B = (b[k] for k in KEYS)
    head_dim = max(1, h // max(1, nh))

    def shape(hidden: int, **kw: int) -> dict[str, int]:
        hidden = max(16, hidden)
        cfg = dict(b, hidden=hidden, heads=_heads(hidden, max(1, hidden // head_dim)))
        cfg.update(kw)
        return cfg

    return [
        Workload("probe-job", dict(b), True, "the probe's own training job (in-sample)"),
        Workload(
            "wide",
            shape(2 * h, layers=max(1, L // 2)),
            False,
            "2× hidden, ½ layers: larger GEMMs",
        ),
        Workload(
            "long-seq",
            shape(h, seq=4 * s, batch=max(1, B // 4)),
            False,
            "4× sequence, ¼ batch: attention's share grows",
        ),
        Workload(
            "narrow-deep",
            shape(h // 4, layers=4 * L, batch=2 * B),
            False,
            "¼ hidden, 4× layers, 2× batch: memory-bound and per-op overhead share grows",
        ),
        Workload(
            "comm-heavy",
            dict(b, batch=max(1, B // 4)),
            False,
            "¼ batch, same model: the gradient all-reduce's share grows",
        ),
    ]


def select(all_: list[Workload], names: list[str] | None) -> list[Workload]:
    """The workloads named (all when ``names`` is empty), in their usual order."""
    check_names(names)
    if not names:
        return all_
    return [w for w in all_ if w.name in names]


def check_names(names: list[str] | None) -> None:
    """Refuse a workload name that is not one of :data:`NAMES`."""
    bad = [n for n in names or [] if n not in NAMES]
    if bad:
        from simulator.errors import UserError

        raise UserError(
            f"unknown workload '{bad[0]}'",
            path="--workloads",
            hint="choose among " + ", ".join(NAMES),
        )
