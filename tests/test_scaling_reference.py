"""The automatic scaling reference is a layout comparable to the scenario's: placement alone
(groups straddling nodes unevenly) never reads as scaling above 100%."""

from __future__ import annotations

import pytest

from simulator.config.loading import resolve_dict
from simulator.simulate import _node_aligned, reference_layout, simulate


def _layout(nodes: int) -> dict:
    return {
        "name": "zero3-70b",
        "cluster": {
            "gpu": "h100-sxm-80gb",
            "gpus_per_node": 8,
            "nodes": nodes,
            "fabric": "nvlink4-nvswitch",
            "network": {"profile": "ib-ndr-400", "nics_per_node": 8},
        },
        "model": "llama3-70b",
        "training": {"seq_len": 2048, "global_batch": 16 * nodes, "micro_batch": 1},
        "parallelism": {
            "tp": 4,
            "pp": 2,
            "sequence_parallel": True,
            "pp_schedule": {"kind": "interleaved", "virtual_stages": 2},
            "sharding": {"kind": "zero", "stage": 3},
            "recompute": "selective",
        },
    }


@pytest.mark.parametrize("nodes", [4, 6])
def test_an_evenly_placed_scenario_scales_against_an_evenly_placed_reference(nodes: int) -> None:
    # On 3 nodes (the fewest that fit) each DP group has 2 ranks on one node and 1 on another:
    # its rings run at the lone rank's NIC, 2-3x slower than on 4 nodes (2 + 2).
    uneven = resolve_dict(_layout(3))
    assert not _node_aligned(uneven)
    rs = resolve_dict(_layout(nodes))
    assert _node_aligned(rs)
    ref = reference_layout(rs)
    assert ref is not None and _node_aligned(ref) and ref.nodes != 3
    assert simulate(rs).metrics.scaling_efficiency <= 1.0 + 1e-9
