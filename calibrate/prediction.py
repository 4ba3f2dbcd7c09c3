"""What ``validate`` predicts for a live run: the probe transformer's step on the calibrated
profiles at a layout, its shares by category, and the references that correct it for how busy
the host is and how fast the machine runs now."""

from __future__ import annotations

import os
from typing import Any

from .scenario import cpu_comm_overlaps, job_scenario


def loopback_network(profile: str) -> dict[str, Any]:
    """A network profile for 'nodes' that are process groups on this one host: the same loopback
    transport as the calibrated fabric, so its figures are the fabric's, its in-step
    achievable fraction too (a transfer inside a training step shares the host with the same
    compute, whichever tier the layout calls it)."""
    from simulator.catalog import load_catalog
    from simulator.config.hardware import FabricProfile

    fab = load_catalog().get(f"{profile}-fabric", "fabric")
    assert isinstance(fab, FabricProfile)
    src = (
        f"no inter-node probe data: the 'nodes' are process groups on one host, so this is "
        f"the intra-host fit of {profile}-fabric"
    )
    return {
        "name": f"{profile}-loopback-network",
        "kind": "network",
        "display_name": "loopback (derived from the fabric fit)",
        "technology": "ethernet_tcp",
        "port_gbps": {"value": fab.bandwidth_gbps.value * 8, "source": src + " (×8 bits)"},
        "latency_us": {"value": fab.latency_us.value, "source": src},
        "achievable_fraction": {
            "value": fab.achievable_fraction.value,
            "source": f"{src}: the achievable_fraction {profile}-fabric gives",
        },
        "tail_latency": {
            "sigma": {
                "value": 0.05,
                "source": "assumed (not used by the deterministic step simulation)",
            }
        },
    }


def predict(
    profile: str,
    model_cfg: dict[str, Any],
    nproc: int,
    nodes: int,
    overlap: bool = True,
    stragglers: bool = False,
    in_step_factor: tuple[float, str] | None = None,
) -> tuple[float, str, dict[str, float]]:
    """Predicted step time of the probe transformer ``model_cfg`` at ``nodes × nproc`` on the
    calibrated profiles, a note, and the step's shares by category (compute, comm_dp, …);
    ``in_step_factor`` (value, source) replaces the profile's own."""
    from simulator.catalog import load_catalog
    from simulator.config.loading import resolve_dict
    from simulator.config.yamlio import load_text
    from simulator.simulate import simulate

    net: Any = None
    note = ""
    if nodes > 1:
        if f"{profile}-network" in load_catalog().profiles:
            net = f"{profile}-network"
        else:
            net = loopback_network(profile)
            note = "network: loopback, derived from the fabric fit"
    sc = job_scenario(profile, model_cfg, nproc, nodes, net, overlap=overlap, stragglers=stragglers)
    if in_step_factor is not None:
        gpu = load_text(load_catalog().files[profile].read_text())
        gpu["efficiency"]["in_step_factor"] = {
            "value": in_step_factor[0],
            "source": in_step_factor[1],
        }
        sc["cluster"]["gpu"] = gpu
    m = simulate(resolve_dict(sc), scaling=False).metrics
    step = m.step_time_s
    shares = {k: v / step for k, v in m.breakdown_s.items()} if step > 0 else {}
    return step, note, shares


def host_occupancy_factor(side: dict[str, Any], busy: int) -> tuple[float, str, str] | None:
    """(in-step factor, its source, a note) for a layout that keeps ``busy`` processes on this
    host when the probe kept more: the profile's factor was measured with every one of the
    probe's processes computing; with fewer, the host's caches and memory bus are less shared.
    Linear between the probe's step run by one process alone and by all at once, and never
    above the all-busy figure: fewer busy processes share less, so a noisy alone measurement
    that came out slower must not make a smaller layout predict slower compute."""
    cf = side.get("compute_fit") or {}
    full, alone = cf.get("in_step_factor"), cf.get("in_step_factor_alone")
    procs = int(side.get("procs_per_node") or 1) if side.get("hosts") == 1 else 0
    if not full or not alone or procs <= 1 or busy >= procs:
        return None
    f = min(between_alone_and_full(alone, full, busy, procs), float(full))
    what = (
        f"{busy} of the probe's {procs} processes on this host: between the probe's step "
        f"without communication run by one process alone ({alone:.3f}) and by all at once "
        f"({full:.3f})"
    )
    return f, what, f"host {busy}/{procs} busy: in-step factor {f:.2f} (all busy: {full:.2f})"


def drift_reference(speed: dict[str, Any], busy: int) -> float | None:
    """Seconds per unit of the speed work during the probe, with ``busy`` of this host's
    processes running it at once: the probe measured it with all its processes and with one
    alone (right before it timed the in-step factor's steps, the same short check validate
    makes; older probes: its speed phase); in between, linear (as
    :func:`host_occupancy_factor`)."""
    if speed.get("check_unit_s"):
        full, alone = speed["check_unit_s"], speed.get("check_alone_unit_s")
    else:
        full, alone = speed.get("unit_s"), speed.get("alone_unit_s")
    procs = int(speed.get("procs") or 1)
    if not full:
        return None
    if busy >= procs:
        return float(full)
    if not alone:
        return None
    return between_alone_and_full(float(alone), float(full), busy, procs)


def between_alone_and_full(alone: float, full: float, busy: int, procs: int) -> float:
    """A figure measured with one of a host's ``procs`` processes busy (``alone``) and with all
    (``full``), at ``busy`` of them: linear in between."""
    return alone + (full - alone) * (busy - 1) / max(1, procs - 1)


Predicted = tuple[float, list[str], dict[str, float]]


def layout_prediction(
    profile: str,
    side: dict[str, Any],
    cfg: dict[str, int],
    lay: dict[str, Any],
    speed: dict[str, Any],
) -> Predicted:
    """The step predicted for ``cfg`` at layout ``lay``, its notes and its shares by category."""
    nodes, nproc, world = lay["nodes"], lay["nproc_per_node"], lay["world_size"]
    threads = int(side.get("threads_per_process") or 1)
    cores = os.cpu_count() or 1
    overlap = cpu_comm_overlaps(str(side.get("device_type")), world, threads, cores)
    factor = host_occupancy_factor(side, world)
    pred, note, shares = predict(
        profile, cfg, nproc, nodes, overlap, bool(speed.get("cv")), factor[:2] if factor else None
    )
    notes = [note] if note else []
    if factor:
        notes.append(factor[2])
    if not overlap:
        notes.append("no comm/compute overlap: every core computes")
    return pred, notes, shares
