"""Physics of the step simulation: accounting, monotonicity, pipeline bubbles, symmetric vs full
mode, NIC contention, traces, and the bundled scenarios.

Scenarios use catalogue profiles (``hardware_profiles/``) with inline overrides and small models
with few micro-batches, so the whole file runs in seconds."""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from simulator.catalog import load_catalog
from simulator.config.loading import resolve_dict
from simulator.engine.sim import BUSY, CATEGORIES, run_engine
from simulator.simulate import SimResult, simulate

TINY: dict[str, Any] = {"name": "tiny", "layers": 8, "hidden": 1024, "heads": 16, "vocab": 32000}
# Many heavy layers and a tiny vocabulary: the embedding and the head are a negligible part of
# the first and last stage, so pipeline stages are uniform.
UNIFORM: dict[str, Any] = {
    "name": "uniform",
    "layers": 128,
    "hidden": 4096,
    "heads": 32,
    "vocab": 128,
}
COMM = tuple(c for c in CATEGORIES if c.startswith("comm_"))


def scenario(
    nodes: int = 1,
    gpn: int = 8,
    *,
    model: dict[str, Any] | str = TINY,
    seq: int = 1024,
    micro_batches: int = 4,
    micro_batch: int = 1,
    fabric: Any = "nvlink4-nvswitch",
    network: Any = "ib-ndr-400",
    nics: int = 8,
    topology: dict[str, Any] | None = None,
    storage: Any = "lustre",
    gpu: Any = "h100-sxm-80gb",
    **par: Any,
) -> dict[str, Any]:
    """A scenario mapping; the global batch gives ``micro_batches`` per pipeline."""
    cluster: dict[str, Any] = {
        "gpu": gpu,
        "gpus_per_node": gpn,
        "nodes": nodes,
        "fabric": fabric,
        "storage": storage,
    }
    if nodes > 1:
        cluster["network"] = {"profile": network, "nics_per_node": nics}
        if topology is not None:
            cluster["network"]["topology"] = topology
    dp = nodes * gpn // (par.get("tp", 1) * par.get("pp", 1) * par.get("cp", 1))
    return {
        "name": "engine-test",
        "cluster": cluster,
        "model": model,
        "training": {
            "seq_len": seq,
            "global_batch": dp * micro_batch * micro_batches,
            "micro_batch": micro_batch,
        },
        "parallelism": par,
        # the engine's analytic limits, at the profile's speed (test_stragglers.py adds the pace)
        "run": {"stragglers": "off"},
    }


def sim(data: dict[str, Any], full: bool = False, trace: bool = False) -> SimResult:
    return simulate(resolve_dict(data), full=full, trace=trace, scaling=False)


def assert_accounting(res: SimResult, rel: float = 1e-9) -> None:
    """busy + Σ idle = step, for the cluster-wide means and for every rank class."""
    m = res.metrics
    step = m.step_time_s
    assert m.busy_s + sum(m.idle_s.values()) == pytest.approx(step, rel=rel)
    assert m.busy_s == pytest.approx(sum(m.breakdown_s[k] for k in BUSY), rel=1e-12)
    for name, acc in m.per_class.items():
        assert set(acc) == set(CATEGORIES), name
        assert sum(acc.values()) == pytest.approx(step, rel=rel), name
        assert min(acc.values()) >= -rel * step, (name, acc)
    for rr in res.engine.ranks.values():
        assert sum(rr.acc.values()) == pytest.approx(step, rel=rel), rr.rank


# -- a single GPU ------------------------------------------------------------------------------
@pytest.mark.parametrize("full", [False, True])
def test_one_gpu_has_no_communication_and_no_bubble(full: bool) -> None:
    res = sim(scenario(1, 1, micro_batches=4, recompute="selective"), full=full)
    m = res.metrics
    for cat in (*COMM, "pp_bubble", "imbalance"):
        assert m.breakdown_s[cat] == 0.0, cat
        assert m.per_class["stage0"][cat] == 0.0, cat
    assert m.breakdown_s["compute"] > 0 and m.breakdown_s["optimizer"] > 0
    assert_accounting(res)
    # Nothing but compute, the optimizer and (possibly) waiting for the data loader or for the
    # host to issue short kernels.
    own = ("compute", "optimizer", "data_stall", "host")
    assert m.step_time_s == pytest.approx(sum(m.breakdown_s[k] for k in own), rel=1e-12)


