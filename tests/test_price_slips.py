"""Price figures that are probably slips get a note (and are used as given): an instance's
hourly price typed per GPU, a discount tier dearer than on demand, electricity in cents typed as
dollars, a quote dated in the future. The bundled profiles get none."""

from __future__ import annotations

import datetime as dt
import glob
from pathlib import Path

import pytest
from conftest import REPO

from simulator.catalog import load_profile_file
from simulator.config.price_checks import price_slips
from simulator.config.prices import CloudPrice, OwnershipPrice

AWS = REPO / "hardware_profiles" / "prices" / "aws-p5-h100.yaml"
OWN = REPO / "hardware_profiles" / "prices" / "own-dgx-h100.yaml"
TODAY = dt.date(2026, 12, 7)


def _figure(v: float) -> dict[str, object]:
    return {"value": v, "source": "a test's own figure, 2026"}


def test_the_bundled_price_profiles_get_no_note() -> None:
    files = glob.glob(str(REPO / "hardware_profiles" / "prices" / "*.yaml"))
    assert files
    for f in files:
        assert price_slips(load_profile_file(Path(f)), TODAY) == [], f


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"on_demand_usd_per_gpu_hour": _figure(55.04)}, "not the instance's hourly price"),
        ({"spot_usd_per_gpu_hour": _figure(9.0)}, "more spot"),
        ({"reserved_usd_per_gpu_hour": _figure(9.0)}, "more reserved"),
        ({"as_of": dt.date(2099, 1, 1)}, "after today"),
    ],
)
def test_a_cloud_price_slip_is_noted(change: dict[str, object], says: str) -> None:
    aws = load_profile_file(AWS)
    assert isinstance(aws, CloudPrice)
    slipped = CloudPrice.model_validate({**aws.model_dump(), **change})
    notes = price_slips(slipped, TODAY)
    assert any(says in n for n in notes), notes


def test_electricity_in_cents_is_noted() -> None:
    own = load_profile_file(OWN)
    assert isinstance(own, OwnershipPrice)
    slipped = OwnershipPrice.model_validate({**own.model_dump(), "usd_per_kwh": _figure(8.06)})
    assert any("not cents" in n for n in price_slips(slipped, TODAY))


def test_an_instance_price_typed_per_gpu_is_one_note_however_many_tiers() -> None:
    aws = load_profile_file(AWS)
    assert isinstance(aws, CloudPrice)
    rates = {"on_demand_usd_per_gpu_hour": 55.0, "reserved_usd_per_gpu_hour": 35.0}
    slipped = CloudPrice.model_validate(
        {**aws.model_dump(), **{k: _figure(v) for k, v in rates.items()}}
    )
    notes = [n for n in price_slips(slipped, TODAY) if "per GPU, not" in n]
    assert len(notes) == 1 and "55" in notes[0]


@pytest.mark.parametrize("cls", [CloudPrice, OwnershipPrice])
def test_a_date_written_as_a_number_is_refused_with_the_form_to_write(cls: type) -> None:
    """``as_of: 20240822`` was read as seconds since 1970 and refused in pydantic's words
    ('Datetimes provided to dates should have zero time')."""
    from pydantic import ValidationError

    data = load_profile_file(AWS if cls is CloudPrice else OWN).model_dump()
    for number in (20240822, "20240822", "1724284800"):
        with pytest.raises(ValidationError, match="write the date as YYYY-MM-DD"):
            cls.model_validate({**data, "as_of": number})
    assert cls.model_validate({**data, "as_of": "2024-08-22"}).as_of == dt.date(2024, 8, 22)
