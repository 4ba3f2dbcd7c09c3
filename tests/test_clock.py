"""The per-instant event queue (engine.clock) processes events in SimPy's own order, so the
engine's results do not move: by time, then priority, then the order of scheduling, with events
scheduled at the current instant joining the end of their priority's queue."""

from __future__ import annotations

import random
from typing import Any

import pytest
import simpy
from simpy.events import URGENT

from simulator.engine import setup
from simulator.engine.clock import BucketEnvironment
from simulator.engine.sim import run_engine


def _script(env: simpy.Environment, seed: int, log: list[Any]) -> None:
    """Processes that sleep for a few repeated delays (so many events share an instant), fire
    events at the current instant, and interrupt each other."""
    rnd = random.Random(seed)

    def worker(name: int) -> Any:
        for step in range(20):
            try:
                yield env.timeout(rnd.choice([0, 0.5, 1.0, 1.5]))
                log.append((env.now, name, step))
                if rnd.random() < 0.3:
                    ev = env.event()
                    ev.callbacks.append(lambda e, n=name: log.append((env.now, n, "cb")))
                    ev.succeed()
                if rnd.random() < 0.1:
                    urgent = simpy.Event(env)
                    urgent._ok, urgent._value = True, None
                    urgent.callbacks.append(lambda e, n=name: log.append((env.now, n, "urgent")))
                    env.schedule(urgent, URGENT)
            except simpy.Interrupt:
                log.append((env.now, name, "interrupted"))

    procs = [env.process(worker(i)) for i in range(12)]

    def tiny() -> Any:
        # delays too small to move the clock at t = 1e6, and an urgent event at a later
        # instant queued after normal ones there
        yield env.timeout(1e6)
        for d in (1e-12, 0.0, 5e-11):
            yield env.timeout(d)
            log.append((env.now, "tiny", d))
        for i in range(3):
            env.timeout(2.0).callbacks.append(lambda e, i=i: log.append((env.now, "n", i)))
        late = simpy.Event(env)
        late._ok, late._value = True, None
        late.callbacks.append(lambda e: log.append((env.now, "urgent-late")))
        env.schedule(late, URGENT, 2.0)

    env.process(tiny())

    def interrupter() -> Any:
        for _ in range(10):
            yield env.timeout(rnd.choice([0.5, 1.0]))
            victim = procs[rnd.randrange(len(procs))]
            if victim.is_alive:
                victim.interrupt()

    env.process(interrupter())


@pytest.mark.parametrize("seed", range(5))
def test_same_order_as_simpy(seed: int) -> None:
    logs = []
    for env in (simpy.Environment(), BucketEnvironment()):
        log: list[Any] = []
        _script(env, seed, log)
        env.run()
        logs.append(log)
    assert logs[0] == logs[1]
    assert len(logs[0]) > 100


def test_run_until_and_peek_as_simpy() -> None:
    seen = []
    for env in (simpy.Environment(), BucketEnvironment()):
        env.process(_sleeper(env))
        got = [env.peek()]
        env.run(until=1.0)
        got += [env.now, env.peek()]
        env.run(until=4.0)
        got += [env.now, env.peek()]
        env.run()
        got += [env.now, env.peek()]
        with pytest.raises(simpy.core.EmptySchedule):
            env.step()
        seen.append(got)
    assert seen[0] == seen[1]
    assert seen[0][-2:] == [5.0, float("inf")]


def _sleeper(env: simpy.Environment) -> Any:
    yield env.timeout(2.0)
    yield env.timeout(3.0)


def test_full_mode_is_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import resolve_inline

    rs = resolve_inline("llama3-8b", nodes=4, tp=2, pp=2, global_batch=64)
    fast = run_engine(rs, full=True)
    monkeypatch.setattr(setup, "BucketEnvironment", simpy.Environment)
    ref = run_engine(rs, full=True)
    assert fast.step_time == ref.step_time
    assert fast.events == ref.events
    for rank, rr in ref.ranks.items():
        assert fast.ranks[rank].acc == rr.acc
