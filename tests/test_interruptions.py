"""Interrupted runs: GPU failures and spot preemptions, checkpoints written at the best
interval, and the goodput time and cost grow by (the renewal formula against a Monte Carlo of
the same process, its limits, and how the cost model uses it)."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
from conftest import fig, inline_scenario
from test_cost import CLOUD, cost, priced

from simulator.config.loading import resolve_dict
from simulator.config.scenario import ResolvedScenario
from simulator.cost import compute_cost
from simulator.errors import UserError
from simulator.interruptions import RESTART_MIN, checkpoint, goodput


def test_spot_preemptions_cost_at_least_as_much_as_none() -> None:
    calm = cost(priced(CLOUD, tier="spot"))
    stormy = cost(priced(CLOUD, tier="spot", spot_preemptions_per_day=fig(4)))
    assert calm.usd_per_hour == pytest.approx(stormy.usd_per_hour)  # same rental rate
    assert stormy.usd_total >= calm.usd_total  # type: ignore[operator]
    assert stormy.usd_per_step >= calm.usd_per_step
    assert stormy.time_to_train_days >= calm.time_to_train_days  # type: ignore[operator]
    # Time and $ grow by 1/goodput at the best checkpoint interval.
    g = goodput(4 / 24, checkpoint(priced(CLOUD, tier="spot"))).goodput
    assert 0.8 < g < 1.0
    assert stormy.time_to_train_days == pytest.approx(calm.time_to_train_days / g)  # type: ignore[operator]
    assert stormy.usd_total == pytest.approx(calm.usd_total / g)  # type: ignore[operator]
    # The $ that bought nothing: the idle quarter of each step and the time lost to preemptions.
    assert stormy.usd_idle == pytest.approx((1 - g * 0.75) * stormy.usd_total)  # type: ignore[operator]
    assert any("preemption" in line for line in stormy.assumptions)
    assert any("not modelled" in line for line in calm.assumptions)


def _monte_carlo(per_hour: float, tau: float, delta: float, restart: float, n: int) -> float:
    """Goodput of n checkpoint intervals under Poisson interruptions, drawn one by one; an
    interruption during a restart starts the restart over."""
    import numpy as np

    rng = np.random.default_rng(7)
    lam, wall, need = per_hour / 3600.0, 0.0, tau + delta
    for _ in range(n):
        while True:
            x = rng.exponential(1.0 / lam)
            if x >= need:
                wall += need
                break
            wall += x
            while (y := rng.exponential(1.0 / lam)) < restart:
                wall += y
            wall += restart
    return n * tau / wall


@pytest.mark.parametrize("per_day", [1.0, 8.0, 64.0])
def test_spot_goodput_matches_a_monte_carlo_of_the_same_process(per_day: float) -> None:
    """The renewal formula against drawn interruptions, at rare and at frequent preemptions
    (64 a day on one node: more often than the 25 minutes a first-order model charges)."""
    ck = checkpoint(priced(CLOUD, tier="spot"))
    g = goodput(per_day / 24, ck)
    assert g.restart_s == pytest.approx(RESTART_MIN * 60 + ck.read_s)
    mc = _monte_carlo(per_day / 24, g.interval_s, ck.write_s, g.restart_s, 20_000)
    assert g.goodput == pytest.approx(mc, rel=0.03)
    # The interval is the best one: a longer or shorter one makes less progress.
    for f in (0.8, 1.25):
        other = _monte_carlo(per_day / 24, g.interval_s * f, ck.write_s, g.restart_s, 20_000)
        assert other <= g.goodput * 1.03
    # Rare preemptions: the first-order loss, λ(τ/2 + R) + δ/τ.
    if per_day == 1.0:
        lam = per_day / 86400
        first = lam * (g.interval_s / 2 + g.restart_s) + ck.write_s / g.interval_s
        assert 1 - g.goodput == pytest.approx(first, rel=0.05)


@pytest.mark.parametrize("step_s", [7.0, 600.0, 5000.0])
def test_checkpoints_fall_between_steps(step_s: float) -> None:
    ck = checkpoint(priced(CLOUD, tier="spot"))
    free = goodput(8 / 24, ck)
    g = goodput(8 / 24, ck, step_s)
    steps = g.interval_s / step_s
    assert steps >= 1 and steps == pytest.approx(round(steps))
    assert g.goodput <= free.goodput + 1e-12  # a constraint never helps


def test_checkpoint_writers_are_the_nodes_holding_a_shard() -> None:
    """Plain DDP saves one replica's copy (one node writes here); with the optimizer state
    sharded over DP every node writes its shard. On a restart every replica loads what is
    replicated: plain DDP the whole state DP times, ZeRO-1 its 16-bit weights DP times and
    the optimizer state once, ZeRO-3 everything once."""
    from simulator.workload.model import param_count

    data = inline_scenario(nodes=4, seq_len=1000, global_batch=992)
    ddp = resolve_dict(data)
    data["parallelism"] = {"sharding": {"kind": "zero", "stage": 1}}
    zero1 = resolve_dict(data)
    data["parallelism"] = {"sharding": {"kind": "zero", "stage": 3}}
    zero3 = resolve_dict(data)
    a, b, c = checkpoint(ddp), checkpoint(zero1), checkpoint(zero3)
    assert a.bytes == pytest.approx(b.bytes) == pytest.approx(c.bytes)
    assert a.write_s == pytest.approx(4 * b.write_s)
    psi, dp = param_count(ddp.model, 1000), ddp.dp_cp
    assert dp > 1
    assert a.read_bytes == pytest.approx(dp * a.bytes)
    assert b.read_bytes == pytest.approx(psi * (2 * dp + 12))
    assert c.read_bytes == pytest.approx(c.bytes)
    assert a.read_s == pytest.approx(a.read_bytes / b.read_bytes * b.read_s)


def test_plain_ddp_writers_are_the_nodes_of_one_replica_wherever_its_stages_sit() -> None:
    """With pipeline parallelism, data-parallel replica 0's stages sit on different nodes
    (ranks are laid out TP fastest, then CP, DP, PP): each of those nodes writes its stage."""
    data = inline_scenario(nodes=4, seq_len=1000, global_batch=992)
    flat = checkpoint(resolve_dict(data))
    data["parallelism"] = {"pp": 4}
    piped = checkpoint(resolve_dict(data))
    assert piped.write_s == pytest.approx(flat.write_s / 4)


def test_hybrid_sharding_writers_are_the_nodes_of_one_shard_group() -> None:
    """HSDP: each shard group (a node here) holds the whole state and the others copies, as
    DDP's replicas do, so one group's nodes write it (a review: every node wrote, as with full
    sharding, four times as fast on four nodes); a restart reads one copy per group."""
    data = inline_scenario(nodes=4, seq_len=1000, global_batch=992)
    data["parallelism"] = {"sharding": {"kind": "fsdp", "strategy": "full_shard"}}
    full = checkpoint(resolve_dict(data))
    data["parallelism"] = {"sharding": {"kind": "fsdp", "strategy": "hybrid_shard"}}
    hybrid = checkpoint(resolve_dict(data))
    assert hybrid.bytes == pytest.approx(full.bytes)
    assert hybrid.write_s == pytest.approx(4 * full.write_s)
    assert hybrid.read_bytes == pytest.approx(4 * full.read_bytes)
    data["cluster"] = {**data["cluster"], "nodes": 1}
    assert checkpoint(resolve_dict(data)).write_s == pytest.approx(hybrid.write_s)


def test_slower_checkpoint_storage_never_makes_more_progress() -> None:
    fast = priced(CLOUD, tier="spot", spot_preemptions_per_day=fig(8))
    data = copy.deepcopy(fast.raw)
    data["cluster"]["storage"]["write_gbps_per_client"] = fig(0.5)
    data["cluster"]["storage"]["read_gbps_per_client"] = fig(0.5)
    slow = resolve_dict(data)
    a, b = checkpoint(fast), checkpoint(slow)
    assert b.write_s == pytest.approx(a.write_s * 10) and b.bytes == a.bytes
    assert goodput(8 / 24, b).goodput < goodput(8 / 24, a).goodput
    assert cost(slow).time_to_train_days > cost(fast).time_to_train_days  # type: ignore[operator]


def test_checkpoint_holds_weights_and_optimizer_state() -> None:
    rs = priced(CLOUD, tier="spot")
    from simulator.workload.model import param_count

    psi = param_count(rs.model, rs.training.seq_len)
    ck = checkpoint(rs)
    # bf16 weights, fp32 master weights and two Adam moments: 14 bytes per parameter, written
    # at the test storage's 5 GB/s per node and read at 10 GB/s, once per replica.
    assert ck.bytes == pytest.approx(14 * psi)
    assert ck.write_s == pytest.approx(14 * psi / 5e9)
    assert ck.read_s == pytest.approx(rs.dp_cp * 14 * psi / 10e9)


def test_a_node_smaller_than_the_instance_rents_a_whole_instance() -> None:
    """A cloud rents whole instances: 8 GPUs as eight 1-GPU nodes on an 8-GPU instance type
    are eight instances, each preempted on its own and each billed for its 8 GPUs, against one
    instance for one 8-GPU node; the unused GPUs count as spend that buys nothing."""
    one = priced(CLOUD, tier="spot", spot_preemptions_per_day=fig(8), gpus_per_node=fig(8))
    data = copy.deepcopy(one.raw)
    data["cluster"].update(gpus_per_node=1, nodes=8)
    data["cluster"]["network"] = {"profile": "ib-ndr-400", "nics_per_node": 1}
    eight = resolve_dict(data)
    a, b = cost(one), cost(eight)
    assert any("8 a day" in x for x in a.assumptions)
    assert any("64 a day" in x for x in b.assumptions)
    assert b.usd_per_hour == pytest.approx(8 * a.usd_per_hour)
    assert any("whole instances" in x for x in b.assumptions)
    assert b.usd_idle_per_step > 7 / 8 * b.usd_per_step


def _failing(mtbf: float, **kw: Any) -> ResolvedScenario:
    data = copy.deepcopy(priced(CLOUD, **kw).raw)
    data["cluster"]["gpu"]["mtbf_hours"] = fig(mtbf)
    return resolve_dict(data)


def test_gpu_failures_interrupt_every_tier() -> None:
    """A synchronous job stops when any GPU fails: N GPUs at one failure per MTBF GPU-hours
    interrupt it N/MTBF times an hour; goodput follows with the best checkpoint interval."""
    rs = _failing(1000.0)
    r = cost(rs)
    g = goodput(rs.gpus / 1000.0, checkpoint(rs), 10.0)
    assert r.goodput == pytest.approx(g.goodput) and 0.9 < r.goodput < 1.0
    assert r.time_to_train_days == pytest.approx(10_000 / 86_400 / g.goodput)
    assert any("GPU failures: 8 GPUs" in a for a in r.assumptions)
    # More GPUs fail more often: never more progress per hour of wall time.
    more = cost(_failing(1000.0, nodes=4, global_batch=992))
    assert more.goodput < r.goodput
    # Spot adds its preemptions to the failures.
    both = cost(_failing(1000.0, tier="spot", spot_preemptions_per_day=fig(4)))
    assert both.goodput < cost(_failing(1000.0, tier="spot")).goodput
    assert any("GPU failures" in a and "spot preemptions" in a for a in both.assumptions)


def test_no_failure_figure_is_said_and_costs_nothing() -> None:
    from simulator.interruptions import unmodelled_failures

    rs = priced(CLOUD)
    r = cost(rs)
    assert r.goodput == 1.0
    (note,) = unmodelled_failures(rs)  # among simulate's notes, priced or not
    assert "no mtbf_hours or mtbf_other_hours" in note and "are not modelled" in note


def test_failures_too_frequent_to_progress_are_a_user_error() -> None:
    with pytest.raises(UserError) as exc:
        # 512 GPUs failing once an hour each: one failure every 7 s, a restart takes 10 min
        compute_cost(_failing(1.0, nodes=64, global_batch=1024), 10.0, 0.2)
    assert exc.value.path == "cluster.nodes" and "GPU failures" in exc.value.message
    # the restart, often the cause at scale, is named too (a review: the message named only
    # the failure rate and a 4 s checkpoint where every replica read back 3.5 PB)
    assert "a restart takes" in exc.value.message and "GB in all" in exc.value.message


def test_spot_preemption_rate_ignored_on_other_tiers() -> None:
    r = cost(priced(CLOUD, tier="on_demand", spot_preemptions_per_day=fig(4)))
    assert r.time_to_train_days == pytest.approx(10_000 / 86_400)


def test_spot_preempted_too_often_to_progress_is_a_user_error() -> None:
    rs = priced(CLOUD, tier="spot", spot_preemptions_per_day=fig(10_000))
    with pytest.raises(UserError) as exc:
        compute_cost(rs, 10.0, 0.2)
    assert exc.value.path == "cluster.pricing.tier"
    assert "% of the time for progress" in exc.value.message
    # The hint names the tiers this profile has.
    assert exc.value.hint is not None and "on_demand or reserved" in exc.value.hint


def test_spot_preemptions_strike_a_job_once_per_node() -> None:
    """A synchronous job stops when any of its nodes is reclaimed: 4 nodes at 1 a day each are
    preempted 4 times a day."""
    four_rs = priced(CLOUD, tier="spot", nodes=4, global_batch=992, spot_preemptions_per_day=fig(1))
    four = cost(four_rs)
    calm4 = cost(priced(CLOUD, tier="spot", nodes=4, global_batch=992))
    g = goodput(4 / 24, checkpoint(four_rs)).goodput
    assert four.time_to_train_days == pytest.approx(calm4.time_to_train_days / g)  # type: ignore[operator]
    assert any("× 4 8-GPU instances" in line for line in four.assumptions)
    # 64 nodes at 1 a day: a preemption every 22.5 minutes, yet checkpoints written every few
    # minutes keep the job moving (a first-order 25 minutes lost per preemption would say
    # more than all of the time is lost).
    big = cost(
        priced(CLOUD, tier="spot", nodes=64, global_batch=1024, spot_preemptions_per_day=fig(1))
    )
    assert any("× 64 8-GPU instances" in line for line in big.assumptions)
    calm64 = cost(priced(CLOUD, tier="spot", nodes=64, global_batch=1024))
    ratio = big.time_to_train_days / calm64.time_to_train_days  # type: ignore[operator]
    assert 1.2 < ratio < 3


def test_the_rest_of_the_platform_interrupts_the_job_too() -> None:
    """Hosts, switches and software stop a synchronous job as a GPU does: their rate adds to
    the GPUs' (one interruption per 1,000 and per 3,000 GPU-hours interrupt as one per 750)."""
    data = copy.deepcopy(_failing(1000.0).raw)
    data["cluster"]["gpu"]["mtbf_other_hours"] = fig(3000.0)
    both = resolve_dict(data)
    combined = _failing(750.0)
    assert cost(both).goodput == pytest.approx(cost(combined).goodput, rel=1e-12)
    assert cost(both).goodput < cost(_failing(1000.0)).goodput
    assert any("other failures (host, network, software)" in a for a in cost(both).assumptions)


