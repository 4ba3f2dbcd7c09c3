"""The calibrated storage profile: the probe's sequential read and write and first-byte
latency, or placeholders where the probe ran without its storage phase."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Figure = Callable[[float, str], dict[str, Any]]


def _floored(S: Figure, field: str, value: float, source: str) -> dict[str, Any]:
    """A measured storage figure, raised to the profile's floor (1 MB/s, below which nothing
    trains) where the probe measured less, and saying so, so that a very slow disk still
    yields a profile that loads."""
    from simulator.config.bounds import FIGURE_RANGES

    low = FIGURE_RANGES[field][0]
    if value < low:
        return S(low, f"{source}: measured {value:.3g} GB/s, below a profile's floor; floor used")
    return S(value, source)


def storage_profile(S: Figure, st: dict[str, Any], name: str) -> dict[str, Any]:
    """``NAME-storage`` from the probe's ``storage`` section ``st`` (empty: not measured);
    ``S(value, what)`` makes a sourced figure."""
    if not st:
        return {
            "kind": "storage",
            "name": f"{name}-storage",
            "display_name": f"{name}: storage",
            "technology": "local_nvme",
            "read_gbps_per_client": S(
                1.0,
                "estimate: not measured (the probe ran without its storage phase); 1 GB/s, "
                "the order of a local NVMe drive's sequential rate; re-probe with "
                "--storage-path to measure it",
            ),
            "write_gbps_per_client": S(
                1.0, "estimate: not measured (no storage phase); as the read rate"
            ),
            "latency_ms": S(
                0.1, "estimate: not measured (no storage phase); a local NVMe read's 0.1 ms"
            ),
        }
    return {
        "kind": "storage",
        "name": f"{name}-storage",
        "display_name": f"{name}: storage at {st.get('path')}",
        "technology": "local_nvme",
        "read_gbps_per_client": _floored(
            S,
            "read_gbps_per_client",
            st["read_gbps"],
            f"sequential read of {st['bytes']} B after fadvise DONTNEED (page cache may help)",
        ),
        "write_gbps_per_client": _floored(
            S,
            "write_gbps_per_client",
            st["write_gbps"],
            f"sequential write of {st['bytes']} B with fsync",
        ),
        "latency_ms": S(st["first_byte_s"] * 1e3, "first 4 KiB read of the file"),
    }
