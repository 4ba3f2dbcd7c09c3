"""Bad inputs a CLI review found past the earlier checks, each now one message and exit 2, with
nothing written: a probe file whose training section the in-sample check could not read (it
crashed after replacing the previous calibration), an integer of thousands of digits (JSON and
YAML), an implausible timing or a NaN step time, a calibration record with an absurd model (a
live validate run that cannot finish); and tables on a terminal that cannot print their
characters."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, h100_probe_two_ranks, run_cli


def _probe(tmp: Path, edit: Any = None, text: str | None = None) -> Path:
    data = h100_probe_two_ranks()
    if edit is not None:
        edit(data)
    p = tmp / "probe.json"
    p.write_text(text if text is not None else json.dumps(data))
    return p


def _digest(folder: Path) -> dict[str, str]:
    return {f.name: hashlib.sha1(f.read_bytes()).hexdigest() for f in sorted(folder.iterdir())}


@pytest.mark.parametrize(
    ("edit", "path"),
    [
        (lambda d: d["train"].pop("world_size"), "train.world_size"),
        (lambda d: d["train"].update(nodes=None), "train.nodes"),
        (lambda d: d["train"].update(nodes=0), "train.nodes"),
        (lambda d: d["train"].update(step_times_s=[float("nan"), 0.1]), "train.step_times_s[0]"),
        (lambda d: d["collectives"][0].update(time_s=1e300), "collectives[0].time_s"),
        (lambda d: d["train"]["model"].update(layers=10**9), "train.model.layers"),
    ],
    ids=["no-world-size", "nodes-null", "nodes-zero", "nan-step", "timing-1e300", "huge-model"],
)
def test_a_damaged_probe_is_refused_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit: Any, path: str
) -> None:
    # (a calibration outside the searched folders adds its folder to the search path for the
    # rest of the process: restored after the test)
    monkeypatch.delenv("CLUSTERSIM_PROFILE_PATH", raising=False)
    out = tmp_path / "out"
    good = run_cli("calibrate", str(_probe(tmp_path)), "--name", "mine", "--out-dir", str(out))
    assert good.returncode == 0, good.stderr
    before = _digest(out)
    res = run_cli("calibrate", str(_probe(tmp_path, edit)), "--name", "mine", "--out-dir", str(out))
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and path in res.stderr, res.stderr
    assert "probe.json" in res.stderr  # the file is named
    assert _digest(out) == before  # the earlier calibration is whole


def test_an_integer_of_thousands_of_digits_is_refused(tmp_path: Path) -> None:
    text = json.dumps(h100_probe_two_ranks()).replace('"version": 1', '"version": ' + "9" * 5000)
    res = run_cli("calibrate", str(_probe(tmp_path, text=text)), "--name", "m",
                  "--out-dir", str(tmp_path / "o"))  # fmt: skip
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "thousands of digits" in res.stderr and "set_int_max_str_digits" not in res.stderr
    scen = tmp_path / "s.yaml"
    base = (REPO / "scenarios" / "llama3-8b-8xh100.yaml").read_text()
    scen.write_text(base.replace("seq_len: 8192", "seq_len: " + "1" * 5000))
    assert "1" * 5000 in scen.read_text()
    res = run_cli("simulate", str(scen))
    assert res.returncode == 2 and "thousands of digits" in res.stderr
    assert "dates are" not in res.stderr and "set_int_max_str_digits" not in res.stderr
    scen.write_text(base.replace("seq_len: 8192", 'seq_len: !!int "abc"'))
    res = run_cli("simulate", str(scen))
    assert res.returncode == 2 and "!!int" in res.stderr and "dates are" not in res.stderr


def test_a_sweep_resumes_past_a_row_of_thousands_of_digits(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"name: t\nbase: {REPO / 'scenarios' / 'llama3-8b-8xh100.yaml'}\n"
        "axes:\n  - cluster.nodes: [1, 2]\n"
    )
    out = tmp_path / "rows.jsonl"
    first = run_cli("sweep", str(spec), "--out", str(out), "--executor", "serial", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    lines = out.read_text().splitlines()
    row = json.loads(lines[1])
    damaged = json.dumps(row).replace('"point": 1', '"point": ' + "7" * 5000)
    assert damaged != json.dumps(row)
    out.write_text("\n".join([lines[0], damaged, *lines[2:]]) + "\n")
    again = run_cli("sweep", str(spec), "--out", str(out), "--executor", "serial", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert [json.loads(ln)["point"] for ln in out.read_text().splitlines()] == [0, 1]


@pytest.mark.parametrize("env", [{"PYTHONIOENCODING": "ascii"}, {"PYTHONIOENCODING": "latin-1"}])
def test_tables_print_on_a_terminal_without_their_characters(env: dict[str, str]) -> None:
    """×, • and box lines: a terminal that cannot print them gets a replacement, not a
    UnicodeEncodeError halfway through the table."""
    scen = str(REPO / "scenarios" / "llama3-8b-8xh100.yaml")
    for args in (["check", scen], ["compare", scen, scen]):
        res = subprocess.run(
            [sys.executable, "-m", "simulator.cli", *args],
            capture_output=True,
            env={**os.environ, **env},
            cwd=REPO,
            timeout=120,
        )
        assert res.returncode == 0, res.stderr.decode(errors="replace")
        assert b"Traceback" not in res.stderr


def test_full_mode_is_not_chosen_for_a_step_of_millions_of_network_collectives() -> None:
    """TP 16 across nodes with NICs shared unevenly (3 for 8 GPUs) over 512 micro-batches: every
    rank's every layer collective through the network, 6.7M in all, took 70 s in full mode with
    no word. simulate takes one rank per stage and says it may be optimistic; --full refuses."""
    from simulator.config.loading import load_scenario
    from simulator.simulate import simulate

    sets = ["cluster.network.nics_per_node=3", "parallelism.tp=16"]
    rs = load_scenario(REPO / "scenarios" / "llama3-70b-64xh100.yaml", sets)
    res = simulate(rs, scaling=False)
    assert res.engine.mode == "symmetric"
    assert any("may be optimistic" in n for n in res.notes)
    cli = run_cli(
        "simulate",
        "llama3-70b-64xh100",
        "--no-scaling",
        "--full",
        *sum((["--set", s] for s in sets), []),
    )
    assert cli.returncode == 2 and "collectives per rank per step" in cli.stderr


def test_full_mode_counts_collectives_whose_links_another_group_shares() -> None:
    """36 GPUs a node over 8 NICs (uneven: full mode), TP4 inside the node beside data
    parallelism on the same NVLink ports: no group crosses a node, yet full mode runs every TP
    collective through the flow network, 24.9M of them: 280 s with no word. Counted now: the
    step takes one rank per stage with its note, and --full refuses."""
    from simulator.config.loading import resolve_dict
    from simulator.errors import UserError
    from simulator.limits import check_full_size, flow_layer_groups
    from simulator.simulate import simulate

    data = {
        "name": "gb200-36-per-node",
        "cluster": {
            "gpu": "gb200", "gpus_per_node": 36, "nodes": 64, "fabric": "nvlink5-nvl72",
            "storage": "lustre",
            "network": {"profile": "ib-xdr-800", "nics_per_node": 8,
                        "topology": {"kind": "fat_tree", "oversubscription": 1.0}},
        },
        "model": "gpt3-175b",
        "training": {"seq_len": 1024, "global_batch": 4608, "micro_batch": 1, "precision": "fp8"},
        "parallelism": {"tp": 4, "pp": 1, "sequence_parallel": True,
                        "sharding": {"kind": "zero", "stage": 1}, "recompute": "full"},
        "software": "deepspeed",
    }  # fmt: skip
    rs = resolve_dict(data)
    assert flow_layer_groups(rs) == {"tp"}
    with pytest.raises(UserError, match=r"per rank per step \(24,883,200 in all\)"):
        check_full_size(rs)
    res = simulate(rs, scaling=False)
    assert res.engine.mode == "symmetric"
    assert any("may be optimistic" in n for n in res.notes)


def test_a_file_this_tool_wrote_is_named_where_a_scenario_belongs(tmp_path: Path) -> None:
    """A probe, a JSON result or a trace given to simulate (JSON is YAML) was read as a scenario
    of unknown fields ('version: unknown field ... did you mean question?')."""
    probe = _probe(tmp_path)
    result = tmp_path / "result.json"
    res = run_cli("simulate", "llama3-8b-8xh100", "--format", "json")
    result.write_text(res.stdout)
    trace = tmp_path / "trace.json"
    assert run_cli("simulate", "llama3-8b-8xh100", "--trace", str(trace)).returncode == 0
    for path, what, where in (
        (probe, "a probe file", "clustersim calibrate"),
        (result, "a result", "scenario that made it"),
        (trace, "a timeline trace", "Perfetto"),
        (REPO / "scenarios" / "scenario.schema.json", "a JSON Schema", "editor"),
    ):
        for cmd in (["simulate", str(path)], ["compare", str(path), "llama3-8b-8xh100"]):
            got = run_cli(*cmd)
            assert got.returncode == 2, got.stderr
            assert f"this is {what}" in got.stderr and where in got.stderr, got.stderr
            assert "unknown field" not in got.stderr


def test_a_link_that_loops_is_named_as_one(tmp_path: Path) -> None:
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.symlink_to(b)
    b.symlink_to(a)
    res = run_cli("simulate", str(a))
    assert res.returncode == 2 and "symbolic link" in res.stderr


def test_a_name_is_printed_as_written(tmp_path: Path) -> None:
    scen = tmp_path / "s.yaml"
    base = (REPO / "scenarios" / "llama3-8b-8xh100.yaml").read_text()
    scen.write_text(base.replace("name: llama3-8b-8xh100", "name: ':smile:'"))
    assert ":smile:" in scen.read_text()
    res = run_cli("simulate", str(scen))
    assert res.returncode == 0 and ":smile:" in res.stdout


def test_full_mode_bound_counts_groups_cut_by_sockets() -> None:
    """PCIe through the host with three sockets for eight GPUs: TP 8 crosses the sockets
    unevenly, every rank's layer collectives move through shared socket links (12.5M events,
    over a minute); simulate keeps one rank per stage and says so."""
    from simulator.config.loading import load_scenario
    from simulator.simulate import simulate

    rs = load_scenario(
        REPO / "scenarios" / "llama3-70b-64xh100.yaml",
        [
            "cluster.fabric={profile: pcie4-host, sockets: 3}",
            "cluster.gpu=h100-pcie-80gb",
            "cluster.pricing=null",
        ],
    )
    res = simulate(rs, scaling=False)
    assert res.engine.mode == "symmetric"
    assert any("may be optimistic" in n for n in res.notes)


def test_full_mode_bound_counts_groups_nodes_hold_unevenly() -> None:
    """Six nodes of TP 4, PP 4, DP 3: the groups sit on the nodes unevenly, so the engine times
    no TP group analytically and every rank's layer collectives go through the flow network
    (5.0M, 46 s in full mode): one rank per stage, with its note (a diff review's finding)."""
    from simulator.config.loading import load_scenario
    from simulator.simulate import simulate

    sets = [
        "cluster.nodes=6",
        "parallelism.tp=4",
        "parallelism.pp=4",
        "parallelism.dp=3",
        "parallelism.pp_schedule={kind: 1f1b}",
        "training.global_batch=1536",
        "cluster.pricing=null",
    ]
    rs = load_scenario(REPO / "scenarios" / "llama3-70b-64xh100.yaml", sets)
    res = simulate(rs, scaling=False)
    assert res.engine.mode == "symmetric"
    assert any("may be optimistic" in n for n in res.notes)


def test_a_sweep_base_that_is_a_probe_is_named(tmp_path: Path) -> None:
    _probe(tmp_path)
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: t\nbase: probe.json\naxes:\n  - cluster.nodes: [1, 2]\n")
    res = run_cli("sweep", str(spec), "--out", str(tmp_path / "o.csv"), cwd=tmp_path)
    assert res.returncode == 2 and "this is a probe file" in res.stderr, res.stderr


def test_csv_on_a_terminal_without_a_character_stays_whole() -> None:
    """Tables get a replacement for a character the terminal lacks; CSV is data, written as
    UTF-8 whatever the terminal's encoding (a name 'café×8' was written 'caf??8')."""
    res = subprocess.run(
        [sys.executable, "-m", "simulator.cli", "simulate", "llama3-8b-8xh100", "--set",
         "name=café×8", "--format", "csv"],
        capture_output=True,
        env={**os.environ, "PYTHONIOENCODING": "ascii"},
        cwd=REPO,
        timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    assert res.stdout.decode("utf-8").splitlines()[1].startswith("café×8,")