def test_the_llama3_interruption_rate_is_reproduced() -> None:
    """The bundled H100 profile's two rates give the Llama 3 paper's 419 interruptions in 54
    days on 16,384 GPUs (Sec. 3.3.4): one every 3.1 hours."""
    from simulator.catalog import load_catalog

    gpu = load_catalog().get("h100-sxm-80gb", "gpu")
    per_hour = 16384 / gpu.mtbf_hours.value + 16384 / gpu.mtbf_other_hours.value  # type: ignore[attr-defined]
    assert per_hour * 54 * 24 == pytest.approx(419, rel=0.02)


def test_a_node_of_several_instances_rents_exactly_its_gpus() -> None:
    """Eight GPUs per node on a 1-GPU instance type (the bundled PCIe scenario) are eight whole
    instances: billed for eight GPUs, nothing unused, no whole-instance note."""
    from conftest import REPO

    from simulator.config.loading import load_scenario

    r = cost(load_scenario(REPO / "scenarios" / "dp-over-pcie.yaml"))
    assert r.usd_per_hour == pytest.approx(8 * 2.86)
    assert not any("whole instances" in a for a in r.assumptions)


def test_the_reliability_figures_are_the_ones_goodput_is_made_of() -> None:
    """The numbers behind goodput, as a planner reads them: the interruption rate is N/MTBF an
    hour, the checkpoint interval near Young's sqrt(2 δ / λ) and a whole number of steps, and
    the expected interruptions that rate over the run's wall time."""
    from simulator.interruptions import run_report

    long_run = copy.deepcopy(_failing(1000.0).raw)
    long_run["run"]["tokens"] = 1e11  # many intervals long: Young's formula is for such runs
    rs = resolve_dict(long_run)
    step = 6.789  # (a step time whose interval in steps is not exact in floating point)
    rep = run_report(rs, step)
    rel = rep.reliability
    assert rel is not None
    lam = rs.gpus / 1000.0
    ck = checkpoint(rs)
    assert rel["interruptions_per_hour"] == pytest.approx(lam)
    assert rel["checkpoint_gb"] == pytest.approx(ck.bytes / 1e9)
    assert rel["checkpoint_write_s"] == pytest.approx(ck.write_s)
    young = (2 * ck.write_s / (lam / 3600.0)) ** 0.5
    assert rel["checkpoint_interval_s"] == pytest.approx(young, rel=0.05)
    steps = rel["checkpoint_interval_steps"]
    assert isinstance(steps, int) and steps * step == pytest.approx(rel["checkpoint_interval_s"])
    assert rel["restart_s"] >= RESTART_MIN * 60
    assert rep.time_to_train_days is not None
    assert rel["expected_interruptions"] == pytest.approx(lam * rep.time_to_train_days * 24)
    # nothing interrupts a run without failure figures: no figures
    assert run_report(priced(CLOUD), step).reliability is None


