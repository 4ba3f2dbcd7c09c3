"""Price profile schema: what a GPU-hour costs rented from a cloud (by tier), or what owning the
cluster costs (capex amortised, energy, opex). Every figure is sourced, as in :mod:`.hardware`."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from .sourced import Num, _Profile


def _a_date(v: Any) -> Any:
    """A date written as one (YAML reads 2024-08-22 as a date): a number such as 20240822 would
    be taken for seconds since 1970."""
    if (isinstance(v, int | float) and not isinstance(v, bool)) or (
        isinstance(v, str) and v.strip().isdigit()
    ):
        raise ValueError("write the date as YYYY-MM-DD, e.g. 2024-08-22")
    return v


AsOf = Annotated[dt.date, BeforeValidator(_a_date)]


class CloudPrice(_Profile):
    kind: Literal["cloud_price"] = "cloud_price"
    provider: str = Field(max_length=200)
    instance: str = Field(max_length=200)
    gpu: str = Field(description="GPU profile name this price is for")
    as_of: AsOf
    on_demand_usd_per_gpu_hour: Num
    reserved_usd_per_gpu_hour: Num | None = None
    reserved_term_years: Num | None = Field(
        default=None, description="years the reserved rate commits to"
    )
    spot_usd_per_gpu_hour: Num | None = None
    spot_preemptions_per_day: Num | None = Field(
        default=None,
        description="preemptions per day of one spot instance (node); a synchronous job is "
        "interrupted when any of its nodes is",
    )
    gpus_per_node: Num | None = Field(
        default=None,
        description="GPUs in the instance the prices are quoted for: each node rents whole "
        "instances (a node smaller than one pays for all its GPUs) and preemptions strike per "
        "instance (none: an instance is one of the cluster's nodes)",
    )

    def instances(self, nodes: int, gpus_per_node: int) -> tuple[int, int]:
        """(instances rented, GPUs in each) for ``nodes`` nodes of ``gpus_per_node``: a cloud
        rents whole instances, so a node smaller than the instance still takes (and pays for)
        a whole one, and a larger node is as many instances as it needs."""
        size = gpus_per_node if self.gpus_per_node is None else round(self.gpus_per_node.value)
        size = max(1, size)
        return nodes * -(-gpus_per_node // size), size

    def tier_rates(self) -> dict[str, Num | None]:
        """$ per GPU-hour by tier (None: the profile has no such tier)."""
        return {
            "on_demand": self.on_demand_usd_per_gpu_hour,
            "reserved": self.reserved_usd_per_gpu_hour,
            "spot": self.spot_usd_per_gpu_hour,
        }


class OwnershipPrice(_Profile):
    kind: Literal["ownership_price"] = "ownership_price"
    gpu: str = Field(description="GPU profile name this price is for")
    as_of: AsOf
    capex_per_node_usd: Num = Field(description="server with GPUs, CPUs, memory, local disk")
    capex_per_network_port_usd: Num = Field(description="NIC + switch port + cable share")
    power_per_gpu_w: Num = Field(
        description="draw per GPU while it computes (its board power under a training "
        "kernel, with its share of the host): the cost model takes 0.3 of it for the step's "
        "idle share, so give the computing draw, not a run's average"
    )
    power_per_node_w: Num = Field(description="non-GPU draw per node: CPUs, fans, NICs")
    pue: Num
    usd_per_kwh: Num
    amortisation_years: Num
    opex_fraction_per_year: Num | None = Field(
        default=None, description="maintenance/staff/space per year as a fraction of capex"
    )
    gpus_per_node: Num | None = Field(
        default=None,
        description="GPUs in the node capex_per_node_usd buys: a cluster of other node sizes "
        "is refused (none: not checked)",
    )
