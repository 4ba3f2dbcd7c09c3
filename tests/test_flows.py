"""The flow network's bandwidth sharing: :class:`FlowNetwork` in a bare SimPy environment, finish
times against hand-computed ones, and one re-rate per simulated instant however many flows start
or end in it."""

from __future__ import annotations

import random

import pytest
import simpy

from simulator.network.flows import FlowNetwork

REL = 1e-12


def _net(caps: dict[str, float]) -> tuple[simpy.Environment, FlowNetwork]:
    env = simpy.Environment()
    return env, FlowNetwork(env, lambda key: caps[key])


def _start(
    env: simpy.Environment,
    net: FlowNetwork,
    at: float,
    links: list[tuple[str, float]],
    nbytes: float,
    done: dict[str, float],
    name: str,
) -> None:
    def proc():
        if at > 0:
            yield env.timeout(at)
        yield net.transfer(links, nbytes)
        done[name] = env.now

    env.process(proc())


@pytest.mark.parametrize(("size", "cap"), [(1e6, 1e9), (3.3e8, 46e9), (7.0, 3.0)])
def test_single_flow_finishes_at_size_over_capacity(size: float, cap: float) -> None:
    env, net = _net({"L": cap})
    done: dict[str, float] = {}
    _start(env, net, 0, [("L", 1.0)], size, done, "a")
    env.run()
    assert done["a"] == pytest.approx(size / cap, rel=REL)


@pytest.mark.parametrize("k", [2, 3, 8])
def test_simultaneous_flows_share_a_link_equally(k: int) -> None:
    size, cap = 5e6, 2e9
    env, net = _net({"L": cap})
    done: dict[str, float] = {}
    for i in range(k):
        _start(env, net, 0, [("L", 1.0)], size, done, str(i))
    env.run()
    for i in range(k):
        assert done[str(i)] == pytest.approx(k * size / cap, rel=REL)


def test_weighted_flows_count_as_that_many_flows() -> None:
    # Weight 3 (S bytes) and weight 1 (2S bytes): total weight 4, each moves at cap/4 until the
    # first has its S bytes through (4S/cap); the other then has the link: S more at cap.
    size, cap = 1e6, 1e9
    env, net = _net({"L": cap})
    done: dict[str, float] = {}
    _start(env, net, 0, [("L", 3.0)], size, done, "w3")
    _start(env, net, 0, [("L", 1.0)], 2 * size, done, "w1")
    env.run()
    assert done["w3"] == pytest.approx(4 * size / cap, rel=REL)
    assert done["w1"] == pytest.approx(5 * size / cap, rel=REL)
    # Alone, a flow of weight 3 stands for three: it gets a third of the link.
    env, net = _net({"L": cap})
    done = {}
    _start(env, net, 0, [("L", 3.0)], size, done, "w3")
    env.run()
    assert done["w3"] == pytest.approx(3 * size / cap, rel=REL)


def test_flow_crossing_two_links_is_paced_by_the_slower_share() -> None:
    # X crosses A (cap 10) and B (cap 4); Y crosses A only. Shares: X min(10/2, 4/1) = 4,
    # Y 10/2 = 5 (equal share per link, not max-min). X: 8 bytes -> done at 2; Y then has
    # 20 - 10 = 10 bytes left alone on A at 10/s -> done at 3.
    env, net = _net({"A": 10.0, "B": 4.0})
    done: dict[str, float] = {}
    _start(env, net, 0, [("A", 1.0), ("B", 1.0)], 8.0, done, "X")
    _start(env, net, 0, [("A", 1.0)], 20.0, done, "Y")
    env.run()
    assert done["X"] == pytest.approx(2.0, rel=REL)
    assert done["Y"] == pytest.approx(3.0, rel=REL)


def test_late_flow_slows_the_first_one() -> None:
    # Flow 1: 10 bytes on a 1 B/s link from t=0 (6 left at t=4). Flow 2: 2 bytes from t=4.
    # Both at 0.5 B/s: flow 2 done at 8; flow 1 has 6 - 2 = 4 left, alone at 1 B/s: done at 12.
    env, net = _net({"L": 1.0})
    done: dict[str, float] = {}
    _start(env, net, 0, [("L", 1.0)], 10.0, done, "first")
    _start(env, net, 4.0, [("L", 1.0)], 2.0, done, "late")
    env.run()
    assert done["late"] == pytest.approx(8.0, rel=REL)
    assert done["first"] == pytest.approx(12.0, rel=REL)


