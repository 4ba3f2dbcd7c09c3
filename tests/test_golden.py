"""Golden outputs: every bundled scenario's headline figures (step time, throughput, MFU,
memory, the step's breakdown, scaling, time to train, $ per million tokens) as committed in
tests/golden/bundled_scenarios.json. A change that moves one fails here; if the move is meant,
regenerate with ``python tests/golden/update_golden.py`` and say why in the commit."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent / "golden"))
from update_golden import GOLDEN, figures  # noqa: E402

from simulator.catalog import bundled_scenarios  # noqa: E402

EXPECTED: dict[str, Any] = json.loads(GOLDEN.read_text())
REL = 1e-6  # float sums in another order (another numpy) may move the last digits only


def test_every_bundled_scenario_has_a_golden_record() -> None:
    assert sorted(EXPECTED) == sorted(p.stem for p in bundled_scenarios())


@pytest.mark.parametrize("path", bundled_scenarios(), ids=lambda p: p.stem)
def test_bundled_scenario_matches_its_golden_figures(path: Path) -> None:
    want, got = EXPECTED[path.stem], figures(path)
    assert got["fits"] == want["fits"]
    assert sorted(got["breakdown_s"]) == sorted(want["breakdown_s"])
    for key, value in want.items():
        if key == "breakdown_s":
            continue  # by category, below
        if key == "fits" or value is None:
            assert got[key] == value, key
            continue
        assert got[key] == pytest.approx(value, rel=REL), key
    for cat, value in want["breakdown_s"].items():
        assert got["breakdown_s"][cat] == pytest.approx(value, rel=REL, abs=1e-9), cat