# -- accounting ---------------------------------------------------------------------------------
SLOW_STORAGE = {"profile": "nfs", "read_gbps_per_client": 0.001, "latency_ms": 20.0}

LAYOUTS: dict[str, dict[str, Any]] = {
    "dp": scenario(2, 8),
    "tp": scenario(1, 8, tp=8, sequence_parallel=True),
    "tp-across-nodes": scenario(2, 4, tp=8, nics=4),
    "pp-1f1b": scenario(1, 8, pp=4, tp=2, micro_batches=8),
    "pp-gpipe": scenario(2, 4, pp=4, micro_batches=4, pp_schedule={"kind": "gpipe"}, nics=4),
    "interleaved": scenario(
        2, 4, pp=2, tp=2, micro_batches=4, pp_schedule={"kind": "interleaved", "virtual_stages": 2}
    ),
    "zero1-no-overlap": scenario(
        2,
        4,
        sharding={"kind": "zero", "stage": 1},
        nics=2,
        overlap={"dp_grad": False, "param_gather": False},
    ),
    "zero3": scenario(2, 4, sharding={"kind": "zero", "stage": 3}, nics=2),
    "fsdp-hybrid-pp": scenario(4, 8, pp=2, sharding={"kind": "fsdp", "strategy": "hybrid_shard"}),
    "recompute-full": scenario(2, 8, tp=2, pp=2, recompute="full", micro_batches=4),
    "cp": scenario(2, 4, cp=2, tp=2, nics=2),
    "fat-tree": scenario(
        8,
        2,
        tp=2,
        nics=1,
        topology={"kind": "fat_tree", "oversubscription": 2.0, "nodes_per_leaf": 2},
    ),
    "pcie-host": scenario(1, 4, fabric="pcie4-host", tp=2),
    "data-starved": scenario(2, 4, tp=2, storage=SLOW_STORAGE, nics=4),
}


@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_busy_plus_idle_is_the_step(name: str, full: bool) -> None:
    res = sim(LAYOUTS[name], full=full)
    assert_accounting(res)
    if name == "data-starved":
        assert res.metrics.breakdown_s["data_stall"] > 0.1 * res.metrics.step_time_s
    if name.startswith(("pp", "interleaved")):
        assert res.metrics.breakdown_s["pp_bubble"] > 0


# -- monotonicity ------------------------------------------------------------------------------
# Uniform clusters. (Monotonicity is not a theorem of the model: like NCCL's tuner, the engine
# picks algorithms without knowing about other traffic, and a faster link can switch a collective
# to one that contends more; non-uniform placements show small scheduling anomalies too.)
MONO_BASES: dict[str, dict[str, Any]] = {
    "tp-pp-dp-data-starved": scenario(
        4,
        4,
        tp=2,
        pp=2,
        nics=4,
        micro_batches=4,
        storage={"profile": "nfs", "read_gbps_per_client": 0.001, "latency_ms": 1.0},
    ),
    "zero3-roce": scenario(2, 4, network="roce-400", nics=2, sharding={"kind": "zero", "stage": 3}),
    "fat-tree-oversubscribed": scenario(
        8,
        2,
        tp=2,
        nics=1,
        storage="lustre",
        topology={"kind": "fat_tree", "oversubscription": 2.0, "nodes_per_leaf": 2},
    ),
    # TP across two nodes behind 4:1 oversubscribed up-links: the algorithm choice has to see
    # the up-links, or a faster fabric makes NCCL-style selection pick the flat ring.
    "tp-across-oversubscribed-leaves": scenario(
        2,
        2,
        tp=4,
        fabric="pcie4-host",
        network="roce-400",
        nics=1,
        micro_batches=4,
        recompute="full",
        sequence_parallel=True,
        overlap={"tp_comm": True},
        topology={"kind": "fat_tree", "oversubscription": 4.0, "nodes_per_leaf": 1},
    ),
}


