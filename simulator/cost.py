"""Dollars from a simulated step and the scenario's pricing profile.

Two pricing models, chosen by the kind of ``cluster.pricing.profile``:

* **Cloud** (:class:`~simulator.config.hardware.CloudPrice`): every GPU is rented for the whole
  wall time, busy or idle, at the $/GPU-hour of the chosen tier (``on_demand``, ``reserved`` or
  ``spot``).
* **Ownership** (:class:`~simulator.config.hardware.OwnershipPrice`): the run is charged the
  capital cost (nodes plus network ports) amortised linearly over the hardware's life, the
  energy it draws (scaled by GPU utilisation and the facility's PUE) and, where given, a yearly
  operating cost as a fraction of capex.

Either way, interruptions (GPU failures, and spot preemptions) cost checkpoint writes,
restarts and re-done work: the run makes progress a share ``goodput`` of its wall time
(:mod:`simulator.interruptions`).

Everything here is a pure function of a resolved scenario and a few figures from the simulation
(step time, idle fraction, GPU utilisation), cheap enough to call once per point of a sweep.

Definitions used throughout:

* ``usd_per_hour`` is the whole cluster's cost per hour of wall time.
* ``usd_per_step = usd_per_hour · step_time_s / 3600 / goodput``, where ``goodput`` is the
  fraction of wall time that makes progress (below 1 where GPUs fail or spot instances are
  reclaimed), so the per-step and per-token figures are what a *useful* step costs.
* ``usd_per_million_tokens = usd_per_step / tokens_per_step · 1e6``.
* With a token budget (``run.tokens``): ``steps = tokens / tokens_per_step``,
  ``time_to_train = steps · step_time / goodput`` and ``usd_total = steps · usd_per_step``.
* ``usd_idle = (1 - (1 - unused) · goodput · (1 - idle_fraction)) · usd_total``: the dollars
  that bought no useful computation: GPUs idle within a step, the wall time lost to
  interruptions (checkpoint writes, restarts, re-done work), and the share ``unused`` of the
  spend that pays for an owned cluster's or a reserved term's idle hours
  (``cluster.pricing.utilisation`` below 1). The GPUs are paid for whether or not they compute.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from .config.prices import CloudPrice, OwnershipPrice
from .config.scenario import ResolvedScenario
from .errors import UserError
from .interruptions import RunReport, run_report

HOURS_PER_YEAR = 8766.0
"""Hours in an average (Julian) year, 365.25 · 24: amortisation and yearly opex use it."""

IDLE_POWER_FRACTION = 0.3
"""Draw of an idle GPU as a fraction of ``power_per_gpu_w`` (its draw under training load).

