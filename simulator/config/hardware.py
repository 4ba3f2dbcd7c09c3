"""Hardware profile schema: GPUs, intra-node fabrics, networks and storage (prices: :mod:`.prices`).

Every figure is a :class:`Sourced` value: the number and where it comes from (datasheet, paper
table, or a probe run). A bare number is accepted where a scenario overrides a field inline; it is
then recorded as an inline override. Spec-sheet peaks and achieved efficiency are separate fields,
so no peak is ever used raw.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from .bounds import document_ranges
from .gpu_efficiency import GPUEfficiency
from .sourced import (
    INLINE_SOURCE,
    Cited,
    Flag,
    Num,
    Sourced,
    SourcedFlag,
    _Profile,
    bare_inline,
)

__all__ = [
    "INLINE_SOURCE",
    "Flag",
    "GPUEfficiency",
    "Num",
    "Sourced",
    "SourcedFlag",
    "_Profile",
]


# How many GPUs a fabric joins, and a switch's radix, each with where that is documented.
GpuCount = Cited[Annotated[int, Field(strict=True, ge=1, le=100_000)]]
PortCount = Cited[Annotated[int, Field(strict=True, ge=2, le=100_000)]]


class TailLatency(BaseModel):
    """Spread of transfer times around their nominal figure, as a record: a log-normal
    multiplier, median 1, ``sigma`` its log-space spread (``calibrate`` writes the spread of
    its measured over fitted times). The engine does not read it: the latency and bandwidth
    figures it times collectives with are fitted to measured (median) runs, which already hold
    the spread at the scale they were measured."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, allow_inf_nan=False, json_schema_extra=document_ranges
    )

    distribution: Literal["lognormal"] = "lognormal"
    sigma: Num
    p99_over_p50: Num | None = None


USABLE_OVER_DATASHEET = 2**30 / 1e9 * 1.0005  # a GiB read as GB, and rounding
DEFAULT_CLOCK_EXP = 3.0
"""Board power ~ clock^3 where a profile gives no exponent: CMOS dynamic power C·V²·f with the
voltage rising in step with the clock under DVFS (Weste & Harris, *CMOS VLSI Design*, ch. 5)."""


# The lowest board power limit a driver accepts, as a share of TDP (see _limit_within_tdp).
MIN_LIMIT_SHARE = 0.25


