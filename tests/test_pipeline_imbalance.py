"""A pipeline stage's wait is split into the pipeline's own bubble, (p-1)/v of the stage's
per-micro-batch time, and waiting on slower stages (``imbalance``): balanced stages have none
of the latter; a light stage beside a heavy one waits the difference every micro-batch."""

from __future__ import annotations

import pytest
from conftest import REPO

from simulator.config.loading import load_scenario
from simulator.simulate import simulate

BASE = REPO / "scenarios" / "llama3-70b-64xh100.yaml"  # 80 layers, TP8
ONE_F_ONE_B = [
    "cluster.nodes=4",
    "training.global_batch=64",
    "parallelism.pp_schedule={kind: 1f1b}",
]


def _per_mb(acc: dict[str, float], m: int) -> float:
    return sum(acc.get(k, 0.0) for k in ("compute", "comm_tp", "comm_cp")) / m


def test_unbalanced_stages_wait_on_the_heavy_one() -> None:
    rs = load_scenario(BASE, [*ONE_F_ONE_B, "parallelism.stage_layers=[35,15,15,15]"])
    res = simulate(rs, scaling=False)
    m, p = rs.micro_batches, rs.pp
    heavy = res.metrics.per_class["stage0"]
    for name in ("stage1", "stage2"):
        light = res.metrics.per_class[name]
        t = _per_mb(light, m)
        assert light["pp_bubble"] == pytest.approx((p - 1) * t, rel=1e-9)
        # Every micro-batch, the light stage waits for the heavy one's extra time.
        extra = m * (_per_mb(heavy, m) - t)
        assert light["imbalance"] == pytest.approx(extra, rel=0.05)
    for acc in res.metrics.per_class.values():
        assert sum(acc.values()) == pytest.approx(res.metrics.step_time_s, rel=1e-9)
    b = res.metrics.breakdown_s
    assert b["imbalance"] > 5 * b["pp_bubble"]


def test_even_layers_wait_only_on_the_head_and_embedding_stages() -> None:
    rs = load_scenario(BASE, ONE_F_ONE_B)  # 20 layers a stage; the last adds the logits
    res = simulate(rs, scaling=False)
    m, p = rs.micro_batches, rs.pp
    per = res.metrics.per_class
    t = {name: _per_mb(acc, m) for name, acc in per.items()}
    slowest = max(t, key=lambda k: t[k])
    assert slowest == "stage3"  # the 128k-vocabulary logits
    assert per[slowest].get("imbalance", 0.0) == 0.0
    for name, acc in per.items():
        # Each stage waits, beyond the fill and drain, the slowest stage's extra work.
        assert acc.get("imbalance", 0.0) == pytest.approx(
            m * (t[slowest] - t[name]), abs=0.01 * res.metrics.step_time_s
        )
        assert acc["pp_bubble"] <= (p - 1) * t[name] * (1 + 1e-9)
    # The middle stages' bubble is the 1F1B fill and drain, (p-1) per-micro-batch times.
    assert per["stage1"]["pp_bubble"] == pytest.approx((p - 1) * t["stage1"], rel=1e-9)
