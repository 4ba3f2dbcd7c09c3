"""The check that a price profile makes sense for the cluster: its tier, its node size and its
GPU. A failure is one :class:`~simulator.errors.UserError` naming the file, the field path and
what to do."""

from __future__ import annotations

import datetime as dt

from ..errors import UserError
from .hardware import GPUProfile
from .prices import CloudPrice, OwnershipPrice


def check_pricing(
    price: CloudPrice | OwnershipPrice | None,
    tier: str,
    gpu: GPUProfile,
    gpus_per_node: int,
    file: str | None,
) -> None:
    """The price profile against the chosen tier, the cluster's node size and its GPU."""
    if isinstance(price, CloudPrice):
        rates = price.tier_rates()
        if rates[tier] is None:
            have = ", ".join(t for t, r in rates.items() if r is not None)
            raise UserError(
                f"pricing profile '{price.name}' has no {tier} price",
                file=file,
                path="cluster.pricing.tier",
                hint=f"use a tier the profile has ({have}), or add {tier}_usd_per_gpu_hour to "
                "the profile",
            )
    if (
        isinstance(price, OwnershipPrice)
        and price.gpus_per_node is not None
        and price.gpus_per_node.value != gpus_per_node
    ):
        n = f"{price.gpus_per_node.value:g}"
        raise UserError(
            f"pricing profile '{price.name}' prices {n}-GPU nodes but the cluster has "
            f"{gpus_per_node} GPUs per node",
            file=file,
            path="cluster.gpus_per_node",
            hint=f"use {n} GPUs per node, or a price profile for {gpus_per_node}-GPU nodes "
            f"(a copy of {price.name} with that node's capex_per_node_usd and gpus_per_node)",
        )
    if price is not None and price.gpu != gpu.name:
        from ..catalog import load_catalog

        cat = load_catalog()
        if price.gpu not in cat.by_kind("gpu"):
            # the price profile itself names no GPU there is: a typo in its gpu: field
            raise UserError(
                f"pricing profile '{price.name}' is for GPU '{price.gpu}', which no GPU profile is",
                file=str(cat.files.get(price.name, file)),
                path="gpu",
                hint=f"fix the price profile's gpu: field (this cluster's GPU is '{gpu.name}'; "
                "`clustersim profiles list gpu` shows the others)",
            )
        # the same kind (owned or rented) first: an ownership price is swapped for one
        kind = "ownership_price" if price.name in cat.by_kind("ownership_price") else "cloud_price"
        for_gpu = sorted(
            (
                n
                for n, p in cat.by_kind("cloud_price", "ownership_price").items()
                if getattr(p, "gpu", None) == gpu.name
            ),
            key=lambda n: (n not in cat.by_kind(kind), n),
        )
        raise UserError(
            f"pricing profile '{price.name}' is for GPU '{price.gpu}' but the cluster uses "
            f"'{gpu.name}'",
            file=file,
            path="cluster.pricing.profile",
            hint=(
                f"price it with {' or '.join(for_gpu[:4])} (e.g. --set "
                f"cluster.pricing.profile={for_gpu[0]}), or leave it unpriced (--set "
                "cluster.pricing=null)"
                if for_gpu
                else f"no price profile is for {gpu.name}: add one (`clustersim profiles "
                "list` shows the others), or leave it unpriced (--set cluster.pricing=null)"
            ),
        )


__all__ = ["check_pricing"]


# The dearest rented GPU-hour among the bundled price profiles: Azure ND H100 v5 on demand,
# 12.29 $ (hardware_profiles/prices/azure-nd-h100-v5.yaml). Twice that is an instance's hourly
# price typed per GPU, not a dearer part.
MAX_PLAUSIBLE_USD_PER_GPU_HOUR = 25.0
# US industrial electricity averaged 0.0806 $/kWh in 2023 (US EIA, as the ownership profiles
# cite); above 1 $/kWh is a price in cents typed as dollars.
MAX_PLAUSIBLE_USD_PER_KWH = 1.0


def price_slips(price: CloudPrice | OwnershipPrice | None, today: dt.date) -> list[str]:
    """Notes for price figures that are probably a slip (used as given: the notes only ask to
    check them): a per-GPU rate no cloud charges, a discount tier dearer than on demand, cents
    typed as dollars, a quote dated after ``today``."""
    if price is None:
        return []
    out = []
    if price.as_of > today:
        out.append(
            f"pricing profile '{price.name}' is dated {price.as_of}, after today: check as_of"
        )
    if isinstance(price, CloudPrice):
        rates = {t: r.value for t, r in price.tier_rates().items() if r is not None}
        tier, rate = max(rates.items(), key=lambda tr: tr[1])
        if rate > MAX_PLAUSIBLE_USD_PER_GPU_HOUR:  # (one note, for the dearest tier)
            out.append(
                f"pricing profile '{price.name}' charges {rate:g} $ per GPU-hour "
                f"{tier.replace('_', ' ')}, over twice the dearest bundled rate: check it is "
                "per GPU, not the instance's hourly price (divide that by its GPUs)"
            )
        on_demand = rates["on_demand"]
        for tier in ("reserved", "spot"):
            if rates.get(tier, 0.0) > on_demand:
                out.append(
                    f"pricing profile '{price.name}' charges more {tier} ({rates[tier]:g} $ per "
                    f"GPU-hour) than on demand ({on_demand:g}): check the two rates"
                )
    elif price.usd_per_kwh.value > MAX_PLAUSIBLE_USD_PER_KWH:
        out.append(
            f"pricing profile '{price.name}' pays {price.usd_per_kwh.value:g} $ per kWh: check "
            "it is in dollars, not cents (US industrial power averaged 0.08 $/kWh in 2023)"
        )
    return out