def test_staggered_flows_on_a_chain_of_links() -> None:
    # Three flows, two links: P on A+B, Q on A from t=1, R on B from t=2. Caps 6 and 3.
    # t in [0,1): P alone: min(6, 3) = 3 -> 3 bytes moved.
    # t in [1,2): P min(6/2, 3) = 3, Q 6/2 = 3 -> P 6 moved, Q 3 moved.
    # t >= 2: P min(3, 3/2) = 1.5, Q 3, R 1.5. P has 12 - 6 = 6 left, Q 9 - 3 = 6, R 3.
    #   R done at 2 + 2 = 4 (P has 3 left, Q 0 left: Q done at 4 too).
    #   t >= 4: P alone: 3 left at 3/s -> done at 5.
    env, net = _net({"A": 6.0, "B": 3.0})
    done: dict[str, float] = {}
    _start(env, net, 0, [("A", 1.0), ("B", 1.0)], 12.0, done, "P")
    _start(env, net, 1.0, [("A", 1.0)], 9.0, done, "Q")
    _start(env, net, 2.0, [("B", 1.0)], 3.0, done, "R")
    env.run()
    assert done["Q"] == pytest.approx(4.0, rel=REL)
    assert done["R"] == pytest.approx(4.0, rel=REL)
    assert done["P"] == pytest.approx(5.0, rel=REL)


def test_empty_transfers_complete_at_once() -> None:
    # Through the event queue (never inside the call that starts them), but at once.
    env, net = _net({"L": 1.0})
    events = [net.transfer([("L", 1.0)], 0.0), net.transfer([], 10.0)]
    assert not any(e.triggered for e in events)
    env.run()
    assert all(e.processed for e in events)
    assert env.now == 0.0
    assert net.links["L"].flows == {}


def test_flow_network_is_reproducible() -> None:
    # Flows that start and end at the same instants, over and over: the same finish times, to
    # the last bit, whatever the memory addresses of the flow objects (no set-order effects).
    def run() -> list[float]:
        rnd = random.Random(0)
        env = simpy.Environment()
        caps = {f"L{i}": rnd.choice([1.0, 3.0, 7.0]) / 3 for i in range(4)}
        net = FlowNetwork(env, lambda key: caps[key])
        done: dict[int, float] = {}

        def proc(j: int, at: float, links: list[tuple[str, float]], nbytes: float):
            yield env.timeout(at)
            for _ in range(20):
                yield net.transfer(links, nbytes)
            done[j] = env.now

        for j in range(16):
            links = [(f"L{i}", 1.0) for i in rnd.sample(range(4), rnd.randint(1, 3))]
            env.process(proc(j, rnd.choice([0.0, 0.1, 0.7]), links, rnd.choice([0.3, 1.1, 2.0])))
        env.run()
        return [done[j] for j in range(16)]

    first = run()
    junk = []
    for k in range(12):
        junk.append([object() for _ in range(331 * (k + 1) ** 2)])
        assert run() == first


def test_a_burst_costs_linear_events() -> None:
    # 200 flows starting together on one shared link (each with a private one too): one
    # re-rate for the burst and a completion per flow, not a re-rate of every earlier flow at
    # each start and the stale completions that leaves.
    env, net = _net({"shared": 100.0} | {f"own{i}": 1e6 for i in range(200)})
    done: dict[str, float] = {}
    for i in range(200):
        _start(env, net, 0, [("shared", 1.0), (f"own{i}", 1.0)], 50.0, done, str(i))
    env.run()
    assert all(t == pytest.approx(200 * 50.0 / 100.0, rel=REL) for t in done.values())
    assert int(next(env._eid)) <= 5 * 200  # type: ignore[attr-defined]


def test_a_flow_alone_is_rated_at_once() -> None:
    env, net = _net({"L": 100.0})
    out: list[float] = []
    net.start(net.resolve([("L", 1.0)]), 100.0, lambda: out.append(env.now))
    env.run()
    assert out == [pytest.approx(1.0)]
    assert int(next(env._eid)) == 1  # type: ignore[attr-defined]  # its completion only
