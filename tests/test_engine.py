"""Physics of the step simulation: accounting, monotonicity, pipeline bubbles, symmetric vs full
mode, NIC contention, traces, and the bundled scenarios.

Scenarios use catalogue profiles (``hardware_profiles/``) with inline overrides and small models
with few micro-batches, so the whole file runs in seconds."""

from __future__ import annotations

import copy
import itertools
import json
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from simulator.catalog import bundled_scenarios, load_catalog
from simulator.config.loading import load_scenario, resolve_dict
from simulator.config.scenario import ResolvedScenario
from simulator.engine.schedule import bubble_fraction, schedule
from simulator.engine.sim import BUSY, CATEGORIES, STREAMS, run_engine
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
    **par: Any,
) -> dict[str, Any]:
    """A scenario mapping; the global batch gives ``micro_batches`` per pipeline."""
    cluster: dict[str, Any] = {
        "gpu": "h100-sxm-80gb",
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
    # Nothing but compute, the optimizer and (possibly) waiting for the data loader.
    assert m.step_time_s == pytest.approx(
        m.breakdown_s["compute"] + m.breakdown_s["optimizer"] + m.breakdown_s["data_stall"],
        rel=1e-12,
    )


# -- accounting ---------------------------------------------------------------------------------
SLOW_STORAGE = {"profile": "nfs", "read_gbps_per_client": 0.002, "latency_ms": 5.0}

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
FREE_FABRIC = {"profile": "nvlink4-nvswitch", "bandwidth_gbps": 1e9, "latency_us": 0.0}


@pytest.mark.parametrize(
    ("kind", "p", "m", "v"),
    [
        ("1f1b", 2, 4, 1),
        ("1f1b", 4, 8, 1),
        ("1f1b", 8, 16, 1),
        ("gpipe", 4, 8, 1),
        ("gpipe", 4, 4, 1),
        ("interleaved", 4, 8, 2),
        ("interleaved", 2, 4, 4),
    ],
)
def test_pipeline_bubble_matches_the_analytic_fraction(kind: str, p: int, m: int, v: int) -> None:
    sched: dict[str, Any] = {"kind": kind}
    if kind == "interleaved":
        sched["virtual_stages"] = v
    res = sim(
        scenario(
            1,
            p,
            model=UNIFORM,
            seq=4096,
            micro_batches=m,
            pp=p,
            pp_schedule=sched,
            fabric=FREE_FABRIC,
        )
    )
    b = res.metrics.breakdown_s
    step = res.metrics.step_time_s
    assert b["comm_pp"] < 1e-6 * step  # communication is (nearly) free
    assert sum(b[c] for c in COMM) < 1e-6 * step
    # Every stage ends with the optimizer; the rest of the step is the pipeline, whose idle
    # share (bubble during fill and drain) is the analytic fraction.
    pipeline = step - b["optimizer"]
    idle = pipeline - b["compute"]
    want = (p - 1) / (v * m + p - 1)
    assert bubble_fraction(kind, p, m, v) == pytest.approx(want)
    assert idle / pipeline == pytest.approx(want, rel=0.01)
    assert (b["pp_bubble"] + b["imbalance"] + b["comm_pp"]) / pipeline == pytest.approx(
        want, rel=0.01
    )


@pytest.mark.parametrize(
    ("kind", "p", "m", "v"),
    [
        ("1f1b", 4, 8, 1),
        ("1f1b", 4, 2, 1),
        ("gpipe", 3, 5, 1),
        ("interleaved", 4, 8, 2),
        ("interleaved", 2, 6, 3),
    ],
)
def test_schedules_run_every_pass_once_in_dependency_order(
    kind: str, p: int, m: int, v: int
) -> None:
    for stage in range(p):
        order = schedule(kind, stage, p, m, v)
        want = {(k, mb, ch) for k in "FB" for mb in range(m) for ch in range(v)}
        assert len(order) == len(want) and set(order) == want
        for mb, ch in itertools.product(range(m), range(v)):
            assert order.index(("F", mb, ch)) < order.index(("B", mb, ch))
        if kind == "1f1b":
            # At most p - stage micro-batches in flight (the point of 1F1B).
            live = peak = 0
            for k, _mb, _ch in order:
                live += 1 if k == "F" else -1
                peak = max(peak, live)
            assert peak == min(p - stage, m)


# -- symmetric vs full -------------------------------------------------------------------------
SYM_VS_FULL: dict[str, dict[str, Any]] = {
    "8-dp8": scenario(1, 8, micro_batches=4),
    "16-tp8-dp2": scenario(2, 8, tp=8, micro_batches=4),
    "32-tp4-pp2-dp4": scenario(4, 8, tp=4, pp=2, micro_batches=4),
    "64-tp8-pp2-dp4": scenario(8, 8, tp=8, pp=2, micro_batches=4),
    "256-tp8-pp4-dp8": scenario(32, 8, tp=8, pp=4, micro_batches=4),
    # Contended links where float rounding used to break the ranks' lockstep in full mode.
    "64-tp8-zero3-dp8-2nics": scenario(
        8,
        8,
        tp=8,
        network="roce-400",
        nics=2,
        fabric="nvlink3-nvswitch",
        recompute="full",
        overlap={"tp_comm": True},
        micro_batches=4,
        sharding={"kind": "zero", "stage": 3},
        topology={"kind": "single_switch"},
    ),
    "32-tp8-cp2-pp2-oversubscribed": scenario(
        4,
        8,
        tp=8,
        cp=2,
        pp=2,
        fabric="pcie4-host",
        network="tcp-100gbe",
        nics=2,
        micro_batches=2,
        recompute="full",
        pp_schedule={"kind": "gpipe"},
        topology={"kind": "fat_tree", "oversubscription": 4.0, "nodes_per_leaf": 1},
    ),
    "64-fsdp-hybrid-pp2": scenario(
        8, 8, pp=2, micro_batches=2, sharding={"kind": "fsdp", "strategy": "hybrid_shard"}
    ),
}


@pytest.mark.parametrize("name", list(SYM_VS_FULL))
def test_symmetric_and_full_modes_agree(name: str) -> None:
    data = SYM_VS_FULL[name]
    sym, full = sim(data), sim(data, full=True)
    assert sym.metrics.mode == "symmetric" and full.metrics.mode == "full"
    assert len(full.engine.ranks) == full.metrics.gpus
    step = sym.metrics.step_time_s
    assert full.metrics.step_time_s == pytest.approx(step, rel=0.01)
    for cat in CATEGORIES:
        assert abs(full.metrics.breakdown_s[cat] - sym.metrics.breakdown_s[cat]) <= 0.01 * step, cat
    # Every rank of a class does the same in a uniform cluster.
    for rr in full.engine.ranks.values():
        rep = sym.engine.classes[rr.stage]
        for cat in CATEGORIES:
            assert abs(rr.acc[cat] - rep.acc[cat]) <= 0.01 * step, (rr.rank, cat)


def test_full_mode_is_reproducible() -> None:
    rs = resolve_dict(SYM_VS_FULL["32-tp8-cp2-pp2-oversubscribed"])
    first = run_engine(rs, full=True).step_time
    junk = []
    for k in range(6):
        junk.append([object() for _ in range(1009 * (k + 1) ** 2)])  # move objects around
        assert run_engine(rs, full=True).step_time == first


def test_hybrid_sharding_reduces_over_replicas() -> None:
    res = sim(SYM_VS_FULL["64-fsdp-hybrid-pp2"], full=True, trace=True)
    names = {e["name"] for e in res.engine.trace or [] if e["ph"] == "X"}
    assert "replica all_reduce" in names
    assert res.metrics.breakdown_s["comm_dp"] > 0


# -- contention ----------------------------------------------------------------------------------
@pytest.mark.parametrize("full", [False, True])
def test_dp_ranks_sharing_a_nic_slow_each_other(full: bool) -> None:
    comm, step = {}, {}
    for nics in (1, 2, 8):
        m = sim(scenario(2, 8, nics=nics, micro_batches=2), full=full).metrics
        comm[nics], step[nics] = m.breakdown_s["comm_dp"], m.step_time_s
    assert comm[1] > comm[2] > comm[8] > 0
    assert step[1] > step[2] > step[8]
    # Eight GPUs on one NIC move their gradients at an eighth of its rate.
    assert comm[1] > 3 * comm[8]


# -- trace ---------------------------------------------------------------------------------------
TRACE_CASES = {
    "tp-pp-dp": scenario(2, 4, tp=2, pp=2, micro_batches=4, nics=4),
    "zero3-interleaved": scenario(
        2,
        4,
        pp=2,
        micro_batches=4,
        nics=2,
        sharding={"kind": "zero", "stage": 3},
        pp_schedule={"kind": "interleaved", "virtual_stages": 2},
    ),
    "tp-across-nodes-starved": scenario(2, 4, tp=8, nics=4, storage=SLOW_STORAGE),
}


@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("case", sorted(TRACE_CASES))
def test_trace_is_chrome_json_with_nested_spans(case: str, full: bool) -> None:
    res = sim(TRACE_CASES[case], full=full, trace=True)
    trace = res.engine.trace
    assert trace
    back = json.loads(json.dumps(trace))
    assert back == trace
    meta = [e for e in trace if e["ph"] == "M"]
    spans = [e for e in trace if e["ph"] == "X"]
    assert {e["ph"] for e in trace} == {"M", "X"}
    procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert all(isinstance(n, str) and n for n in [*procs.values(), *threads.values()])
    for e in spans:
        assert e["pid"] in procs
        assert (e["pid"], e["tid"]) in threads
        assert e["dur"] > 0 and e["ts"] >= 0
        assert isinstance(e["name"], str) and e["name"]
        assert threads[(e["pid"], e["tid"])].split(" ")[0] in STREAMS
    # Spans on one thread nest: any two are disjoint or one holds the other.
    eps = 1e-3  # µs
    by_thread: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in spans:
        by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for key, ivs in by_thread.items():
        ivs.sort(key=lambda iv: (iv[0], -iv[1]))
        stack: list[float] = []
        for start, end in ivs:
            while stack and stack[-1] <= start + eps:
                stack.pop()
            if stack:
                assert end <= stack[-1] + eps, (key, start, end, stack[-1])
            stack.append(end)
    # The spans cover the step: every class computes, and the last span ends with the step.
    step_us = res.metrics.step_time_s * 1e6
    compute = [e for e in spans if threads[(e["pid"], e["tid"])].startswith("compute")]
    assert {e["pid"] for e in compute} == set(procs)
    assert max(e["ts"] + e["dur"] for e in spans) == pytest.approx(step_us, rel=1e-9)
    assert min(e["ts"] for e in compute) == pytest.approx(0.0, abs=1e-6)
    # The compute stream holds the busy time of the class it draws (symmetric mode).
    if not full:
        for stage, rr in res.engine.classes.items():
            top = _merged([(e["ts"], e["ts"] + e["dur"]) for e in compute if e["pid"] == stage])
            busy = (rr.acc["compute"] + rr.acc["optimizer"]) * 1e6
            assert top >= busy * (1 - 1e-6)


def _merged(ivs: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(ivs):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


# -- bundled scenarios -------------------------------------------------------------------------
@pytest.mark.parametrize("path", bundled_scenarios(), ids=lambda p: p.stem)
def test_bundled_scenario_simulates_and_accounts(path) -> None:
    rs: ResolvedScenario = load_scenario(path)
    res = simulate(rs, scaling=False)
    m = res.metrics
    assert m.step_time_s > 0 and m.tokens_per_s > 0
    assert m.busy_s + sum(m.idle_s.values()) == pytest.approx(m.step_time_s, rel=1e-3)
    assert_accounting(res, rel=1e-3)
    json.dumps(res.as_dict())
