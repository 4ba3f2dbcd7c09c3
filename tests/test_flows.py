"""The flow network's bandwidth sharing: equal shares per link, a flow at its smallest share,
and one re-rate per simulated instant however many flows start or end in it."""

from __future__ import annotations

import pytest
import simpy

from simulator.network.flows import FlowNetwork

CAP = {"shared": 100.0, "wide": 1e6}


def _net() -> tuple[simpy.Environment, FlowNetwork]:
    env = simpy.Environment()
    return env, FlowNetwork(env, lambda key: CAP[key[0]] if isinstance(key, tuple) else CAP[key])


def test_a_burst_shares_the_link_equally_and_costs_linear_events() -> None:
    env, net = _net()
    n, nbytes = 200, 50.0
    done: list[float] = []
    for i in range(n):
        links = net.resolve([("shared", 1.0), (("wide", i), 1.0)])
        net.start(links, nbytes, lambda: done.append(env.now))
    env.run()
    assert len(done) == n
    # n flows at capacity/n each: all end together at n · bytes / capacity
    assert done == pytest.approx([n * nbytes / CAP["shared"]] * n)
    # one re-rate for the burst and one completion per flow (plus the flush): no n² stale
    # completions from re-rating every earlier flow at each start
    events = int(next(env._eid))  # type: ignore[attr-defined]
    assert events <= 3 * n


def test_a_flow_alone_is_rated_at_once() -> None:
    env, net = _net()
    done: list[float] = []
    net.start(net.resolve([("shared", 1.0)]), 100.0, lambda: done.append(env.now))
    env.run()
    assert done == [pytest.approx(1.0)]
    assert int(next(env._eid)) == 1  # type: ignore[attr-defined]  # its completion only


def test_a_late_flow_slows_the_first_from_when_it_starts() -> None:
    env, net = _net()
    done: dict[str, float] = {}

    def late(env: simpy.Environment) -> simpy.events.Event:
        yield env.timeout(0.5)
        net.start(net.resolve([("shared", 1.0)]), 100.0, lambda: done.__setitem__("b", env.now))

    net.start(net.resolve([("shared", 1.0)]), 100.0, lambda: done.__setitem__("a", env.now))
    env.process(late(env))
    env.run()
    # a: 50 bytes alone by 0.5 s, the other 50 at half rate (1 s more); b then alone
    assert done["a"] == pytest.approx(1.5)
    assert done["b"] == pytest.approx(2.0)


def test_weights_count_as_that_many_flows() -> None:
    env, net = _net()
    done: list[float] = []
    net.start(net.resolve([("shared", 3.0)]), 100.0, lambda: done.append(env.now))
    net.start(net.resolve([("shared", 1.0)]), 100.0, lambda: done.append(env.now))
    env.run()
    # four flows' worth share 100/s: 25/s each until the first ends at 4 s
    assert done == [pytest.approx(4.0), pytest.approx(4.0)]