An idle H100/A100 with its memory clocks up sits at roughly 60-100 W of a 400-700 W board power,
and a GPU waiting inside a training step (on a collective, a pipeline bubble) is not fully idle:
clocks stay high and communication kernels run. 0.3 sits between those; the per-GPU draw is
``idle + (busy - idle) · utilisation``.
"""

Tier = Literal["on_demand", "reserved", "spot"]


@dataclass(frozen=True)
class CostReport:
    """What a training run costs; every $ figure is in US dollars.

    ``steps``, ``time_to_train_days``, ``usd_total`` and ``usd_idle`` are None when the scenario
    gives no token budget (``run.tokens``).
    """

    model: str
    """``cloud:on_demand``, ``cloud:reserved``, ``cloud:spot`` or ``ownership``."""
    usd_per_gpu_hour: float
    """Effective all-in $ per GPU per hour of wall time."""
    usd_per_hour: float
    """Whole cluster, $ per hour of wall time."""
    usd_per_step: float
    """$ per useful optimizer step (includes the time lost to interruptions)."""
    usd_per_million_tokens: float
    steps: float | None
    time_to_train_days: float | None
    usd_total: float | None
    usd_idle: float | None
    """$ that bought no useful computation over the run: GPUs idle within a step, wall time
    lost to interruptions, and the idle hours an owned cluster or a reserved term carries
    (see the module docstring)."""
    usd_idle_per_step: float
    usd_commitment: float | None = None
    """$ committed whatever the run uses: an owned cluster's purchase price (capex), or a
    reserved term's whole rent; None where the tier bills only the hours used (on-demand, spot)
    or the profile states no term. ``usd_total`` charges the run only its own share of it."""
    goodput: float = 1.0
    """Share of wall time that makes progress (checkpoint writes, restarts and re-done work
    after GPU failures and spot preemptions are the rest)."""
    breakdown: dict[str, float] = field(default_factory=dict)
    """$ per hour by component: ``gpu_rental``, or ``capex``, ``energy`` and ``opex``."""
    assumptions: list[str] = field(default_factory=list)
    """Plain-English lines: the tier, amortisation, PUE, $/kWh, preemption handling..."""

    def as_dict(self) -> dict[str, Any]:
        """Every field, as plain JSON-serialisable values."""
        return dataclasses.asdict(self)


def _power_cap_share(rs: ResolvedScenario) -> float:
    """A board power limit below the TDP lowers the draw under load in proportion: the limit
    binds while the GPU computes, which is when it draws its busy power."""
    lim, tdp = rs.gpu.power_limit_w, rs.gpu.tdp_w.value
    return min(1.0, lim.value / tdp) if lim is not None and tdp > 0 else 1.0


def compute_cost(
    rs: ResolvedScenario,
    step_time_s: float,
    idle_fraction: float,
    gpu_utilisation: float | None = None,
    run: RunReport | None = None,
) -> CostReport | None:
    """The cost of ``rs`` given a simulated step time and the GPUs' idle fraction.

    ``idle_fraction`` is the share of GPU wall time not spent computing (0..1). For ownership
    pricing ``gpu_utilisation`` (0..1) scales the GPUs' power draw; None means
    ``1 - idle_fraction``. Cloud prices ignore it. ``run``: the run's goodput, time to train and
    the lines that explain them, where the caller has them
    (:func:`simulator.interruptions.run_report`); None works them out.

    Returns None when the scenario has no pricing profile. Raises :class:`UserError` when the
    chosen cloud tier is missing from the profile, or when the profile's figures make the cost
    undefined (zero amortisation period, spot preemptions too frequent for any progress).
    """
    if rs.price is None:
        return None
    if not step_time_s > 0:
        raise ValueError(f"step_time_s must be positive (got {step_time_s})")
    if not 0.0 <= idle_fraction <= 1.0:
        raise ValueError(f"idle_fraction must be within 0..1 (got {idle_fraction})")
    if gpu_utilisation is not None and not 0.0 <= gpu_utilisation <= 1.0:
        raise ValueError(f"gpu_utilisation must be within 0..1 (got {gpu_utilisation})")

    if isinstance(rs.price, CloudPrice):
        model, usd_per_hour, breakdown, assumptions = _cloud(rs, rs.price)
    else:
        util = gpu_utilisation if gpu_utilisation is not None else 1.0 - idle_fraction
        model, usd_per_hour, breakdown, assumptions = _ownership(rs, rs.price, util)
        if rs.price_tier != "on_demand":
            assumptions.append(
                f"cluster.pricing.tier ({rs.price_tier}) is a cloud price tier: an owned "
                "cluster has none, so it is ignored"
            )
    if run is None:
        run = run_report(rs, step_time_s)
    goodput = run.goodput
    assumptions += run.notes
    assumptions += _outlasts(rs, run.time_to_train_days)

    tokens_per_step = rs.training.tokens_per_step
    usd_per_step = usd_per_hour * step_time_s / 3600.0 / goodput
    # The part of each hour's price that pays for hours nobody uses (utilisation below 1).
    kept = rs.price_utilisation
    carried = breakdown.get("capex", 0.0) + breakdown.get("opex", 0.0)
    if model == "cloud:reserved":
        carried = usd_per_hour
    unused = (1.0 - kept) * carried / usd_per_hour if usd_per_hour > 0 else 0.0
    if isinstance(rs.price, CloudPrice):
        # GPUs of a rented instance the job leaves unused buy nothing either.
        instances, size = rs.price.instances(rs.nodes, rs.gpus_per_node)
        unused = 1.0 - (1.0 - unused) * rs.gpus / (instances * size)
    wasted = 1.0 - (1.0 - unused) * goodput * (1.0 - idle_fraction)
    usd_per_million_tokens = usd_per_step / tokens_per_step * 1e6

    steps: float | None = None
    total: float | None = None
    idle: float | None = None
    if rs.run.tokens is not None:
        steps = rs.run.tokens / tokens_per_step
        total = steps * usd_per_step
        idle = wasted * total
    assumptions.append(
        f"idle cost: {idle_fraction:.1%} of GPU time within a step is idle"
        + (
            f", and {1.0 - goodput:.1%} of wall time is lost to interruptions"
            if goodput < 1.0
            else ""
        )
        + (f", and {unused:.1%} of the price pays for unused hours or GPUs" if unused > 0 else "")
        + f", so {wasted:.1%} of the spend buys no useful computation"
    )

    return CostReport(
        usd_commitment=_commitment(rs),
        model=model,
        usd_per_gpu_hour=usd_per_hour / rs.gpus,
        usd_per_hour=usd_per_hour,
        usd_per_step=usd_per_step,
        usd_per_million_tokens=usd_per_million_tokens,
        steps=steps,
        time_to_train_days=run.time_to_train_days,
        usd_total=total,
        usd_idle=idle,
        usd_idle_per_step=wasted * usd_per_step,
        goodput=goodput,
        breakdown=breakdown,
        assumptions=assumptions,
    )


def _commitment(rs: ResolvedScenario) -> float | None:
    price = rs.price
    if isinstance(price, OwnershipPrice):
        return _capex(rs, price)[0]
    if isinstance(price, CloudPrice) and rs.price_tier == "reserved":
        years = price.reserved_term_years
        if years is None:
            return None
        term = years.value
        instances, size = price.instances(rs.nodes, rs.gpus_per_node)
        return _tier_rate(price, "reserved") * instances * size * term * HOURS_PER_YEAR
    return None


def _capex(rs: ResolvedScenario, price: OwnershipPrice) -> tuple[float, int]:
    """The cluster's purchase price and its network ports."""
    # A single node needs no network between nodes, whatever the scenario lists.
    ports = rs.nodes * rs.nics_per_node if rs.network is not None and rs.nodes > 1 else 0
    capex = (
        rs.nodes * price.capex_per_node_usd.value + ports * price.capex_per_network_port_usd.value
    )
    return capex, ports


