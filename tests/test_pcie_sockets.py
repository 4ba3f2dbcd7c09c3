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
        # one GPU per socket: all four TP pairs (and both DP rings) cross the one socket link
        # at once and divide it, in the analytic timing as in the flow network
        {"tp": 2, "sockets": 8},
        {"tp": 2, "pp": 2, "sockets": 4},
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


def _two_tier(nodes: int, nics: int, gpn: int = 8, **par: Any) -> Any:
    return resolve_dict(
        {
            "name": "pcie-nodes",
            "cluster": {
                "gpu": "h100-pcie-80gb",
                "gpus_per_node": gpn,
                "nodes": nodes,
                "fabric": "pcie5-switch",
                "network": {"profile": "ib-ndr-400", "nics_per_node": nics},
            },
            "model": {"layers": 8, "hidden": 2048, "heads": 16, "vocab": 32000},
            "training": {"seq_len": 1024, "global_batch": 2 * nodes * gpn, "micro_batch": 1},
            "parallelism": dict(par),
        }
    )


def test_weak_scaling_over_pcie_nodes_is_never_superlinear() -> None:
    """Twice the nodes at the same work per GPU: the data-parallel ring now spans nodes, and
    its traffic still crosses each GPU's one PCIe port (the hops to the next member, and the
    NIC's own reads and writes), beside the tensor-parallel traffic there. It was 14-21%
    faster on two nodes when the spanning ring was charged to the NICs alone."""
    par = {"tp": 4, "sharding": {"kind": "fsdp"}}
    one = simulate(_two_tier(1, 8, **par), scaling=False).metrics
    two = simulate(_two_tier(2, 8, **par), scaling=False).metrics
    assert two.step_time_s >= one.step_time_s * 0.995
    assert two.breakdown_s["comm_tp"] >= one.breakdown_s["comm_tp"] * 0.995


def test_a_fabric_bound_ring_does_not_depend_on_how_many_nics_share_it() -> None:
    """A ring over PCIe GPUs of two nodes moves every byte through each GPU's port, slower
    than the NICs: adding NICs changes nothing, whether or not they divide the GPUs evenly
    (6 NICs for 8 GPUs used to charge the busiest NIC 1.5x the fabric's bound)."""
    steps = {
        nics: simulate(_two_tier(2, nics), scaling=False).metrics.step_time_s
        for nics in (2, 4, 6, 8)
    }
    assert max(steps.values()) == pytest.approx(min(steps.values()), rel=1e-3)