def test_a_run_shorter_than_the_best_interval_runs_without_checkpoints() -> None:
    """A run short beside the best interval loses less run through without a checkpoint (a
    failure starts it again) than with one every interval: the figures say so, and never an
    interval longer than the run (a review finding: 'every 153.9 min, 4,691 steps' of a
    3,815-step run). Its goodput is the renewal formula for one stretch of the run's work
    with no write, above the long run's, and a one-step run is not refused for a checkpoint
    it need not write (a second review: 0.59% goodput, 'use fewer GPUs')."""
    from simulator.interruptions import run_report

    rs = _failing(1000.0)
    step = 10.0
    long_run = run_report(rs, step).reliability
    assert long_run is not None
    best = long_run["checkpoint_interval_s"]
    assert best is not None
    short = copy.deepcopy(rs.raw)
    steps = int(0.4 * best / step)
    short.setdefault("run", {})["tokens"] = steps * rs.training.tokens_per_step
    rs_short = resolve_dict(short)
    rep = run_report(rs_short, step)
    rel = rep.reliability
    assert rel is not None
    # no interval: none is written inside the run (it had read as one every `steps` steps)
    assert rel["checkpoint_interval_s"] is None and rel["checkpoint_interval_steps"] is None
    one = goodput(rs.gpus / 1000.0, checkpoint(rs), step, steps * step)
    assert rep.goodput == pytest.approx(one.goodput)
    lam, work = rs.gpus / 1000.0 / 3600.0, steps * step
    restart = RESTART_MIN * 60.0 + checkpoint(rs).read_s
    renewal = lam * work / (math.exp(lam * restart) * math.expm1(lam * work))
    assert one.goodput == pytest.approx(renewal)
    assert one.goodput > run_report(rs, step).goodput
    assert any("none is written inside it" in n for n in rep.notes)
    # one step on slow checkpoint storage: no write, no refusal
    tiny = copy.deepcopy(rs.raw)
    tiny.setdefault("run", {})["tokens"] = rs.training.tokens_per_step
    tiny["cluster"]["storage"] = "nfs"
    assert run_report(resolve_dict(tiny), step).goodput > 0.99


def test_a_step_longer_than_the_time_between_interruptions_names_the_batch() -> None:
    """A 16M-token sequence made one step 277 days long: the refusal said to use fewer GPUs
    (which makes the step longer) and blamed cluster.nodes; it names the step and the batch."""
    from conftest import run_cli

    res = run_cli(
        "simulate", "llama3-70b-64xh100", "--set", "training.seq_len=16777216", "--no-scaling"
    )
    assert res.returncode == 2, res.stderr
    said = " ".join(res.stderr.split())
    assert "training.global_batch: one step takes" in said and "between interruptions" in said
    assert "training.seq_len" in said and "Traceback" not in said


def test_on_spot_a_long_step_keeps_the_tier_advice() -> None:
    """A review of the branch above: on spot, preemptions make the time between
    interruptions short, and the way out is another tier, not a smaller batch."""
    from conftest import run_cli

    res = run_cli(
        "simulate",
        "llama3-70b-64xh100",
        "--set",
        "training.seq_len=524288",
        "--set",
        "cluster.pricing.tier=spot",
        "--no-scaling",
    )
    assert res.returncode == 2, res.stderr
    said = " ".join(res.stderr.split())
    assert "cluster.pricing.tier:" in said and "on_demand tier" in said