def _outlasts(rs: ResolvedScenario, days: float | None) -> list[str]:
    """A note where the run lasts longer than what its price assumes: the owned hardware's
    amortisation life (the capex charged then exceeds the purchase price) or the reserved
    term (the rate then needs a second commitment)."""
    if days is None:
        return []
    years = days / (HOURS_PER_YEAR / 24.0)
    price = rs.price
    util = rs.price_utilisation
    if isinstance(price, OwnershipPrice) and price.amortisation_years.value > 0:
        life = price.amortisation_years.value
        charged = years / (life * util)
        if years > life:
            return [
                f"the run ({days:,.1f} days) outlasts the hardware's {life:g}-year "
                f"amortisation: it is charged {charged:.2f}× the purchase price (a longer "
                "amortisation_years, or more GPUs, lowers it)"
            ]
        if charged > 1.0:
            return [
                f"the run ({days:,.1f} days, {years / life:.1%} of the hardware's {life:g}-year "
                f"life) is charged {charged:.2f}× the purchase price: "
                f"cluster.pricing.utilisation ({util:g}) says the cluster is busy only "
                f"{util:.0%} of its life, less than this run alone takes"
            ]
    held = price.reserved_term_years if isinstance(price, CloudPrice) else None
    term = held.value if held is not None else None
    if rs.price_tier == "reserved" and term is not None:
        if years > term:
            return [
                f"the run ({days:,.1f} days) outlasts the {term:g}-year reserved term: it "
                "needs a second commitment, priced here at the same rate"
            ]
        if years > term * util:
            return [
                f"the run ({days:,.1f} days, {years / term:.1%} of the {term:g}-year reserved "
                f"term) is charged {years / (term * util):.2f}× the term's rent: "
                f"cluster.pricing.utilisation ({util:g}) says the term is used only "
                f"{util:.0%}, less than this run alone takes"
            ]
    return []


_Parts = tuple[str, float, dict[str, float], list[str]]
"""model name, $ per cluster-hour, breakdown, assumption lines."""


def _tier_rate(price: CloudPrice, tier: Tier) -> float:
    rate = price.tier_rates()[tier]
    assert rate is not None, "a tier the profile lacks is refused when the scenario resolves"
    return rate.value


def usd_per_hour_floor(rs: ResolvedScenario) -> float:
    """The lowest hourly price ``rs``'s cluster has whatever plan runs on it: the cloud rate,
    or an owned cluster's with its GPUs drawing idle power (0 without a price)."""
    if rs.price is None:
        return 0.0
    if isinstance(rs.price, CloudPrice):
        return _cloud(rs, rs.price)[1]
    return _ownership(rs, rs.price, 0.0)[1]


