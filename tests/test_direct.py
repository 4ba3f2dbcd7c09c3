"""The step without the event queue (engine.direct) against the event-by-event engine.

On random pipelines whose sends block the compute stream and whose data-parallel reduction
follows the pipeline (the domain of :mod:`simulator.engine.direct`: every GPU, fabric, network,
schedule, ZeRO-0/1/2 and recomputation choice of the random generator), the direct walk gives
the step time, every class's finish and every category of its time equal to the event engine's
(to rounding), or declines: where two transfers would share a link at once, or outside its
domain, it returns ``None`` and the event engine runs.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from test_invariants_random import _draw

from simulator.config.loading import resolve_dict
from simulator.engine.direct import run_direct
from simulator.engine.periodic import run_periodic
from simulator.engine.sim import run_engine
from simulator.errors import UserError

LAYOUTS = 300
BLOCKING = {
    "profile": "megatron-lm-2021",
    "overlap": {
        "pp_p2p": {"value": False, "source": "test: blocking sends"},
        "dp_grad": {"value": False, "source": "test: reduction after the pipeline"},
        "param_gather": {"value": False, "source": "test: ZeRO-1/2 gather after the step"},
    },
}


def _pipeline(rnd: random.Random) -> Any:
    """A random pipeline layout in the direct domain's reach that resolves."""
    while True:
        data = _draw(rnd)
        par = data["parallelism"]
        par["pp"] = rnd.choice([2, 4, 8])
        if rnd.random() < 0.8:
            par["cp"] = 1
        if rnd.random() < 0.7:
            par["sharding"] = {"kind": "zero", "stage": rnd.choice([0, 1])}
        data["software"] = dict(BLOCKING)
        if rnd.random() < 0.3:  # every GPU at the expected slowest one's pace
            data.setdefault("run", {})["stragglers"] = "expected"
        if rnd.random() < 0.3:  # Megatron's asynchronous TP backward
            tp_bwd = {"tp_backward": {"value": True, "source": "test"}}
            data["software"]["overlap"] = {**BLOCKING["overlap"], **tp_bwd}
        if rnd.random() < 0.3:  # PyTorch's early-stopping checkpoint under full recomputation
            par["recompute"] = "full"
            data["software"]["recompute_early_stop"] = {"value": True, "source": "test"}
        gpus = data["cluster"]["nodes"] * data["cluster"]["gpus_per_node"]
        dp = max(1, gpus // (par["tp"] * par["pp"] * par["cp"]))
        m = par["pp"] * rnd.randint(1, 6)
        data["training"]["global_batch"] = dp * data["training"]["micro_batch"] * m
        try:
            return resolve_dict(data)
        except UserError:
            continue


def _same(a: Any, b: Any) -> None:
    scale = b.step_time
    assert a.step_time == pytest.approx(b.step_time, rel=1e-9)
    assert a.loader_done == pytest.approx(b.loader_done, rel=1e-9)
    for stage, rb in b.classes.items():
        ra = a.classes[stage]
        assert ra.finish == pytest.approx(rb.finish, rel=1e-9, abs=1e-12 * scale)
        for k, v in rb.acc.items():
            assert ra.acc[k] == pytest.approx(v, rel=1e-9, abs=1e-9 * scale), (k, stage)


def test_direct_equals_the_event_engine_on_random_pipelines() -> None:
    rnd = random.Random(21)
    taken = declined = 0
    for _ in range(LAYOUTS):
        rs = _pipeline(rnd)
        fast = run_direct(rs)
        if fast is None:
            declined += 1
            continue
        taken += 1
        assert fast.direct
        _same(fast, run_engine(rs))
    print(f"direct on {taken} of {LAYOUTS} layouts, declined on {declined}")
    assert taken >= 150 and declined > 0, (taken, declined)


def test_overlapped_or_sharded_work_is_left_to_the_event_engine() -> None:
    rnd = random.Random(3)
    rs = _pipeline(rnd)
    for stack in (
        {"profile": "megatron-core"},  # sends on their own streams, reduction overlapped
        {
            "profile": "megatron-lm-2021",
            "overlap": {"dp_grad": {"value": True, "source": "test"}},
        },
    ):
        data: dict[str, Any] = {
            "name": "x",
            "cluster": {
                "gpu": "h100-sxm-80gb",
                "gpus_per_node": 8,
                "nodes": 2,
                "fabric": "nvlink4-nvswitch",
                "network": {"profile": "ib-ndr-400"},
            },
            "model": {"layers": 8, "hidden": 2048, "heads": 16, "vocab": 32000},
            "training": {"seq_len": 1024, "global_batch": 64, "micro_batch": 1},
            "parallelism": {"tp": 2, "pp": 4},
            "software": stack,
        }
        assert run_direct(resolve_dict(data)) is None
    assert rs is not None


def test_sends_that_would_share_a_link_are_left_to_the_event_engine() -> None:
    # Eight pipeline stages on one node of eight sockets, a GPU each: every send crosses the
    # shared socket link, forward and backward sends meet there, so the walk must decline.
    data: dict[str, Any] = {
        "name": "shared-root",
        "cluster": {
            "gpu": "l40s",
            "gpus_per_node": 8,
            "nodes": 1,
            "fabric": {"profile": "pcie4-host", "sockets": 8},
        },
        "model": {"layers": 16, "hidden": 2048, "heads": 16, "vocab": 32000},
        "training": {"seq_len": 1024, "global_batch": 32, "micro_batch": 1},
        "parallelism": {"pp": 8},
        "software": BLOCKING,
    }
    rs = resolve_dict(data)
    assert run_direct(rs) is None
    assert run_periodic(rs).step_time == pytest.approx(run_engine(rs).step_time, rel=1e-9)
