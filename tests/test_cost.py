"""Cost model: cloud tiers, spot preemptions, ownership (capex, energy, opex), idle dollars.

Scenarios are real resolved scenarios with inline profiles (no catalogue needed); the expected
figures are worked out by hand in the comments.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import fig, inline_scenario

from simulator.config.loading import resolve_dict
from simulator.config.scenario import ResolvedScenario
from simulator.cost import (
    CostReport,
    compute_cost,
)
from simulator.errors import UserError

GPU_NAME = "test-gpu-80gb"  # the inline GPU in conftest.py

CLOUD: dict[str, Any] = {
    "kind": "cloud_price",
    "name": "test-cloud",
    "display_name": "Test cloud 8-GPU instance",
    "provider": "testcloud",
    "instance": "gpu8.test",
    "gpu": GPU_NAME,
    "as_of": "2025-01-01",
    "on_demand_usd_per_gpu_hour": fig(2.0),
    "reserved_usd_per_gpu_hour": fig(1.5),
    "reserved_term_years": 1,
    "spot_usd_per_gpu_hour": fig(0.8),
}

OWNED: dict[str, Any] = {
    "kind": "ownership_price",
    "name": "test-owned",
    "display_name": "Test owned cluster",
    "gpu": GPU_NAME,
    "as_of": "2025-01-01",
    "capex_per_node_usd": fig(300_000),
    "capex_per_network_port_usd": fig(2_000),
    "power_per_gpu_w": fig(700),
    "power_per_node_w": fig(1_500),
    "pue": fig(1.25),
    "usd_per_kwh": fig(0.10),
    "amortisation_years": fig(4),
    "opex_fraction_per_year": fig(0.05),
}


def priced(
    price: dict[str, Any] | None,
    *,
    tier: str | None = None,
    tokens: float | None = 1e9,
    nodes: int = 1,
    seq_len: int = 1000,
    global_batch: int = 1000,
    **price_fields: Any,
) -> ResolvedScenario:
    """A resolved 8-GPU-per-node scenario with an inline price profile (1M tokens per step)."""
    data = inline_scenario(nodes=nodes, seq_len=seq_len, global_batch=global_batch)
    if price is not None:
        profile = {**copy.deepcopy(price), **price_fields}
        pricing: dict[str, Any] = {"profile": profile}
        if tier is not None:
            pricing["tier"] = tier
        data["cluster"]["pricing"] = pricing
    if tokens is not None:
        data["run"] = {"tokens": tokens}
    return resolve_dict(data)


def cost(rs: ResolvedScenario, step: float = 10.0, idle: float = 0.25, **kw: Any) -> CostReport:
    report = compute_cost(rs, step, idle, **kw)
    assert report is not None
    return report


# --- cloud -----------------------------------------------------------------------------------


def test_cloud_on_demand_hand_computed() -> None:
    rs = priced(CLOUD)
    assert rs.gpus == 8 and rs.training.tokens_per_step == 1_000_000
    r = cost(rs, step=10.0, idle=0.25)
    # 8 GPUs × $2/GPU-h = $16/h; a 10 s step costs 16 · 10 / 3600 = $0.0444.
    assert r.model == "cloud:on_demand"
    assert r.usd_per_gpu_hour == pytest.approx(2.0)
    assert r.usd_per_hour == pytest.approx(16.0)
    assert r.breakdown == pytest.approx({"gpu_rental": 16.0})
    assert r.usd_per_step == pytest.approx(0.044444, rel=1e-4)
    # 1M tokens per step, so $ per million tokens equals $ per step.
    assert r.usd_per_million_tokens == pytest.approx(0.044444, rel=1e-4)
    # 1e9 tokens / 1e6 per step = 1000 steps × 10 s = 10 000 s = 0.1157 days; $44.44 in all.
    assert r.steps == pytest.approx(1000)
    assert r.time_to_train_days == pytest.approx(10_000 / 86_400)
    assert r.usd_total == pytest.approx(44.444, rel=1e-4)
    # A quarter of the GPU time idle: $11.11 of it, $0.0111 a step.
    assert r.usd_idle == pytest.approx(11.111, rel=1e-4)
    assert r.usd_idle_per_step == pytest.approx(0.011111, rel=1e-4)
    assert any("on_demand" in line and "$2.00" in line for line in r.assumptions)


def test_doubling_step_time_doubles_cost_per_step() -> None:
    rs = priced(CLOUD)
    a, b = cost(rs, step=7.0), cost(rs, step=14.0)
    assert b.usd_per_hour == pytest.approx(a.usd_per_hour)
    assert b.usd_per_step == pytest.approx(2 * a.usd_per_step)
    assert b.usd_per_million_tokens == pytest.approx(2 * a.usd_per_million_tokens)
    assert b.usd_total == pytest.approx(2 * a.usd_total)  # type: ignore[operator]
    assert b.time_to_train_days == pytest.approx(2 * a.time_to_train_days)  # type: ignore[operator]
    assert b.steps == a.steps


@pytest.mark.parametrize("idle", [0.0, 0.1, 0.5, 1.0])
@pytest.mark.parametrize("price", [CLOUD, OWNED], ids=["cloud", "ownership"])
def test_idle_dollars_without_interruptions(idle: float, price: dict[str, Any]) -> None:
    r = cost(priced(price), step=3.0, idle=idle)
    assert r.usd_total is not None and r.usd_idle is not None
    assert r.usd_idle == pytest.approx(idle * r.usd_total)
    assert r.usd_idle_per_step == pytest.approx(idle * r.usd_per_step)


@pytest.mark.parametrize(("tier", "rate"), [("on_demand", 2.0), ("reserved", 1.5), ("spot", 0.8)])
def test_cloud_tier_picks_its_rate(tier: str, rate: float) -> None:
    r = cost(priced(CLOUD, tier=tier))
    assert r.model == f"cloud:{tier}"
    assert r.usd_per_gpu_hour == pytest.approx(rate)
    assert r.usd_per_hour == pytest.approx(8 * rate)


def test_tier_chosen_with_set_override() -> None:
    data = inline_scenario(seq_len=1000, global_batch=1000)
    data["cluster"]["pricing"] = {"profile": copy.deepcopy(CLOUD)}
    rs = resolve_dict(data, sets=["cluster.pricing.tier=reserved"])
    assert cost(rs).usd_per_gpu_hour == pytest.approx(1.5)


def test_missing_tier_is_a_user_error_naming_the_tiers() -> None:
    # Refused when the scenario is resolved, before anything is simulated.
    with pytest.raises(UserError) as exc:
        rs = priced(CLOUD, tier="reserved", reserved_usd_per_gpu_hour=None)
        compute_cost(rs, 10.0, 0.2)
    err = exc.value
    assert err.path == "cluster.pricing.tier"
    assert "reserved" in err.message
    assert err.hint is not None and "on_demand" in err.hint and "spot" in err.hint


def _kept(rs: ResolvedScenario, share: float) -> ResolvedScenario:
    data = copy.deepcopy(rs.raw)
    data["cluster"]["pricing"]["utilisation"] = share
    return resolve_dict(data)


def test_a_reserved_term_used_in_part_costs_more_per_hour_used() -> None:
    full = cost(priced(CLOUD, tier="reserved"))
    quarter = cost(_kept(priced(CLOUD, tier="reserved"), 0.25))
    assert quarter.usd_per_gpu_hour == pytest.approx(4 * full.usd_per_gpu_hour)
    # On demand bills only the hours used: the share changes nothing, and says so.
    od = cost(_kept(priced(CLOUD), 0.25))
    assert od.usd_per_gpu_hour == pytest.approx(2.0)
    assert any("does not apply" in a for a in od.assumptions)


# --- general ---------------------------------------------------------------------------------


def test_no_price_gives_none() -> None:
    rs = priced(None)
    assert rs.price is None
    assert compute_cost(rs, 10.0, 0.2) is None


def test_without_token_budget_run_totals_are_none() -> None:
    r = cost(priced(CLOUD, tokens=None))
    assert r.steps is None and r.time_to_train_days is None
    assert r.usd_total is None and r.usd_idle is None
    assert r.usd_per_step == pytest.approx(16 * 10 / 3600)
    assert r.usd_idle_per_step == pytest.approx(0.25 * 16 * 10 / 3600)


@pytest.mark.parametrize("price", [CLOUD, OWNED], ids=["cloud", "ownership"])
def test_as_dict_is_json_and_complete(price: dict[str, Any]) -> None:
    r = cost(priced(price))
    d = r.as_dict()
    assert set(d) == {
        "model",
        "usd_per_gpu_hour",
        "usd_per_hour",
        "usd_per_step",
        "usd_per_million_tokens",
        "steps",
        "time_to_train_days",
        "usd_total",
        "usd_idle",
        "usd_idle_per_step",
        "usd_commitment",
        "goodput",
        "breakdown",
        "assumptions",
    }
    assert json.loads(json.dumps(d)) == d
    assert sum(d["breakdown"].values()) == pytest.approx(d["usd_per_hour"])
    assert all(isinstance(line, str) and line for line in d["assumptions"])


@pytest.mark.parametrize(
    ("step", "idle", "util"),
    [(0.0, 0.1, None), (-1.0, 0.1, None), (1.0, 1.5, None), (1.0, -0.1, None), (1.0, 0.1, 1.2)],
)
def test_bad_simulation_figures_are_rejected(step: float, idle: float, util: float | None) -> None:
    with pytest.raises(ValueError):
        compute_cost(priced(OWNED), step, idle, util)


def test_a_run_longer_than_the_hardware_life_or_the_reserved_term_says_so() -> None:
    """Owned hardware amortised over less time than the run charges more than its purchase
    price; a run longer than a reserved term needs another. Both are named, with the ratio."""
    rs = priced(OWNED, amortisation_years=fig(0.1))
    data = copy.deepcopy(rs.raw)
    data["run"] = {"tokens": 1e12}
    long = resolve_dict(data)
    r = cost(long, step=10.0)
    days = r.time_to_train_days
    assert days is not None and days / 365.25 > 0.1
    note = [a for a in r.assumptions if "outlasts" in a]
    assert len(note) == 1 and f"{days / 365.25 / 0.1:.2f}×" in note[0]
    short = cost(priced(OWNED), step=10.0)
    assert not any("outlasts" in a for a in short.assumptions)
    data = copy.deepcopy(priced(CLOUD, tier="reserved").raw)
    data["run"] = {"tokens": 1e13}  # ~3 years at this step time, past the 1-year term
    r = cost(resolve_dict(data), step=10.0)
    assert any("outlasts the 1-year reserved term" in a for a in r.assumptions)


def test_a_run_that_alone_exceeds_the_utilisation_it_assumes_says_so() -> None:
    """Capex is charged per hour at capex / (life x utilisation): a run that takes more of the
    hardware's life than the utilisation allows is charged more than the purchase price, and
    a reserved term's rent likewise. Both say so, with the ratio; a run within it does not."""
    data = copy.deepcopy(priced(OWNED, amortisation_years=fig(4)).raw)
    data["run"] = {"tokens": 1e12}
    data["cluster"]["pricing"]["utilisation"] = 0.05
    r = cost(resolve_dict(data), step=10.0)
    days = r.time_to_train_days
    assert days is not None and 0.05 < days / 365.25 / 4 < 1
    note = [a for a in r.assumptions if "utilisation (0.05)" in a]
    assert len(note) == 1 and f"{days / 365.25 / 4 / 0.05:.2f}× the purchase price" in note[0]
    data["cluster"]["pricing"]["utilisation"] = 1.0
    assert not any("utilisation (" in a for a in cost(resolve_dict(data), step=10.0).assumptions)
    data = copy.deepcopy(priced(CLOUD, tier="reserved").raw)
    data["run"] = {"tokens": 2e12}  # ~0.6 years at this step time, within the 1-year term
    data["cluster"]["pricing"]["utilisation"] = 0.3
    r = cost(resolve_dict(data), step=10.0)
    assert any("of the 1-year reserved term) is charged" in a for a in r.assumptions)


def test_the_table_shows_how_the_cost_was_reached() -> None:
    """The cost table is followed by its assumptions (the JSON's ``cost.assumptions``): a
    4-GPU node billed as a whole 8-GPU instance says so where the user reads $ per GPU-hour."""
    from conftest import run_cli

    r = run_cli(
        "simulate",
        "llama3-70b-64xh100",
        "--set",
        "cluster.pricing=lambda-h100-sxm",
        "--set",
        "cluster.gpus_per_node=4",
        "--set",
        "parallelism.tp=4",
    )
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "whole" in text and "instance" in text and "idle cost:" in text


def test_a_node_larger_than_the_instance_says_its_fabric_is_not_what_is_priced() -> None:
    """Eight 1-GPU cloud instances do not make one 8-GPU node: the price holds, but the note
    says the simulated node's fabric is not what those instances have."""
    from simulator.config.loading import load_scenario

    rs = load_scenario(Path(__file__).parents[1] / "scenarios" / "dp-over-pcie.yaml")
    r = compute_cost(rs, 1.0, 0.1)
    assert r is not None
    assert any("separate instances do not share" in a for a in r.assumptions)
    assert not any("separate instances" in a for a in cost(priced(CLOUD)).assumptions)