def _cloud(rs: ResolvedScenario, price: CloudPrice) -> _Parts:
    tier: Tier = rs.price_tier
    rate = _tier_rate(price, tier)
    instances, size = price.instances(rs.nodes, rs.gpus_per_node)
    billed = instances * size
    usd_per_hour = rate * billed
    assumptions = [
        f"cloud rental: {price.provider} {price.instance} ({price.name}), {tier} tier at "
        f"${rate:.2f} per GPU-hour, price as of {price.as_of.isoformat()}",
        f"all {billed} GPUs are billed for the whole wall time, busy or idle",
    ]
    if billed > rs.gpus:
        assumptions.append(
            f"a cloud rents whole instances: each {rs.gpus_per_node}-GPU node takes "
            f"{instances // rs.nodes} whole {size}-GPU {price.instance}, so {billed} GPUs are "
            f"billed for the {rs.gpus} the job uses (set cluster.gpus_per_node to a multiple "
            f"of {size}, or price a {rs.gpus_per_node}-GPU instance)"
        )
    elif rs.gpus_per_node > size:
        assumptions.append(
            f"each {rs.gpus_per_node}-GPU node is priced as {rs.gpus_per_node // size} "
            f"instances of {price.instance} ({size} GPU each): separate instances do not "
            f"share the node's {rs.fabric.display_name} as the simulated node does (price an "
            f"instance of {rs.gpus_per_node} GPUs for a like-for-like rate)"
        )
    kept = rs.price_utilisation  # share of the reserved term in use
    if tier == "reserved":
        term = (
            f"a {price.reserved_term_years.value:g}-year commitment"
            if price.reserved_term_years is not None
            else "a commitment"
        )
        if kept < 1.0:
            usd_per_hour /= kept
            assumptions.append(
                f"reserved price assumes {term}, kept busy {kept:.0%} of the time: each hour "
                f"used carries {1 / kept - 1:.2f} idle hours, ${rate / kept:.2f} per GPU-hour used"
            )
        else:
            assumptions.append(
                f"reserved price assumes {term}; the run is charged only its own hours of it "
                "(as if the rest of the term is used by other work: cluster.pricing.utilisation)"
            )
    elif kept < 1.0:
        assumptions.append(
            f"{tier} bills only the hours used: cluster.pricing.utilisation ({kept:.0%}) does "
            "not apply"
        )
    return f"cloud:{tier}", usd_per_hour, {"gpu_rental": usd_per_hour}, assumptions


def _ownership(rs: ResolvedScenario, price: OwnershipPrice, util: float) -> _Parts:
    years = price.amortisation_years.value
    if years <= 0:
        raise UserError(
            f"amortisation_years must be positive (got {years:g})",
            path="cluster.pricing.profile.amortisation_years",
            hint="set the hardware's depreciation period in years, e.g. 4",
        )
    capex, ports = _capex(rs, price)
    kept = rs.price_utilisation  # share of the cluster's life in use (util: its GPUs' load)
    capex_h = capex / (years * HOURS_PER_YEAR * kept)

    busy_w = price.power_per_gpu_w.value
    # An idle GPU draws far below any limit: the limit clips the busy draw only.
    idle_w = IDLE_POWER_FRACTION * busy_w
    capped = _power_cap_share(rs)
    busy_w = max(idle_w, busy_w * capped)
    gpu_w = idle_w + (busy_w - idle_w) * util
    it_w = rs.gpus * gpu_w + rs.nodes * price.power_per_node_w.value
    pue = price.pue.value
    kwh_price = price.usd_per_kwh.value
    energy_h = it_w * pue / 1000.0 * kwh_price

    breakdown = {"capex": capex_h, "energy": energy_h}
    assumptions = [
        f"ownership ({price.name}, prices as of {price.as_of.isoformat()}): capex "
        f"${capex:,.0f} = {rs.nodes} nodes × ${price.capex_per_node_usd.value:,.0f} + "
        f"{ports} network ports × ${price.capex_per_network_port_usd.value:,.0f}",
        f"capex amortised linearly over {years:g} years ({HOURS_PER_YEAR:g} h a year), "
        + (
            "the run charged for the hours it uses, as if the cluster is kept busy the rest of "
            "its life (cluster.pricing.utilisation: 1)"
            if kept >= 1.0
            else f"the cluster kept busy {kept:.0%} of its life, so each hour used carries "
            f"{1 / kept - 1:.2f} idle hours of capex and opex"
        ),
        f"energy: GPUs draw {idle_w:.0f} W idle ({IDLE_POWER_FRACTION:g} of "
        f"{price.power_per_gpu_w.value:.0f} W) and {busy_w:.0f} W busy"
        + (
            f" (the price's {price.power_per_gpu_w.value:.0f} W at the GPU's "
            f"{rs.gpu.tdp_w.value:.0f} W TDP scaled to its {capped * rs.gpu.tdp_w.value:.0f} W "
            "power limit)"
            if capped < 1.0
            else ""
        )
        + f", {gpu_w:.0f} W on average at {util:.1%} utilisation, plus "
        f"{price.power_per_node_w.value:.0f} W per node; {it_w / 1000:.2f} kW IT load × PUE "
        f"{pue:g} at ${kwh_price:g}/kWh",
    ]
    if price.opex_fraction_per_year is not None:
        frac = price.opex_fraction_per_year.value
        breakdown["opex"] = frac * capex / (HOURS_PER_YEAR * kept)
        assumptions.append(f"opex (maintenance, staff, space): {frac:.1%} of capex per year")
    else:
        assumptions.append("no opex figure given: maintenance, staff and space are not included")
    usd_per_hour = sum(breakdown.values())
    return "ownership", usd_per_hour, breakdown, assumptions