class GPUProfile(_Profile):
    kind: Literal["gpu"] = "gpu"
    vendor: Literal["nvidia", "amd", "intel", "other"]
    memory_gb: Num = Field(
        description="HBM/GDDR capacity as the datasheet names it, GB (a calibrated profile: "
        "the memory the probe's processes had)"
    )
    memory_usable_gb: Num | None = Field(
        default=None,
        description="device memory the CUDA/ROCm runtime exposes to the framework "
        "(torch.cuda.get_device_properties().total_memory), GB of 1e9 bytes: the capacity the "
        "memory check holds a layout to. Datasheets name binary capacities (an '80GB' H100 "
        "exposes 85.05e9 bytes); unset: memory_gb",
    )
    memory_bandwidth_gbps: Num = Field(description="memory bandwidth, GB/s")
    host_link_gbps: Num | None = Field(
        default=None,
        description="GPU-to-host bandwidth per direction, GB/s (PCIe, or NVLink-C2C on a "
        "Grace superchip): what activation offloading moves over; unset: not known",
    )
    nvlink_gbps: Num | None = Field(
        default=None,
        description="NVLink bandwidth of one GPU per direction, GB/s, what an NVSwitch fabric "
        "can give it; unset: no NVLink to a switch (PCIe cards), and NVSwitch fabrics are "
        "refused",
    )
    cache_mb: Num | None = Field(
        default=None,
        description=(
            "last-level cache a memory-bound operation can work in, MB (1e6 bytes): one whose "
            "working set is up to this size runs at cache_bandwidth_gbps, one twice as large "
            "or more at memory_bandwidth_gbps, linear in between; unset: every operation at "
            "memory_bandwidth_gbps"
        ),
    )
    cache_bandwidth_gbps: Num | None = Field(
        default=None,
        description=(
            "bandwidth inside cache_mb, GB/s, on the same footing as memory_bandwidth_gbps "
            "(efficiency.memory_bandwidth scales both); set with cache_mb, above "
            "memory_bandwidth_gbps"
        ),
    )
    tdp_w: Num = Field(description="board power, W")
    power_limit_w: Num | None = Field(
        default=None,
        description="board power limit the GPUs run at (nvidia-smi -pl), W, at most tdp_w; "
        "unset: tdp_w. Below tdp_w the tensor-core clock, and with it every compute-bound "
        "kernel, slows by (power_limit_w / tdp_w)^(1 / power_clock_exponent); memory-bound "
        "kernels keep their speed (the limit throttles the SM clock, not the memory's)",
    )
    power_clock_exponent: Num | None = Field(
        default=None,
        description="a in board power ~ tensor clock^a near the rated power, from two parts "
        "of one die at different board powers; unset: 3, CMOS dynamic power C·V²·f with the "
        "voltage rising in step with the clock",
    )
    peak_tflops: dict[Literal["fp64", "fp32", "tf32", "bf16", "fp16", "fp8"], Num] = Field(
        description="dense (no sparsity) peak TFLOP/s per dtype"
    )
    efficiency: GPUEfficiency
    compute_capability: Num | None = Field(
        default=None,
        description="CUDA compute capability (8.0 Ampere, 9.0 Hopper, 10.0 Blackwell): NCCL "
        "sizes its per-channel LL128 rate across nodes by it; unset: a fabric with NVLink "
        "SHARP is taken as Hopper's, one without as Ampere's (with a note)",
    )
    sm_count: Num | None = Field(
        default=None,
        description="streaming multiprocessors (compute units): GEMM tiles run in waves of "
        "this many; unset: no wave quantisation",
    )
    mtbf_hours: Num | None = Field(default=None, description="mean time between GPU failures")
    mtbf_other_hours: Num | None = Field(
        default=None,
        description="GPU-hours between interruptions of a synchronous job from everything but "
        "its GPUs (host, network, storage, software), per GPU of the platform; none: not "
        "counted",
    )
    speed_cv: Num | None = Field(
        default=None, description="coefficient of variation of per-GPU speed (stragglers)"
    )

    @model_validator(mode="after")
    def _cache_pair(self) -> GPUProfile:
        if (self.cache_mb is None) != (self.cache_bandwidth_gbps is None):
            raise ValueError(
                "cache_mb and cache_bandwidth_gbps are set together or not at all: give "
                + ("cache_bandwidth_gbps" if self.cache_mb is not None else "cache_mb")
                + " too, or neither"
            )
        if (
            self.cache_bandwidth_gbps is not None
            and self.cache_bandwidth_gbps.value <= self.memory_bandwidth_gbps.value
        ):
            raise ValueError(
                "cache_bandwidth_gbps must be above memory_bandwidth_gbps (a cache slower "
                "than memory would slow the small operations down)"
            )
        return self

    @model_validator(mode="after")
    def _limit_within_tdp(self) -> GPUProfile:
        lim = self.power_limit_w
        if lim is not None and self.tdp_w.value <= 0:
            raise ValueError(
                "power_limit_w needs the board's tdp_w, which is 0 here (not known): give "
                "tdp_w too, or leave power_limit_w out"
            )
        if lim is not None and lim.value > self.tdp_w.value:
            raise ValueError(
                f"power_limit_w ({lim.value:g} W) is above the board's tdp_w "
                f"({self.tdp_w.value:g} W), the highest limit the driver accepts: give at most "
                f"{self.tdp_w.value:g}, or leave it out to run at tdp_w"
            )
        if lim is not None and lim.value < MIN_LIMIT_SHARE * self.tdp_w.value:
            # nvidia-smi -q -d POWER: "Min Power Limit" 200 W on a 700 W H100 SXM, 100 W on a
            # 400 W A100 SXM; below that the driver refuses -pl (and board power ~ clock^a,
            # fitted near the rated power, says nothing there)
            raise ValueError(
                f"power_limit_w ({lim.value:g} W) is below a quarter of the board's tdp_w "
                f"({self.tdp_w.value:g} W), under the lowest limit drivers accept: give at "
                f"least {MIN_LIMIT_SHARE * self.tdp_w.value:g}"
            )
        return self

    @model_validator(mode="after")
    def _usable_within_capacity(self) -> GPUProfile:
        # Datasheets name binary capacities: a runtime exposes at most GiB-as-GB of them.
        if (
            self.memory_usable_gb is not None
            and self.memory_usable_gb.value > self.memory_gb.value * USABLE_OVER_DATASHEET
        ):
            raise ValueError(
                f"memory_usable_gb ({self.memory_usable_gb.value:g} GB) is more than a "
                f"{self.memory_gb.value:g} GB part can expose (memory_gb x 2^30/1e9 = "
                f"{self.memory_gb.value * USABLE_OVER_DATASHEET:.4g}): give memory_usable_gb "
                "with memory_gb, or leave it out to use memory_gb"
            )
        return self

    @property
    def capacity_gb(self) -> float:
        """Device memory a layout must fit in, GB of 1e9 bytes."""
        return (self.memory_usable_gb or self.memory_gb).value

    @property
    def clock_scale(self) -> float:
        """Tensor-core clock at ``power_limit_w`` as a share of the clock at ``tdp_w`` (1
        when unlimited): board power ~ clock^a, so the clock scales as (limit / tdp)^(1/a)."""
        lim, tdp = self.power_limit_w, self.tdp_w.value
        if lim is None or tdp <= 0 or lim.value >= tdp:
            return 1.0
        a = self.power_clock_exponent.value if self.power_clock_exponent else DEFAULT_CLOCK_EXP
        return float((lim.value / tdp) ** (1.0 / a))

    @property
    def half_dtype(self) -> str | None:
        """The 16-bit dtype the profile gives a peak for, bf16 first; None where it has neither."""
        return next((d for d in ("bf16", "fp16") if d in self.peak_tflops), None)

    def peak_flops(self, dtype: str) -> float:
        """Dense peak in FLOP/s for a dtype; fp8 falls back to bf16/fp16 where unsupported
        (fp32 has no fallback: a 16-bit peak would overstate it many times)."""
        for d in (dtype,) if dtype == "fp32" else (dtype, "bf16", "fp16"):
            if d in self.peak_tflops:
                return self.peak_tflops[d].value * 1e12  # type: ignore[index]
        raise KeyError(dtype)


