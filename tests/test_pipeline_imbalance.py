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
    own = ("compute", "comm_tp", "comm_cp", "comm_pp", "straggler", "overlap", "offload")
    return sum(acc.get(k, 0.0) for k in own) / m


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


# The Llama 3 405B layout (Meta, 'The Llama 3 Herd of Models', 2024, Sec. 3.3.2): one layer
# fewer on the first and last pipeline stages, so that the first chunk holds only the embedding
# and the last only the output layer and loss. Scaled down: 10 layers over PP4 x 3 chunks.
EMPTY_ENDS = [
    "cluster.nodes=4",
    "training.global_batch=64",
    "parallelism.tp=2",
    "parallelism.pp=4",
    "parallelism.pp_schedule={kind: interleaved, virtual_stages: 3}",
    "model={name: m10, layers: 10, hidden: 2048, heads: 16, vocab: 32000}",
]


def test_empty_end_chunks_match_the_event_engine_and_take_the_embedding_stage_load() -> None:
    from simulator.engine.periodic import run_periodic
    from simulator.engine.sim import run_engine

    zero = load_scenario(BASE, [*EMPTY_ENDS, "parallelism.stage_layers=[0,1,1,1,1,1,1,1,1,1,1,0]"])
    fast, ref = run_periodic(zero), run_engine(zero)
    assert fast.step_time == pytest.approx(ref.step_time, rel=1e-9)
    for s, rr in ref.classes.items():
        for k, v in rr.acc.items():
            assert fast.classes[s].acc[k] == pytest.approx(v, rel=1e-9, abs=1e-12)
    res = simulate(zero, full=True, scaling=False)
    assert res.metrics.step_time_s == pytest.approx(ref.step_time, rel=1e-9)
    for acc in res.metrics.per_class.values():
        assert sum(acc.values()) == pytest.approx(res.metrics.step_time_s, rel=1e-9)
    # The first stage, which alone carries the embedding, holds one layer fewer than the middle
    # stages: its compute per step is below theirs.
    per = simulate(zero, scaling=False).metrics.per_class
    assert per["stage0"]["compute"] < per["stage1"]["compute"]
    assert zero.stage_layers() == [2, 3, 3, 2]


def test_only_the_end_chunks_may_be_empty(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from conftest import run_cli
    from test_errors import assert_user_error

    from simulator.errors import UserError

    with pytest.raises(UserError) as err:
        load_scenario(BASE, [*EMPTY_ENDS, "parallelism.stage_layers=[1,1,0,1,1,1,1,1,1,1,1,1]"])
    assert err.value.path == "parallelism.stage_layers"
    assert "first and last may be 0" in str(err.value)
    f = tmp_path / "s.yaml"
    f.write_text(BASE.read_text())
    res = run_cli("check", str(f), "--set", "parallelism.stage_layers=[0, 80]")
    assert_user_error(res, file=f, path="parallelism.stage_layers", says=("summing to 80",))
