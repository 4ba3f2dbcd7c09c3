"""A fat tree whose leaf size the tool derives (a switch's down-facing ports over the NICs per
node: radix x o/(1+o) of them at o:1 oversubscription)
says so where it matters, behind oversubscribed up-links: more NICs per node then mean fewer
nodes per leaf and more traffic across the spine, which can slow a step (a reviewer's
"more NICs, slower" case)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import CATALOG_SCENARIO

from simulator.config.loading import resolve_dict


def _notes(**topo: Any) -> list[str]:
    data: dict[str, Any] = {**CATALOG_SCENARIO, "name": "leaf"}
    net = {"profile": "roce-100", "nics_per_node": 4, "topology": {"kind": "fat_tree", **topo}}
    data["cluster"] = {**CATALOG_SCENARIO["cluster"], "nodes": 16, "network": net}
    data["training"] = {"seq_len": 4096, "global_batch": 128, "micro_batch": 1}
    return [n for n in resolve_dict(data).model_notes() if "leaf switches" in n]


def test_the_derived_leaf_is_named_behind_oversubscribed_up_links() -> None:
    (note,) = _notes(oversubscription=4.0)
    # 4:1: 25 of the 32 ports face down (4/5), 6 nodes of 4 NICs (half the ports took 4)
    assert "take 6 nodes each" in note and "25 of a 32-port" in note and "4 NICs" in note
    assert "nodes_per_leaf" in note


@pytest.mark.parametrize(("o", "down"), [(1.0, 32), (2.0, 42), (3.0, 48), (1000.0, 63)])
def test_an_oversubscribed_leaf_turns_its_ports_down_in_its_ratio(o: float, down: int) -> None:
    from simulator.config.cluster import default_nodes_per_leaf, down_ports

    assert down_ports(64, o) == down
    assert default_nodes_per_leaf(64, 8, o) == down // 8


@pytest.mark.parametrize(
    "topo", [{"oversubscription": 1.0}, {"oversubscription": 4.0, "nodes_per_leaf": 4}]
)
def test_no_note_where_the_leaf_does_not_matter_or_is_given(topo: dict[str, Any]) -> None:
    assert _notes(**topo) == []
