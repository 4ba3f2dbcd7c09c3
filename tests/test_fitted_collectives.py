"""A calibrated fabric times collectives as the probe measured them: each collective by its own
α-β fit, with no NCCL protocol or pipeline model added to times that already hold the
transport's (a gloo ring's 1 MiB all-reduce was predicted 20% slower than its own fit)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import collective_rows, h100_probe_two_ranks, run_cli

from simulator.config.loading import resolve_dict
from simulator.network.collectives import GroupShape, choose
from simulator.network.topology import Topology

RS_ALPHA, RS_BW = 300e-6, 0.5e9  # a reduce-scatter slower than the all-reduce's 100 µs, 1 GB/s


def _probe_with_rs(tmp_path: Path) -> Path:
    probe = h100_probe_two_ranks()
    probe["collectives"] += collective_rows(
        "reduce_scatter", "intra", lambda b: RS_ALPHA + 0.5 * b / RS_BW
    )
    f = tmp_path / "p.json"
    f.write_text(json.dumps(probe))
    return f


@pytest.fixture
def calibrated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    out = tmp_path / "cal"
    out.mkdir()
    monkeypatch.setenv("CLUSTERSIM_PROFILE_PATH", str(out))
    res = run_cli("calibrate", str(_probe_with_rs(tmp_path)), "--name", "fc", "--out-dir", str(out))
    assert res.returncode == 0, res.stderr
    return out


def _tier():  # type: ignore[no-untyped-def]
    rs = resolve_dict(
        {
            "name": "t",
            "cluster": {"gpu": "fc", "gpus_per_node": 2, "nodes": 1, "fabric": "fc-fabric"},
            "model": {"layers": 2, "hidden": 64, "heads": 1, "vocab": 128},
            "training": {"seq_len": 8, "global_batch": 2, "micro_batch": 1},
        }
    )
    return Topology(rs).fabric_tier()


@pytest.mark.parametrize("size", [1 << 10, 1 << 20, 1 << 24])
def test_each_collective_takes_its_own_fit_and_nothing_more(calibrated: Path, size: int) -> None:
    fab = yaml.safe_load((calibrated / "fc-fabric.yaml").read_text())
    assert set(fab["fitted"]["collectives"]) == {"all_reduce", "reduce_scatter"}
    tier = _tier()
    t_ar = choose("all_reduce", GroupShape(2, 1), size, tier)[2]
    # the probe's all-reduce took 100 µs + S / (1 GB/s): 2(n-1)α + 2(n-1)/n·S/B with α 50 µs
    assert t_ar == pytest.approx(100e-6 + size / 1e9, rel=1e-3)
    t_rs = choose("reduce_scatter", GroupShape(2, 1), size, tier)[2]
    assert t_rs == pytest.approx(RS_ALPHA + 0.5 * size / RS_BW, rel=1e-3)
    # a collective the probe did not measure: the all-reduce's α and bandwidth, ring form
    t_ag = choose("all_gather", GroupShape(2, 1), size, tier)[2]
    assert t_ag == pytest.approx(50e-6 + 0.5 * size / 1e9, rel=1e-3)


def test_an_nccl_fabric_keeps_its_protocol_model() -> None:
    """Bundled profiles have no fit: a 1 MiB all-reduce on NVLink pays more than α-β alone."""
    rs = resolve_dict(
        {
            "name": "t",
            "cluster": {"gpu": "h100-sxm-80gb", "gpus_per_node": 8, "nodes": 1,
                        "fabric": "nvlink4-nvswitch"},
            "model": {"layers": 2, "hidden": 64, "heads": 1, "vocab": 128},
            "training": {"seq_len": 8, "global_batch": 8, "micro_batch": 1},
        }
    )  # fmt: skip
    tier = Topology(rs).fabric_tier()
    assert not tier.fitted
    algo, _, t = choose("all_reduce", GroupShape(8, 1), 1 << 20, tier)
    ring = 14 * tier.alpha + 2 * 7 / 8 * (1 << 20) / tier.bandwidth
    assert t > ring or algo != "ring"


def test_a_fit_no_link_could_have_is_left_out_of_the_fitted_block() -> None:
    """On a busy machine a few noisy sizes can leave a collective's slope all but flat (0.8 MB/s
    for a gloo reduce-scatter): that fit is left out, the tier's own fit times the collective,
    and calibrate still writes a profile that loads."""
    from calibrate.fits import AlphaBeta, fitted_block

    good = AlphaBeta("all_gather", "fabric", 2, 50e-6, 1 / 2e9, 0.99, 0.02, 8)
    flat = AlphaBeta("reduce_scatter", "fabric", 2, 1e-3, 1 / 0.79e6, 0.2, 0.5, 8)
    block = fitted_block([good, flat], "fabric", lambda s: s)
    assert set(block["collectives"]) == {"all_gather"}


P2P_ALPHA, P2P_BW = 150e-6, 1.6e9  # a send slower to start than the all-reduce's 100 µs


def test_a_pipeline_send_takes_the_probes_p2p_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe's point-to-point fit reaches the fabric's fitted block, and a send is timed
    by it: one α and its bytes at the fitted bandwidth (it was left out, and a send on a
    calibrated fabric lost its α altogether: 1 us for a 1 KiB send measured at 119)."""
    probe = h100_probe_two_ranks()
    probe["collectives"] += collective_rows("p2p", "intra", lambda b: P2P_ALPHA + b / P2P_BW)
    (tmp_path / "p.json").write_text(json.dumps(probe))
    out = tmp_path / "cal"
    out.mkdir()
    monkeypatch.setenv("CLUSTERSIM_PROFILE_PATH", str(out))
    res = run_cli("calibrate", str(tmp_path / "p.json"), "--name", "fc", "--out-dir", str(out))
    assert res.returncode == 0, res.stderr
    fitted = yaml.safe_load((out / "fc-fabric.yaml").read_text())["fitted"]["collectives"]
    assert "p2p" in fitted
    tier = _tier()
    for size in (1 << 10, 1 << 22):
        _, _, t = choose("p2p", GroupShape(2, 1), float(size), tier, None)
        assert t == pytest.approx(P2P_ALPHA + size / P2P_BW, rel=0.02)


def test_a_send_on_a_fitted_fabric_without_a_p2p_fit_keeps_its_alpha(calibrated: Path) -> None:
    """Without a p2p fit a send takes the tier's own α (the all-reduce fit's) and bandwidth."""
    tier = _tier()
    _, _, t = choose("p2p", GroupShape(2, 1), 1024.0, tier, None)
    assert t == pytest.approx(tier.alpha + 1024.0 / tier.bandwidth, rel=1e-6)
    assert t >= tier.alpha > 0  # one α, not none
