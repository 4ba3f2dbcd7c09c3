"""The engine across schedules and modes: the pipeline bubble against its analytic fraction,
every schedule's passes once in dependency order, symmetric and full modes agreeing, hybrid
sharding, NIC sharing, the Chrome trace, and every bundled scenario simulated and accounted."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from conftest import inline_scenario, resolve_inline
from test_engine import COMM, SLOW_STORAGE, UNIFORM, assert_accounting, scenario, sim

from simulator.catalog import bundled_scenarios
from simulator.config.loading import load_scenario, resolve_dict
from simulator.config.scenario import ResolvedScenario
from simulator.engine.schedule import bubble_fraction, schedule
from simulator.engine.sim import CATEGORIES, STREAMS, run_engine
from simulator.simulate import simulate

FREE_FABRIC = {"profile": "nvlink4-nvswitch", "bandwidth_gbps": 1e9, "latency_us": 0.0}
# (the GPU's own NVLink ports cap what the switch gives it: free on both sides)
FREE_NVLINK_GPU = {"profile": "h100-sxm-80gb", "nvlink_gbps": 1e9}


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
            gpu=FREE_NVLINK_GPU,
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
    spans = [e for e in res.engine.trace or [] if e["ph"] == "X"]
    names = [e["name"] for e in spans]
    rs_n = sum(n.startswith("reduce_scatter") for n in names)
    ar_n = sum(n.startswith("replica all_reduce") for n in names)
    # FSDP's post-backward hook all-reduces each reduce-scattered shard across the replicas.
    assert rs_n > 1 and ar_n == rs_n
    assert res.metrics.breakdown_s["comm_dp"] > 0


def test_hybrid_replica_all_reduce_overlaps_backward() -> None:
    """Unit by unit, the replicas' all-reduce runs beside the backward: much of it is hidden
    (here 46%; the last units' reductions have no backward left to hide behind), so the step
    is shorter than with no overlap at all (all of it exposed)."""
    base = SYM_VS_FULL["64-fsdp-hybrid-pp2"]
    over = sim(base).metrics
    none = sim({**base, "parallelism": {**base["parallelism"], "overlap": {"dp_grad": False}}})
    assert over.step_time_s < none.metrics.step_time_s
    assert over.breakdown_s["comm_dp"] < 0.6 * none.metrics.breakdown_s["comm_dp"]


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
    # Spans on one thread nest: any two are disjoint or one holds the other, exactly in the
    # whole nanoseconds Perfetto reads (it drops a slice that overlaps its neighbour by 1 ns).
    by_thread: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for e in spans:
        t0 = round(e["ts"] * 1e3)
        by_thread.setdefault((e["pid"], e["tid"]), []).append((t0, t0 + round(e["dur"] * 1e3)))
    for key, ivs in by_thread.items():
        ivs.sort(key=lambda iv: (iv[0], -iv[1]))
        stack: list[int] = []
        for start, end in ivs:
            while stack and stack[-1] <= start:
                stack.pop()
            if stack:
                assert end <= stack[-1], (key, start, end, stack[-1])
            stack.append(end)
    # The spans cover the step: every class computes, and the last span ends with the step.
    step_us = res.metrics.step_time_s * 1e6
    compute = [e for e in spans if threads[(e["pid"], e["tid"])].startswith("compute")]
    assert {e["pid"] for e in compute} == set(procs)
    # (times are whole nanoseconds, so that touching spans stay touching in Perfetto)
    assert max(e["ts"] + e["dur"] for e in spans) == pytest.approx(step_us, abs=1e-3)
    assert min(e["ts"] for e in compute) == pytest.approx(0.0, abs=1e-6)
    assert all(round(e["ts"] * 1e3) == pytest.approx(e["ts"] * 1e3, abs=1e-6) for e in spans)
    # The compute stream holds the busy time of the class it draws (symmetric mode).
    if not full:
        for stage, rr in res.engine.classes.items():
            top = _merged([(e["ts"], e["ts"] + e["dur"]) for e in compute if e["pid"] == stage + 1])
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


@pytest.mark.parametrize(
    ("gpn", "par"),
    [
        (6, {"tp": 4, "pp": 2}),  # the second TP group straddles nodes 0 and 1
        (6, {"cp": 4}),
        (8, {"sharding": {"kind": "fsdp", "strategy": "hybrid_shard", "shard_group": 3}}),
    ],
    ids=["tp4-on-6", "cp4-on-6", "shard3-on-8"],
)
def test_groups_straddling_nodes_are_simulated_rank_by_rank(gpn: int, par: dict[str, Any]) -> None:
    """One rank per stage stands for every rank only where each group sits on nodes as the
    first does; otherwise simulate runs every rank (and says so), as --full does."""
    from simulator.simulate import simulate

    nodes = 4 if gpn == 6 else 3
    data = inline_scenario("llama3-8b", gpus_per_node=gpn, nodes=nodes, global_batch=48, **par)
    rs = resolve_dict(data)
    auto = simulate(rs, scaling=False)
    full = simulate(rs, full=True, scaling=False)
    assert auto.metrics.mode == "full" and auto.notes
    assert auto.metrics.step_time_s == pytest.approx(full.metrics.step_time_s, rel=1e-12)
    aligned = simulate(resolve_inline("llama3-8b", nodes=2, global_batch=32, tp=4), scaling=False)
    assert aligned.metrics.mode != "full"
    assert not any("straddle" in n for n in aligned.notes), aligned.notes


def test_no_input_to_read_is_no_stall() -> None:
    from simulator.simulate import simulate

    data = inline_scenario("llama3-8b", nodes=2, global_batch=32, tp=2)
    data["training"]["input_bytes_per_token"] = 0
    rs = resolve_dict(data)
    for full in (False, True):
        m = simulate(rs, full=full, scaling=False).metrics
        assert m.breakdown_s["data_stall"] == 0 and m.step_time_s > 0


def test_straddling_tp_groups_are_not_timed_from_rank_0s_group() -> None:
    """TP4 on 6-GPU nodes: ranks 4-7 form a TP group across two nodes, so TP cannot be timed
    analytically from rank 0's in-node group; the flow network times each group, and the step
    waits for the slow one."""
    from simulator.engine.sim import Simulation

    data = inline_scenario("llama3-8b", gpus_per_node=6, nodes=2, global_batch=12, tp=4)
    rs = resolve_dict(data)
    assert Simulation(rs, full=True)._analytic == set()
    straddling = simulate(rs, scaling=False).metrics.step_time_s
    inside = resolve_dict(inline_scenario("llama3-8b", nodes=2, global_batch=16, tp=4))
    per_sample = simulate(inside, scaling=False).metrics.step_time_s / 16 * 12
    assert straddling > per_sample * 1.05  # the straddling group's TP crosses the network


def test_full_mode_reports_each_stage_as_the_mean_of_its_ranks() -> None:
    """A straddling TP group is slower than an in-node one: full mode's breakdown averages the
    stage's ranks (each rank's categories sum to the step, so the mean does too)."""
    from simulator.engine.sim import run_engine

    data = inline_scenario("llama3-8b", gpus_per_node=6, nodes=2, global_batch=12, tp=4)
    res = run_engine(resolve_dict(data), full=True)
    members = [r for r in res.ranks.values() if r.stage == 0]
    tp = sorted(r.acc["comm_tp"] for r in members)
    assert tp[-1] > tp[0] * 1.5  # the straddling group's ranks
    assert res.classes[0].acc["comm_tp"] == pytest.approx(sum(tp) / len(tp))
    assert sum(res.classes[0].acc.values()) == pytest.approx(res.step_time, rel=1e-9)


def test_leaves_that_cut_groups_unevenly_run_every_rank() -> None:
    # 4 nodes under leaves of 3 on 4:1 up-links: the TP x CP group of two nodes sits inside
    # the first leaf and straddles the next; symmetric mode's one rank per stage was the fast
    # kind (29% optimistic). Such a layout now runs every rank and says why.
    model = {"name": "small", "layers": 16, "hidden": 2048, "heads": 16, "vocab": 32000}
    topo = {"kind": "fat_tree", "oversubscription": 4.0, "nodes_per_leaf": 3}
    data = scenario(4, 2, model=model, seq=2048, micro_batches=4, nics=2, topology=topo, tp=4, cp=2)
    sym, full = sim(data), sim(data, full=True)
    assert sym.metrics.step_time_s == pytest.approx(full.metrics.step_time_s, rel=1e-12)
    assert any("leaf switch" in n for n in sym.notes)
    # Leaves that divide the groups keep symmetric mode, and agree with it.
    topo["nodes_per_leaf"] = 2
    sym, full = sim(data), sim(data, full=True)
    assert not any("leaf switch" in n for n in sym.notes)
    assert sym.metrics.step_time_s == pytest.approx(full.metrics.step_time_s, rel=1e-9)
