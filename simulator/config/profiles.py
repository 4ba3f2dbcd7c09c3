"""Every kind of catalogue profile, hardware and software: the union the catalogue loads."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from .hardware import (
    FabricProfile,
    GPUProfile,
    NetworkProfile,
    StorageProfile,
    _Profile,
)
from .prices import CloudPrice, OwnershipPrice
from .software import SoftwareProfile

AnyProfile = Annotated[
    GPUProfile
    | FabricProfile
    | NetworkProfile
    | StorageProfile
    | CloudPrice
    | OwnershipPrice
    | SoftwareProfile,
    Field(discriminator="kind"),
]

PROFILE_KINDS: dict[str, type[_Profile]] = {
    "gpu": GPUProfile,
    "fabric": FabricProfile,
    "network": NetworkProfile,
    "storage": StorageProfile,
    "cloud_price": CloudPrice,
    "ownership_price": OwnershipPrice,
    "software": SoftwareProfile,
}