FittedColl = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "p2p"]


class CollectiveFit(BaseModel):
    """One collective's α-β fit from a probe: ring-form time steps·α + wire bytes / bandwidth
    (the nccl-tests byte factors), which already holds the transport's own protocol costs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    latency_us: Num = Field(description="α per ring step, microseconds")
    bandwidth_gbps: Num = Field(description="1/β, GB/s of wire bytes a rank sends")


class Fitted(BaseModel):
    """Collectives on a calibrated fabric or network: each the probe's own α-β fit where it
    measured that collective, the profile's bandwidth and latency (the all-reduce fit)
    otherwise; NCCL's protocol and pipeline model is not added on top."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(min_length=3, max_length=4000)
    collectives: dict[FittedColl, CollectiveFit] = Field(default_factory=dict)


def _count_written_sourced(v: Any) -> Any:
    """A count a profile file writes ``{value: N, source: ...}``, as its figures: the number."""
    if isinstance(v, dict) and set(v) <= {"value", "source", "note"} and "value" in v:
        return v["value"]
    return v


class FabricProfile(_Profile):
    """Intra-node GPU interconnect."""

    kind: Literal["fabric"] = "fabric"
    technology: Literal["nvswitch", "pcie_host", "pcie_switch", "infinity_fabric"]
    bandwidth_gbps: Num = Field(description="per-GPU unidirectional bandwidth, GB/s")
    latency_us: Num = Field(description="one-hop latency, microseconds")
    achievable_fraction: Num = Field(description="fraction of bandwidth collectives reach")
    max_gpus: Annotated[GpuCount, BeforeValidator(bare_inline(int, "a GPU count"))] = Field(
        description="largest GPU count the fabric joins"
    )
    switch_reduce_fraction: Num | None = Field(
        default=None,
        description="NVLink SHARP (NVLS): fraction of bandwidth_gbps an in-switch all-reduce "
        "reaches, each GPU sending its buffer once and receiving the result once; unset: none",
    )
    shared_uplink_gbps: Num | None = Field(
        default=None,
        description="PCIe, GB/s each way: through the host (pcie_host), the link between "
        "CPU sockets that traffic between GPUs on different sockets crosses; behind a switch "
        "(pcie_switch), the switch's uplink to the CPU, which the host traffic of all the "
        "node's GPUs shares (activation offloading; peer and NIC traffic stay in the switch)",
    )
    sockets: Annotated[int, BeforeValidator(_count_written_sourced)] = Field(
        default=2,
        strict=True,
        ge=1,
        le=16,
        description="pcie_host: CPU sockets a node's GPUs are split over, in order; only "
        "traffic between sockets crosses shared_uplink_gbps",
    )
    gpus_per_host: Num | None = Field(
        default=None,
        description="GPUs per host (a server with its own CPUs, NICs and storage client) where "
        "one node of this fabric spans several, as a rack-scale NVLink domain does; unset: "
        "the node is one host",
    )
    ll128: SourcedFlag | None = Field(
        default=None,
        description="whether NCCL runs its LL128 protocol (128-byte lines, 120 of data) on this "
        "fabric; the model offers it to collectives inside one node; unset: no (LL and "
        "Simple only)",
    )
    fitted: Fitted | None = Field(
        default=None,
        description="calibrated: collectives follow the probe's α-β fits as measured, with no "
        "NCCL protocol model on top; unset: NCCL's model",
    )

    def hosts(self, gpus_per_node: int) -> int:
        """Servers in a node of ``gpus_per_node`` GPUs, each with its own storage client:
        several where the NVLink domain spans compute trays (``gpus_per_host``), else one."""
        if self.gpus_per_host is None:
            return 1
        return -(-gpus_per_node // max(1, round(self.gpus_per_host.value)))


class NetworkProfile(_Profile):
    """Inter-node network: one NIC port type and its switches."""

    kind: Literal["network"] = "network"
    technology: Literal["infiniband", "omnipath", "roce", "ethernet_tcp"]
    port_gbps: Num = Field(description="per-port line rate, Gb/s (bits)")
    latency_us: Num = Field(description="end-to-end small-message latency, microseconds")
    achievable_fraction: Num = Field(description="fraction of line rate collectives reach")
    switch_ports: Annotated[PortCount, BeforeValidator(bare_inline(int, "a port count"))] = Field(
        default=PortCount(value=64, source="default where a profile gives none: a 64-port switch"),
        description="radix of one switch",
    )
    tail_latency: TailLatency | None = Field(
        default=None,
        description="recorded, not modelled: the spread of transfer times (calibrate writes "
        "its fit's); the engine times collectives by latency_us and the bandwidth figures",
    )
    fitted: Fitted | None = Field(
        default=None,
        description="calibrated: collectives across nodes follow the probe's α-β fits as "
        "measured, with no NCCL protocol model on top; unset: NCCL's model",
    )

    @property
    def port_bytes_per_s(self) -> float:
        return self.port_gbps.value * 1e9 / 8


class StorageProfile(_Profile):
    kind: Literal["storage"] = "storage"
    technology: Literal["local_nvme", "parallel_fs", "nfs", "object_store"]
    read_gbps_per_client: Num = Field(
        description="sequential read per host (a node, or each compute tray of a node the "
        "fabric's gpus_per_host splits), GB/s"
    )
    write_gbps_per_client: Num = Field(description="sequential write per host, GB/s")
    aggregate_read_gbps: Num | None = Field(
        default=None, description="whole-system read ceiling, GB/s (none: scales per node)"
    )
    aggregate_write_gbps: Num | None = Field(
        default=None, description="whole-system write ceiling, GB/s (none: scales per node)"
    )
    latency_ms: Num = Field(description="first-byte latency per request, ms")
