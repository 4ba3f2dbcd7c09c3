"""A fat tree whose leaf size the tool derives (half a switch's ports over the NICs per node)
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
    assert "take 4 nodes each" in note and "32-port" in note and "4 NICs" in note
    assert "nodes_per_leaf" in note


@pytest.mark.parametrize(
    "topo", [{"oversubscription": 1.0}, {"oversubscription": 4.0, "nodes_per_leaf": 4}]
)
def test_no_note_where_the_leaf_does_not_matter_or_is_given(topo: dict[str, Any]) -> None:
    assert _notes(**topo) == []
