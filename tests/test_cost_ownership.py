"""Cost model, ownership: capex per node and network port, amortisation, energy that follows
utilisation, opex, the share of its life a cluster is busy, and what ownership refuses.
Helpers and profiles: test_cost.py."""

from __future__ import annotations

import copy

import pytest
from conftest import fig
from test_cost import OWNED, _kept, cost, priced

from simulator.config.loading import resolve_dict
from simulator.cost import HOURS_PER_YEAR, IDLE_POWER_FRACTION
from simulator.errors import UserError


def test_an_owned_cluster_busy_part_of_its_life_charges_the_idle_rest() -> None:
    full = cost(priced(OWNED))
    half = cost(_kept(priced(OWNED), 0.5))
    assert half.breakdown["capex"] == pytest.approx(2 * full.breakdown["capex"])
    assert half.breakdown["opex"] == pytest.approx(2 * full.breakdown["opex"])
    assert half.breakdown["energy"] == pytest.approx(full.breakdown["energy"])  # only when on
    assert half.time_to_train_days == full.time_to_train_days
    assert any("busy 50% of its life" in a for a in half.assumptions)
    # The idle half of capex and opex is spend that buys no computation.
    unused = 0.5 * (half.breakdown["capex"] + half.breakdown["opex"]) / half.usd_per_hour
    assert half.usd_idle == pytest.approx(  # idle within a step: 0.25
        (1 - (1 - unused) * half.goodput * 0.75) * half.usd_total  # type: ignore[operator]
    )


def test_ownership_refuses_a_node_size_it_does_not_price() -> None:
    data = copy.deepcopy(priced(OWNED, gpus_per_node=fig(8)).raw)
    data["cluster"].update(gpus_per_node=4, nodes=2)
    data["cluster"]["network"] = {"profile": "ib-ndr-400", "nics_per_node": 4}
    with pytest.raises(UserError) as exc:
        resolve_dict(data)
    assert exc.value.path == "cluster.gpus_per_node" and "8-GPU nodes" in exc.value.message


def test_one_owned_node_buys_no_network_ports() -> None:
    data = copy.deepcopy(priced(OWNED).raw)
    data["cluster"]["network"] = {"profile": "ib-ndr-400", "nics_per_node": 8}
    with_net = cost(resolve_dict(data))
    assert with_net.breakdown["capex"] == pytest.approx(cost(priced(OWNED)).breakdown["capex"])


def test_ownership_hand_computed() -> None:
    # 2 nodes × 8 GPUs, 8 NICs a node.
    rs = priced(OWNED, nodes=2, global_batch=2000)
    assert rs.gpus == 16 and rs.nics_per_node == 8
    r = cost(rs, step=10.0, idle=0.2)  # utilisation defaults to 1 - 0.2 = 0.8
    assert r.model == "ownership"
    # capex = 2 × $300 000 + 16 ports × $2 000 = $632 000, over 4 years of 8766 h: $18.024/h.
    capex_h = 632_000 / (4 * 8766)
    # GPU draw: idle 0.3 × 700 = 210 W; 210 + (700 - 210) × 0.8 = 602 W; 16 GPUs = 9632 W,
    # + 2 nodes × 1500 W = 12 632 W; × PUE 1.25 = 15.79 kW; × $0.10/kWh = $1.579/h.
    energy_h = 1.579
    # opex 5 % of capex a year: 0.05 × 632 000 / 8766 = $3.605/h.
    opex_h = 0.05 * 632_000 / 8766
    assert r.breakdown["capex"] == pytest.approx(capex_h)
    assert r.breakdown["capex"] == pytest.approx(18.0242, rel=1e-5)
    assert r.breakdown["energy"] == pytest.approx(energy_h)
    assert r.breakdown["opex"] == pytest.approx(opex_h)
    assert r.breakdown["opex"] == pytest.approx(3.60484, rel=1e-5)
    total_h = capex_h + energy_h + opex_h  # ≈ $23.208/h
    assert r.usd_per_hour == pytest.approx(total_h)
    assert r.usd_per_gpu_hour == pytest.approx(total_h / 16)
    assert r.usd_per_step == pytest.approx(total_h * 10 / 3600)
    # 2M tokens per step.
    assert r.usd_per_million_tokens == pytest.approx(total_h * 10 / 3600 / 2)
    assert r.steps == pytest.approx(500)
    assert r.usd_total == pytest.approx(500 * total_h * 10 / 3600)
    text = " ".join(r.assumptions)
    assert "PUE 1.25" in text and "4 years" in text and "$0.1/kWh" in text


def test_ownership_single_node_without_network_has_no_port_capex() -> None:
    rs = priced(OWNED, opex_fraction_per_year=None)
    assert rs.network is None
    r = cost(rs, idle=0.0)
    assert r.breakdown["capex"] == pytest.approx(300_000 / (4 * HOURS_PER_YEAR))
    assert set(r.breakdown) == {"capex", "energy"}  # no opex figure, no opex line
    # Fully busy: 8 × 700 W + 1500 W = 7.1 kW × 1.25 × $0.10.
    assert r.breakdown["energy"] == pytest.approx(7.1 * 1.25 * 0.10)
    assert any("opex" in line and "not included" in line for line in r.assumptions)


def test_ownership_energy_follows_utilisation() -> None:
    rs = priced(OWNED)
    busy = cost(rs, gpu_utilisation=1.0)
    idle = cost(rs, gpu_utilisation=0.0)
    default = cost(rs, idle=0.4)
    explicit = cost(rs, idle=0.4, gpu_utilisation=0.6)
    assert default.breakdown["energy"] == pytest.approx(explicit.breakdown["energy"])
    assert idle.breakdown["energy"] < default.breakdown["energy"] < busy.breakdown["energy"]
    # Idle GPUs draw 0.3 of the busy figure; nodes draw the same either way.
    gpu_busy = 8 * 700 * 1.25 / 1000 * 0.10
    node = 1500 * 1.25 / 1000 * 0.10
    assert busy.breakdown["energy"] == pytest.approx(gpu_busy + node)
    assert idle.breakdown["energy"] == pytest.approx(IDLE_POWER_FRACTION * gpu_busy + node)
    assert busy.breakdown["capex"] == pytest.approx(idle.breakdown["capex"])


def test_ownership_ignores_cloud_tier() -> None:
    a = cost(priced(OWNED))
    b = cost(priced(OWNED, tier="spot"))
    assert a.usd_per_hour == pytest.approx(b.usd_per_hour) and b.model == "ownership"
    assert any("tier (spot)" in x and "ignored" in x for x in b.assumptions)
    assert not any("tier (" in x for x in a.assumptions)


def test_ownership_zero_amortisation_is_a_user_error() -> None:
    with pytest.raises(UserError) as exc:
        priced(OWNED, amortisation_years=fig(0))
    assert exc.value.path == "cluster.pricing.profile.amortisation_years"
    assert "amortisation_years must be within" in exc.value.message
