"""The cluster section of a scenario as a user writes it: profiles by name (or inline, or a
name with fields overridden), the network's topology, and the price model."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from .parallelism import kind_shorthand

MAX_NODES = 100_000


class ProfileRef(BaseModel):
    """A catalogue profile by name, with any of its fields overridden inline.

    Without ``profile`` the object must be a complete profile of the expected kind.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    profile: str | None = Field(
        default=None, max_length=200, description="name in hardware_profiles/"
    )


Ref = Annotated[str, Field(max_length=200)] | ProfileRef


class SingleSwitch(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    kind: Literal["single_switch"] = "single_switch"


class FatTree(BaseModel):
    """Two-tier leaf/spine fat tree; ``oversubscription`` = leaf down-links : up-links."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    kind: Literal["fat_tree"] = "fat_tree"
    oversubscription: float = Field(default=1.0, strict=True, ge=1.0, le=1000.0)
    nodes_per_leaf: int | None = Field(
        default=None,
        strict=True,
        ge=1,
        le=MAX_NODES,
        description="none: the switch's down-facing ports (half of them, more when "
        "oversubscribed: radix x o/(1+o)) / NICs per node",
    )


def down_ports(switch_ports: int, oversubscription: float = 1.0) -> int:
    """A leaf switch's ports facing down when the rest face up in the ratio
    ``oversubscription`` (down : up): half of them without oversubscription, two thirds at
    2:1 (an oversubscribed leaf exists to take more nodes, not to leave ports unused)."""
    return int(switch_ports * oversubscription / (1.0 + oversubscription) + 1e-9)


def default_nodes_per_leaf(
    switch_ports: int, nics_per_node: int, oversubscription: float = 1.0
) -> int:
    """Nodes under one leaf switch of a fat tree whose leaves are not given: its down-facing
    ports (:func:`down_ports`) go to every NIC of each node."""
    return max(1, down_ports(switch_ports, oversubscription) // max(1, nics_per_node))


class RailOptimized(BaseModel):
    """Rail-optimised: NIC i of every node in a group goes to leaf (rail) switch i; same-rail
    traffic stays on one leaf, cross-rail or cross-group traffic crosses the spine."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    kind: Literal["rail_optimized"] = "rail_optimized"
    oversubscription: float = Field(default=1.0, strict=True, ge=1.0, le=1000.0)
    nodes_per_rail_group: int | None = Field(
        default=None,
        strict=True,
        ge=1,
        le=MAX_NODES,
        description="none: the switch's down-facing ports (radix x o/(1+o))",
    )


Topology = Annotated[
    SingleSwitch | FatTree | RailOptimized,
    Field(discriminator="kind"),
    BeforeValidator(kind_shorthand),
]


class NetworkSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    profile: Ref
    nics_per_node: int = Field(default=8, strict=True, ge=1, le=1024)
    topology: Topology = FatTree()


class PricingSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    profile: Ref
    tier: Literal["on_demand", "reserved", "spot"] = Field(
        default="on_demand", description="cloud price tier (ignored for ownership)"
    )
    utilisation: float = Field(
        default=1.0,
        ge=0.01,
        le=1,
        description="share of an owned cluster's amortisation life, or of a reserved term, kept "
        "busy with work like this run (at least 1%): the run carries the idle rest, so capex, "
        "opex and reserved rent per hour used are divided by it (on-demand and spot bill only "
        "the hours used)",
    )


class ClusterSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    gpu: Ref
    gpus_per_node: int = Field(default=8, strict=True, ge=1, le=1024)
    nodes: int = Field(default=1, strict=True, ge=1, le=MAX_NODES)
    fabric: Ref
    network: NetworkSpec | None = Field(default=None, description="required when nodes > 1")
    storage: Ref = "lustre"
    pricing: PricingSpec | None = None

    @field_validator("pricing", mode="before")
    @classmethod
    def _pricing_by_name(cls, v: Any) -> Any:
        # `pricing: NAME` names a price profile, as `gpu: NAME` names a GPU profile.
        return {"profile": v} if isinstance(v, str) else v

    @field_validator("network", mode="before")
    @classmethod
    def _network_by_name(cls, v: Any) -> Any:
        # `network: NAME` names a network profile, with its defaults for NICs and topology.
        return {"profile": v} if isinstance(v, str) else v
