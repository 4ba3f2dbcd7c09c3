"""PCIe through the host with CPU sockets: symmetric mode (one rank per stage) agrees with every
rank simulated where the sockets cut every group the same way, and gives way to full mode where
they do not; a group inside one socket never waits on the socket link, however narrow."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.config.loading import resolve_dict
from simulator.network.topology import Topology
from simulator.simulate import simulate


def _pcie(gpn: int = 8, sockets: int = 2, uplink: float | None = None, **par: Any) -> Any:
    fabric: dict[str, Any] = {"profile": "pcie4-host", "sockets": sockets}
    if uplink is not None:
        fabric["shared_uplink_gbps"] = uplink
    return resolve_dict(
        {
            "name": "pcie",
            "cluster": {"gpu": "l40s", "gpus_per_node": gpn, "nodes": 1, "fabric": fabric},
            "model": {"layers": 8, "hidden": 2048, "heads": 16, "vocab": 32000},
            "training": {"seq_len": 1024, "global_batch": 16, "micro_batch": 1},
            "parallelism": dict(par),
        }
    )


@pytest.mark.parametrize(
    "par",
    [
        {"tp": 4},
        {"tp": 2},
        {"tp": 2, "pp": 2},
        {"tp": 4, "sharding": {"kind": "zero", "stage": 3}},
        {"pp": 4, "sharding": {"kind": "zero", "stage": 1}},
    ],
)
def test_symmetric_mode_agrees_with_full_mode_where_sockets_cut_groups_alike(
    par: dict[str, Any],
) -> None:
    # a socket link narrower than a GPU's port, so that crossing it shows
    rs = _pcie(uplink=20, **par)
    assert Topology(rs).socket_aligned()
    sym, full = simulate(rs, scaling=False), simulate(rs, full=True, scaling=False)
    assert sym.metrics.step_time_s == pytest.approx(full.metrics.step_time_s, rel=1e-9)


def test_a_group_inside_one_socket_never_waits_on_the_socket_link() -> None:
    """TP 4 on two sockets of four, a pipeline stage each: each TP group is inside a socket,
    so a socket link at a tenth of the port changes nothing for its collectives (the sends
    between the stages, which cross it and here block the compute stream, slow down)."""
    par = {"tp": 4, "pp": 2, "overlap": {"pp_p2p": False}}
    wide = simulate(_pcie(uplink=64, **par), scaling=False).metrics
    narrow = simulate(_pcie(uplink=2, **par), scaling=False).metrics
    assert narrow.step_time_s > wide.step_time_s
    assert narrow.breakdown_s["comm_tp"] == pytest.approx(wide.breakdown_s["comm_tp"], rel=1e-9)
    assert wide.breakdown_s["comm_tp"] > 0


def test_sockets_that_split_groups_unevenly_give_way_to_full_mode() -> None:
    """Three sockets of 8 GPUs (3, 3, 2) cut TP pairs unevenly ({2, 3} crosses, {0, 1} does
    not): every rank is simulated, and the result says why."""
    rs = _pcie(sockets=3, tp=2, pp=2, sharding={"kind": "zero", "stage": 3})
    assert not Topology(rs).socket_aligned()
    res = simulate(rs, scaling=False)
    assert res.engine.mode == "full"
    assert any("CPU socket" in n for n in res.notes)
    full = simulate(rs, full=True, scaling=False)
    assert res.metrics.step_time_s == pytest.approx(full.metrics.step_time_s, rel=1e-12)
