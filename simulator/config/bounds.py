"""Physically meaningful ranges for every sourced figure in a profile.

A profile figure (``{value, source}``) is checked against the range of its field name, wherever
the figure sits (top level, ``efficiency``, ``tail_latency``, a ``peak_tflops`` entry). The ranges
are wide enough for any real or plausible future part and narrow enough that a typo (a zero, a
stray exponent) is refused before it reaches the engine as a division by zero, a negative delay
or a step of 10^27 seconds. The same table documents the ranges in the JSON Schema.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel

# (low, high, low is exclusive, what the unit is)
Range = tuple[float, float, bool, str]

# A fraction of 1e-300 is a stray exponent, not a part: it made a step of 10^300 hours blamed on
# the global batch. The floor leaves room for the probe's fits on a CPU (attention at 1e-4).
_FRACTION: Range = (1e-6, 1.0, False, "(a fraction of the spec-sheet figure)")
# Links go up to 1e9 GB/s so that a what-if study can make one free; below 1 MB/s nothing
# trains.
_GBYTES_S: Range = (1e-3, 1e9, False, "GB/s")
# Attention efficiencies count the full s×s scores with the backward at twice the forward, so a
# causal kernel (about half the scores, a backward of 2.5×) can pass 1: at most 12/7, a kernel at
# the peak in its own count.
ATTENTION_MAX = 12.0 / 7.0
_ATTENTION: Range = (1e-6, ATTENTION_MAX, False, "(of the spec-sheet figure, full s×s counted)")

FIGURE_RANGES: dict[str, Range] = {
    # GPU
    "memory_gb": (0.1, 1e5, False, "GB"),
    "memory_usable_gb": (0.01, 1.1e5, False, "GB"),
    "memory_bandwidth_gbps": (1.0, 1e6, False, "GB/s"),
    "host_link_gbps": _GBYTES_S,
    "nvlink_gbps": _GBYTES_S,
    "tdp_w": (0.0, 1e5, False, "W (0: not known, as for a probed CPU)"),
    "power_limit_w": (1.0, 1e5, False, "W"),
    "power_clock_exponent": (0.5, 10.0, False, "exponent a in board power ~ clock^a"),
    "peak_tflops": (1e-3, 1e6, False, "TFLOP/s"),
    "sm_count": (1.0, 1e5, False, "streaming multiprocessors"),
    "compute_capability": (1.0, 20.0, False, "major.minor"),
    "gpus_per_host": (1.0, 1024.0, False, "GPUs"),
    "mtbf_hours": (1.0, 1e9, False, "hours"),
    "mtbf_other_hours": (1.0, 1e9, False, "GPU-hours"),
    "speed_cv": (0.0, 1.0, False, "coefficient of variation"),
    "matmul_max": _FRACTION,
    "matmul_fp8_max": _FRACTION,
    "matmul_fp8_promoted_accum": _FRACTION,
    "attention_max": _ATTENTION,
    "attention_flash3_max": _ATTENTION,
    "attention_forward_share": (0.1, 0.5, False, "fraction of forward+backward time"),
    "memory_bandwidth": _FRACTION,
    "reserved_term_years": (0.01, 100.0, False, "years"),
    "host_link": _FRACTION,
    "optimizer_bandwidth": _FRACTION,
    "gemm_weight_bandwidth": _FRACTION,
    "matmul_half_flops": (0.0, 1e16, False, "FLOPs"),
    "attention_half_seq": (0.0, 1e7, False, "tokens"),
    "cache_mb": (0.0, 1e6, False, "MB"),
    "cache_bandwidth_gbps": _GBYTES_S,
    "attention_flash3_half_seq": (0.0, 1e7, False, "tokens"),
    "matmul_fp8_half_flops": (0.0, 1e16, False, "FLOPs"),
    "kernel_launch_us": (0.0, 1e4, False, "microseconds"),
    "optimizer_us_per_tensor": (0.0, 1e5, False, "microseconds"),
    "in_step_factor": (0.1, 100.0, False, "factor on compute time"),
    # fabric and network
    "bandwidth_gbps": _GBYTES_S,
    "shared_uplink_gbps": _GBYTES_S,
    "achievable_fraction": _FRACTION,
    "switch_reduce_fraction": _FRACTION,
    "port_gbps": (8e-3, 8e9, False, "Gb/s"),
    "latency_us": (0.0, 1e7, False, "microseconds"),
    "sigma": (0.0, 5.0, False, "log-space spread"),
    "p99_over_p50": (1.0, 1e4, False, "ratio"),
    # storage
    "read_gbps_per_client": _GBYTES_S,
    "write_gbps_per_client": _GBYTES_S,
    "aggregate_read_gbps": _GBYTES_S,
    "aggregate_write_gbps": _GBYTES_S,
    "latency_ms": (0.0, 1e6, False, "ms"),
    # prices
    "on_demand_usd_per_gpu_hour": (0.0, 1e4, False, "USD per GPU-hour"),
    "reserved_usd_per_gpu_hour": (0.0, 1e4, False, "USD per GPU-hour"),
    "spot_usd_per_gpu_hour": (0.0, 1e4, False, "USD per GPU-hour"),
    "spot_preemptions_per_day": (0.0, 1e4, False, "per day"),
    "gpus_per_node": (1.0, 1024.0, False, "GPUs"),
    "capex_per_node_usd": (0.0, 1e9, False, "USD"),
    "capex_per_network_port_usd": (0.0, 1e8, False, "USD"),
    "power_per_gpu_w": (0.0, 1e5, False, "W"),
    "power_per_node_w": (0.0, 1e6, False, "W"),
    "pue": (1.0, 10.0, False, "power usage effectiveness"),
    "usd_per_kwh": (0.0, 100.0, False, "USD per kWh"),
    "amortisation_years": (0.1, 100.0, False, "years"),
    "opex_fraction_per_year": (0.0, 10.0, False, "of capex per year"),
    # software
    "host_us_per_kernel": (0.0, 1e5, False, "microseconds"),
    "host_us_per_collective": (0.0, 1e6, False, "microseconds"),
    "comm_sms": (0.0, 1e4, False, "streaming multiprocessors"),
    "logit_bytes": (0.0, 64.0, True, "bytes per logit"),
    "dp_bucket_mb": (1e-3, 1e6, False, "MB"),
    "dp_bucket_params": (1.0, 1e13, False, "parameters"),
    "dp_bucket_params_per_dp_rank": (0.0, 1e12, False, "parameters"),
}

# Any figure whose field is not in the table: finite and not negative.
_DEFAULT: Range = (0.0, 1e18, False, "")

# Figures that count whole things: 131.5 SMs or a 3.5-GPU instance is a typo (a price profile's
# gpus_per_node of 3.5 was billed as instances of 4).
WHOLE_FIGURES = frozenset({"sm_count", "gpus_per_host", "gpus_per_node", "comm_sms"})


def describe(r: Range) -> str:
    lo, hi, lo_open, unit = r
    text = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
    return f"{text} {unit}" if unit else text


def check_figure(name: str, value: float) -> str | None:
    """Why ``value`` is out of range for field ``name``, or None when it is fine."""
    lo, hi, lo_open, _ = r = FIGURE_RANGES.get(name, _DEFAULT)
    if not math.isfinite(value) or value > hi or value < lo or (lo_open and value <= lo):
        return f"must be within {describe(r)} (got {value:g})"
    if name in WHOLE_FIGURES and value != int(value):
        return f"must be a whole number of {r[3]} (got {value:g})"
    return None


def check_figures(model: BaseModel, prefix: str = "") -> None:
    """Raise ValueError naming the first sourced figure of ``model`` (recursively) that is out
    of its range."""
    from .sourced import Sourced

    for field, value in model:
        items: list[tuple[str, Any]]
        if isinstance(value, dict):
            items = [(f"{field}.{k}", v) for k, v in value.items()]
        else:
            items = [(field, value)]
        for path, item in items:
            if isinstance(item, Sourced):
                why = check_figure(field, item.value)
                if why:
                    raise ValueError(f"{prefix}{path} {why}")
            elif isinstance(item, BaseModel):
                check_figures(item, f"{prefix}{path}.")


def document_ranges(schema: dict[str, Any]) -> None:
    """JSON Schema hook: add each figure's range to its property description."""
    for name, prop in schema.get("properties", {}).items():
        r = FIGURE_RANGES.get(name)
        if r is None:
            continue
        desc = prop.get("description", "")
        whole = ", a whole number" if name in WHOLE_FIGURES else ""
        prop["description"] = f"{desc} (value range {describe(r)}{whole})".strip()
