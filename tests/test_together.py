"""Collectives started together on the same links (``network.together``), as a CP ring's
backward starts its two exchanges behind the attention kernel: the closed form shares the links
as the flow network does, so a pass timed analytically ends when the flow network ends it.

Analytical limits: one collective alone takes the sum of its phases' times; two equal one-phase
transfers each pay their α once and share the bandwidth, ending at α + 2·w/B together; a
transfer that starts sharing and runs on alone after the shorter one ends takes the bytes of
both at the full rate once they overlap from the start."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.network.collectives import GroupShape, choose, phase_time
from simulator.network.nccl import Phase, TierLink
from simulator.network.together import finish_together

FABRIC = TierLink(bandwidth=400e9, alpha=2e-6)


def _phase(latency: float, wire: float) -> Phase:
    return Phase("fabric", latency, wire)


def test_one_collective_alone_takes_its_closed_form_time() -> None:
    shape = GroupShape(n=4, nodes=1)
    for coll in ("all_gather", "reduce_scatter", "all_reduce"):
        _algo, ph, t = choose(coll, shape, 64e6, FABRIC)  # type: ignore[arg-type]
        assert finish_together([ph], FABRIC) == [pytest.approx(t, rel=1e-12)]
        assert t == pytest.approx(sum(phase_time(p, FABRIC, None) for p in ph))


def test_two_equal_transfers_pay_alpha_once_and_share_the_bandwidth() -> None:
    a, w = 5e-6, 8e6
    ends = finish_together([[_phase(a, w)], [_phase(a, w)]], FABRIC)
    assert ends == [pytest.approx(a + 2 * w / FABRIC.bandwidth)] * 2


def test_the_longer_transfer_runs_on_alone_at_the_full_rate() -> None:
    small, big = 1e6, 5e6
    short, long = finish_together([[_phase(0.0, small)], [_phase(0.0, big)]], FABRIC)
    assert short == pytest.approx(2 * small / FABRIC.bandwidth)
    assert long == pytest.approx((small + big) / FABRIC.bandwidth)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(st.floats(0, 1e-4), st.floats(0, 1e8)),
            min_size=1,
            max_size=4,
        ),
        min_size=1,
        max_size=3,
    )
)
def test_sharing_never_beats_the_link_nor_loses_to_one_after_another(
    plans: list[list[tuple[float, float]]],
) -> None:
    """Together they end no sooner than the bytes of all at the full rate (or the slowest
    alone), and no later than one after another."""
    phases = [[_phase(a, w) for a, w in p] for p in plans]
    ends = finish_together(phases, FABRIC)
    alone = [sum(phase_time(p, FABRIC, None) for p in ph) for ph in phases]
    wire = sum(p.wire_bytes for ph in phases for p in ph) / FABRIC.bandwidth
    assert max(ends) >= max(max(alone), wire) * (1 - 1e-9) - 1e-15
    assert max(ends) <= sum(alone) * (1 + 1e-9) + 1e-15
    for e, t in zip(ends, alone, strict=True):
        assert e >= t * (1 - 1e-9) - 1e-15
