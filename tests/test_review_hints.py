"""Messages a CLI review (2026-12-07) found misleading, each now pointing at what is wrong: a
``--set`` mapping or list with a typo is refused as YAML at once (it was kept as text and refused
later as an unknown profile or kind); the note on a replaced section shows long values visibly
cut and suggests a ``--set`` that pastes as is; a TP hint names only degrees the model allows;
the interleaved schedule at PP 1 is refused before any virtual stage count is suggested."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from conftest import REPO, run_cli
from test_errors import assert_user_error

from simulator.config.loading import load_scenario

BASE = REPO / "scenarios" / "llama3-70b-64xh100.yaml"


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ("cluster.network={profile: ib-ndr-400, nics_per_node: 4", "cluster.network"),
        ("parallelism.sharding={kind: zero, stage: 1", "parallelism.sharding"),
        ("parallelism.stage_layers=[8, 8, 8, 8", "parallelism.stage_layers"),
    ],
)
def test_a_set_mapping_or_list_with_a_typo_is_refused_as_yaml(value: str, path: str) -> None:
    res = run_cli("simulate", str(BASE), "--no-scaling", "--set", value)
    assert_user_error(
        res, file=BASE, path=path, says=("is not valid YAML",), hint=("close every {",)
    )


def test_free_text_yaml_cannot_read_is_still_text() -> None:
    """A name holding ': ' is not a mapping YAML can read: it stays the text given."""
    rs = load_scenario(BASE, ["name=run: 4 nodes: eu"])
    assert rs.name == "run: 4 nodes: eu"


def test_the_replaced_section_note_suggests_a_set_that_runs() -> None:
    res = run_cli(
        "simulate",
        str(BASE),
        "--no-scaling",
        "--format",
        "json",
        "--set",
        "parallelism={tp: 4, pp: 8}",
    )
    assert res.returncode == 0, res.stderr
    note = next(n for n in json.loads(res.stdout)["notes"] if "replaced the whole" in n)
    assert "replaced the whole of parallelism" in note, note
    assert "\u2026" in note  # the long pp_schedule value is cut visibly
    suggestion = note.split("(e.g. ", 1)[1].rsplit(")", 1)[0]
    argv = shlex.split(suggestion)
    assert argv[0] == "--set"
    # the suggestion, pasted after the same override, runs (the field it keeps parses)
    load_scenario(BASE, ["parallelism={tp: 4, pp: 8}", argv[1]])


def test_a_tp_hint_names_only_degrees_the_model_allows(tmp_path: Path) -> None:
    res = run_cli(
        "simulate",
        str(REPO / "scenarios" / "llama3-8b-8xh100.yaml"),
        "--no-scaling",
        "--set",
        "parallelism.tp=8",
        "--set",
        "model={preset: llama3-8b, ffn_hidden: 1001}",
    )
    # 1001 = 7 x 11 x 13 allows 1, 7, 11 and 13, but the 32 heads only 1 of them
    assert_user_error(
        res,
        file=REPO / "scenarios" / "llama3-8b-8xh100.yaml",
        path="parallelism.tp",
        says=("feed-forward width 1001",),
        hint=("divides it: 1 (",),
    )


def test_the_interleaved_schedule_at_pp_1_is_refused_before_a_chunk_hint() -> None:
    res = run_cli(
        "simulate",
        str(BASE),
        "--no-scaling",
        "--set",
        "parallelism.pp=1",
        "--set",
        "model.layers=8",
    )
    assert_user_error(res, file=BASE, path="parallelism.pp_schedule", says=("needs PP > 1",))
    assert "virtual_stages" not in res.stderr


def test_an_ownership_price_loses_no_tier() -> None:
    """Replacing a cloud price and its tier with an ownership price drops nothing the new
    profile has; replacing it with another cloud price drops the tier, and says so."""
    from simulator.config.reading import replaced_fields

    data = {"cluster": {"pricing": {"profile": "aws-p5-h100", "tier": "spot"}}}
    assert replaced_fields(data, ["cluster.pricing=own-dgx-h100"]) == []
    (note,) = replaced_fields(data, ["cluster.pricing=gcp-a3-h100"])
    assert "tier" in note


def test_an_mfu_verdict_is_never_put_down_to_tokens_per_step() -> None:
    """A GB200 rack in fp8 against 64 H100 in bf16, the same model: the H100 plan's higher MFU
    comes from the share of a far lower peak it reaches, not from its longer step carrying
    more tokens (MFU does not depend on tokens per step)."""
    rep = json.loads(
        run_cli(
            "compare",
            str(REPO / "scenarios" / "llama3-70b-1xgb200-nvl72.yaml"),
            str(BASE),
            "--format",
            "json",
        ).stdout
    )
    mfu = {m["metric"]: m for m in rep["metrics"]}["mfu"]
    assert mfu["best"] == "llama3-70b-64xh100", mfu
    assert "tokens per step" not in mfu["verdict"], mfu["verdict"]
    assert "of the peak while computing" in mfu["verdict"], mfu["verdict"]
    assert "a lower peak to reach" in mfu["verdict"], mfu["verdict"]