def scaled(
    base: dict[str, Any],
    fabric_bw: float = 1.0,
    fabric_lat: float = 1.0,
    net_bw: float = 1.0,
    net_lat: float = 1.0,
    storage_bw: float = 1.0,
) -> dict[str, Any]:
    """``base`` with every link's bandwidth multiplied and latency scaled by the factors."""
    cat = load_catalog()
    data = copy.deepcopy(base)
    cl = data["cluster"]

    def ref(spec: Any) -> tuple[Any, dict[str, Any]]:
        if isinstance(spec, str):
            return cat.get(spec), {"profile": spec}
        return cat.get(spec["profile"]), dict(spec)

    def value(over: dict[str, Any], prof: Any, field: str) -> float:
        v = over.get(field, getattr(prof, field))
        return float(v if isinstance(v, int | float) else v.value)

    prof, over = ref(cl["fabric"])
    for field, f in (("bandwidth_gbps", fabric_bw), ("latency_us", fabric_lat)):
        over[field] = value(over, prof, field) * f
    if prof.shared_uplink_gbps is not None:
        over["shared_uplink_gbps"] = value(over, prof, "shared_uplink_gbps") * fabric_bw
    cl["fabric"] = over
    if prof.technology == "nvswitch":  # the GPU's own NVLink ports cap what the switch gives
        gpu, gover = ref(cl["gpu"])
        gover["nvlink_gbps"] = value(gover, gpu, "nvlink_gbps") * fabric_bw
        cl["gpu"] = gover
    if "network" in cl:
        prof, over = ref(cl["network"]["profile"])
        for field, f in (("port_gbps", net_bw), ("latency_us", net_lat)):
            over[field] = value(over, prof, field) * f
        cl["network"]["profile"] = over
    prof, over = ref(cl["storage"])
    over["read_gbps_per_client"] = value(over, prof, "read_gbps_per_client") * storage_bw
    if prof.aggregate_read_gbps is not None or "aggregate_read_gbps" in over:
        over["aggregate_read_gbps"] = value(over, prof, "aggregate_read_gbps") * storage_bw
    cl["storage"] = over
    return data


_BASE_STEP: dict[tuple[str, bool], float] = {}


def _step(data: dict[str, Any], full: bool) -> float:
    return run_engine(resolve_dict(data), full=full).step_time


MAX_EXAMPLES = int(os.environ.get("CLUSTERSIM_TEST_EXAMPLES", "25"))


@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=st.sampled_from(sorted(MONO_BASES)),
    full=st.booleans(),
    fabric_bw=st.floats(1.0, 8.0),
    fabric_lat=st.floats(0.0, 1.0),
    net_bw=st.floats(1.0, 8.0),
    net_lat=st.floats(0.0, 1.0),
    storage_bw=st.floats(1.0, 8.0),
)
@example(
    base="tp-across-oversubscribed-leaves",
    full=False,
    fabric_bw=1.0,
    fabric_lat=0.4,
    net_bw=1.0,
    net_lat=0.96,
    storage_bw=1.0,
)
@example(
    base="tp-pp-dp-data-starved",
    full=True,
    fabric_bw=1.0,
    fabric_lat=1.0,
    net_bw=1.0,
    net_lat=1.0,
    storage_bw=4.0,
)
def test_faster_links_are_never_slower(
    base: str,
    full: bool,
    fabric_bw: float,
    fabric_lat: float,
    net_bw: float,
    net_lat: float,
    storage_bw: float,
) -> None:
    key = (base, full)
    if key not in _BASE_STEP:
        _BASE_STEP[key] = _step(scaled(MONO_BASES[base]), full)
    t0 = _BASE_STEP[key]
    t = _step(scaled(MONO_BASES[base], fabric_bw, fabric_lat, net_bw, net_lat, storage_bw), full)
    assert t <= t0 * (1 + 1e-9)


def test_monotonicity_bases_exercise_every_link() -> None:
    starved = sim(scaled(MONO_BASES["tp-pp-dp-data-starved"])).metrics
    assert starved.breakdown_s["data_stall"] > 0
    assert starved.breakdown_s["comm_dp"] > 0 and starved.breakdown_s["comm_pp"] > 0
    assert sim(scaled(MONO_BASES["zero3-roce"])).metrics.breakdown_s["comm_dp"] > 0
    assert (
        sim(scaled(MONO_BASES["tp-across-oversubscribed-leaves"])).metrics.breakdown_s["comm_tp"]
        > 0
    )
    # Each factor on its own moves the step.
    base = MONO_BASES["tp-pp-dp-data-starved"]
    t0 = _step(scaled(base), False)
    assert _step(scaled(base, storage_bw=4.0), False) < t0
    assert _step(scaled(base, net_bw=4.0, storage_bw=100.0), False) < _step(
        scaled(base, storage_bw=100.0), False
    )
    assert _step(scaled(base, fabric_bw=4.0, storage_bw=100.0), False) < _step(
        scaled(base, storage_bw=100.0), False
    )


# -- pipeline bubble -------------------------------------------------------------------------


def test_the_tied_embedding_exchange_waits_for_both_ends() -> None:
    """The pipeline's ends all-reduce the tied embedding's gradient: nothing moves until both
    have reached it (NCCL), so it never contends with the other end's backward sends, and a
    faster GPU never makes the step slower (it did: the first end's transfer started alone
    and slowed the pipeline's last sends on a shared 25 GbE NIC). Full mode, the event engine
    and the direct path agree."""
    from conftest import REPO

    from simulator.config.loading import load_scenario
    from simulator.simulate import simulate

    sets = [
        "cluster.nodes=2", "cluster.gpus_per_node=1", "cluster.network={profile: tcp-25gbe}",
        "cluster.pricing=null", "model.layers=4", "model.hidden=1024", "model.heads=8",
        "model.kv_heads=2", "model.ffn_hidden=2816", "model.vocab=32000",
        "model.tied_embeddings=true", "parallelism.pp=2", "parallelism.pp_schedule=gpipe",
        "training.seq_len=512", "training.micro_batch=4", "training.global_batch=32",
    ]  # fmt: skip
    steps = []
    for peak in (989.4, 1978.8, 4000.0):
        rs = load_scenario(
            REPO / "scenarios" / "llama3-8b-8xh100.yaml",
            [*sets, f"cluster.gpu.peak_tflops.bf16={peak}"],
        )
        sym = simulate(rs, scaling=False).engine.step_time
        full = simulate(rs, full=True, scaling=False).engine.step_time
        assert full == pytest.approx(sym, rel=1e-9)
        steps.append(sym)
    assert steps == sorted(steps, reverse=True), steps


def test_full_mode_books_waiting_for_late_collective_peers_as_imbalance() -> None:
    """Six GPUs a node under TP4: one TP group straddles the two nodes and runs slower, so its
    DP peers wait at every gradient reduction. That wait is on another rank (``imbalance``),
    not communication; the straddling ranks, last to arrive, wait on no one."""
    from conftest import REPO

    from simulator.config.loading import load_scenario
    from simulator.simulate import simulate

    rs = load_scenario(
        REPO / "scenarios" / "llama3-70b-64xh100.yaml",
        [
            "model=llama3-8b", "cluster.nodes=2", "cluster.gpus_per_node=6",
            "parallelism.tp=4", "parallelism.pp=1", "parallelism.pp_schedule=1f1b",
            "training.global_batch=12", "cluster.pricing=null",
        ],
    )  # fmt: skip
    res = simulate(rs, full=True, scaling=False)
    ranks = res.engine.ranks
    inside = [r.acc for k, r in ranks.items() if k in (0, 1, 2, 3)]
    across = [r.acc for k, r in ranks.items() if k in (4, 5, 6, 7)]
    assert all(a["imbalance"] > 0.1 for a in inside)
    assert all(a["imbalance"] == 0.0 for a in across)
    for r in ranks.values():
        assert sum(r.acc.values()) == pytest.approx(res.engine.step_time, rel=1e-9)


@pytest.mark.parametrize("factor", [0.1, 0.5])
def test_an_in_step_factor_below_one_never_beats_the_gpus_peak(factor: float) -> None:
    """``efficiency.in_step_factor`` below 1 (a calibrated step that ran faster than its
    operations timed alone) shortens operations, but none below its FLOPs at the GPU's peak:
    MFU and HFU stay under 1 (a factor of 0.1 once printed an MFU of 438%)."""
    from conftest import REPO

    from simulator.config.loading import load_scenario
    from simulator.simulate import simulate

    path = REPO / "scenarios" / "llama3-8b-8xh100.yaml"
    rs = load_scenario(path, [f"cluster.gpu.efficiency.in_step_factor={factor}"])
    m = simulate(rs, scaling=False).metrics
    base = simulate(load_scenario(path), scaling=False).metrics
    assert m.step_time_s < base.step_time_s
    assert 0 < m.mfu <= m.hfu <= 1.0
