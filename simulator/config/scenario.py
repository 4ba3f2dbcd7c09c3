"""Scenario schema as a user writes it (profile names plus inline overrides) and as resolved.

``Scenario`` is what the YAML file holds. ``ResolvedScenario`` is what the rest of the program
uses: profiles looked up and overridden, the model preset expanded, DP derived, and the layout
checked. Resolution lives in :mod:`simulator.config.loading`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .cluster import (
    MAX_NODES,
    ClusterSpec,
    FatTree,
    Ref,
    Topology,
    default_nodes_per_leaf,
    down_ports,
)
from .hardware import (
    FabricProfile,
    GPUProfile,
    NetworkProfile,
    StorageProfile,
)
from .parallelism import ParallelismSpec
from .prices import CloudPrice, OwnershipPrice
from .reference import Reference
from .software import SoftwareProfile, on
from .stage_split import chunk_layers, stage_layers
from .workload import ModelSpec, TrainingSpec


class ModelPresetRef(BaseModel):
    """A model preset by name, with any architecture field overridden."""

    model_config = ConfigDict(extra="allow", frozen=True)
    preset: str = Field(max_length=200)


class ReferenceLayout(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    nodes: int = Field(strict=True, ge=1, le=MAX_NODES)


class RunSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    tokens: float | None = Field(
        default=None, strict=True, gt=0, le=1e18, description="token budget of the run"
    )
    scaling_reference: ReferenceLayout | None = Field(
        default=None, description="layout to measure scaling against; none: fewest nodes that fit"
    )
    stragglers: Literal["auto", "off", "expected"] = Field(
        default="auto",
        description=(
            "off: every GPU runs at its profile's speed; expected: each step waits for the "
            "expected slowest of the job's GPUs (the GPU profile's speed_cv); auto: expected "
            "where the GPU profile states a speed_cv, off where it does not"
        ),
    )

    @field_validator("stragglers", mode="before")
    @classmethod
    def _yaml_off(cls, v: Any) -> Any:
        return "off" if v is False else v  # YAML 1.1 reads a bare `off` as false


class Scenario(BaseModel):
    """The YAML file."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str | None = Field(default=None, max_length=200)
    description: str | None = Field(default=None, max_length=10_000)
    question: str | None = Field(
        default=None, max_length=10_000, description="what this scenario answers"
    )
    cluster: ClusterSpec

    model: Annotated[str, Field(max_length=200)] | ModelPresetRef | ModelSpec
    training: TrainingSpec
    parallelism: ParallelismSpec = ParallelismSpec()
    software: Ref = Field(
        default="megatron-core",
        description="software stack profile (hardware_profiles/software/): kernel fusion, "
        "attention kernel, communication overlap, host cost per kernel",
    )
    run: RunSpec = RunSpec()
    reference: Reference | None = None

    @field_validator("name")
    @classmethod
    def _one_line(cls, v: str | None) -> str | None:
        # a name heads tables and titles plots: a line break would split them (other control
        # characters are stripped on the terminal and kept exactly in JSON and CSV)
        if v is not None and (len(v.splitlines()) > 1 or v.endswith(("\n", "\r"))):
            raise ValueError("a name is one line of text, without line breaks")
        return v


def gathers_once(par: ParallelismSpec, software: SoftwareProfile) -> bool:
    """See :attr:`ResolvedScenario.gathers_once`."""
    flag = software.pp_gathers_once
    return par.pp > 1 and par.zero_stage >= 1 and flag is not None and flag.value


class ResolvedScenario(BaseModel):
    """Everything looked up, checked and ready to simulate."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str
    source_file: str | None = None
    gpu: GPUProfile
    gpus_per_node: int
    nodes: int
    fabric: FabricProfile
    network: NetworkProfile | None
    nics_per_node: int
    topology: Topology
    storage: StorageProfile
    price: CloudPrice | OwnershipPrice | None
    price_tier: Literal["on_demand", "reserved", "spot"]
    price_utilisation: float = 1.0
    model: ModelSpec
    training: TrainingSpec
    parallelism: ParallelismSpec
    software: SoftwareProfile
    dp: int
    run: RunSpec
    reference: Reference | None = None
    raw: dict[str, Any] = Field(default_factory=dict, description="the scenario as written")
    override_notes: list[str] = Field(
        default_factory=list,
        description="fields of the file that a --set replacing their whole section dropped",
    )

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def tp(self) -> int:
        return self.parallelism.tp

    @property
    def pp(self) -> int:
        return self.parallelism.pp

    @property
    def cp(self) -> int:
        return self.parallelism.cp

    @property
    def dp_bucket_bytes(self) -> float:
        """Bytes of gradients the DP reduction moves per collective as sized in MB: the
        scenario's bucket, else the software stack's, else PyTorch DDP's 25 MB (a stack's rule in
        parameters and the stacks that bucket per layer: :func:`simulator.workload.comm.
        dp_bucket_bytes`)."""
        mb = self.parallelism.dp_bucket_mb
        if mb is None and self.software.dp_bucket_mb is not None:
            mb = self.software.dp_bucket_mb.value
        return (25.0 if mb is None else mb) * 1e6

    @property
    def flash_attention(self) -> bool:
        """Fused attention: the scenario's training.flash_attention, else the software stack's
        (a 2021 stack has none), else on."""
        if self.training.flash_attention is not None:
            return self.training.flash_attention
        flag = self.software.flash_attention
        return True if flag is None else flag.value

    @property
    def grad_reduce_fp32(self) -> bool:
        """Gradients accumulated and reduced over DP in fp32: the scenario's
        training.grad_reduce_dtype, else the software stack's choice under bf16/fp8 mixed
        precision (Megatron-LM forces it for bf16; fp16 runs keep 16-bit gradients), and
        always in fp32 training."""
        tr = self.training
        if tr.precision == "fp32":
            return True
        if tr.grad_reduce_dtype is not None:
            return tr.grad_reduce_dtype == "fp32"
        flag = self.software.grad_reduce_fp32
        return tr.precision in ("bf16", "fp8") and flag is not None and flag.value

    @property
    def gathers_once(self) -> bool:
        """Sharded data parallelism (ZeRO or FSDP) under pipeline parallelism on a stack that
        keeps the stage's parameters gathered and its gradients unsharded until the step's
        last backward (software ``pp_gathers_once``)."""
        return gathers_once(self.parallelism, self.software)

    @property
    def shards_anyway(self) -> bool:
        """ZeRO stage 0 written for a stack whose bf16 optimizer shards its states over DP
        regardless (software ``bf16_shards_optimizer``: DeepSpeed's BF16 optimizer is its own
        ZeRO-1 at ZERO_STAGE=0)."""
        flag = self.software.bf16_shards_optimizer
        return (
            self.parallelism.zero_stage == 0
            and self.training.precision == "bf16"
            and flag is not None
            and flag.value
        )

    @property
    def zero_stage(self) -> int:
        """The ZeRO stage the run behaves as: the sharding written, except where the stack
        gathers once under pipeline parallelism (:attr:`gathers_once`), which moves and holds
        what ZeRO-1 does, or shards a bf16 optimizer whatever the stage
        (:attr:`shards_anyway`)."""
        if self.gathers_once or self.shards_anyway:
            return 1
        return self.parallelism.zero_stage

    def profile_names(self) -> list[str]:
        """The catalogue profiles this scenario runs on (GPU, fabric, network, storage,
        software stack, price)."""
        profs = [self.gpu, self.fabric, self.network, self.storage, self.software, self.price]
        return [p.name for p in profs if p is not None]

    def model_notes(self) -> list[str]:
        """What the model or hardware as given cannot do in this scenario (``simulate`` and
        ``check``)."""
        m = self.model
        out = []
        if m.position == "learned" and m.max_positions and self.training.seq_len > m.max_positions:
            out.append(
                f"{m.name} learns {m.max_positions} positions but the sequence is "
                f"{self.training.seq_len} tokens: the model as given has no embedding past "
                f"position {m.max_positions} (set model.max_positions to extend the table; its "
                "parameters are counted from that size)"
            )
        tr = self.training
        if tr.precision == "fp32" and tr.grad_reduce_dtype == "bf16":
            out.append(
                "training.grad_reduce_dtype bf16 has no effect under fp32 training: the "
                "gradients are fp32 and are reduced in fp32 (under bf16 or fp8 training the "
                "setting selects a 16-bit reduction)"
            )
        cluster = self.raw.get("cluster")
        if isinstance(cluster, dict) and self.raw and "storage" not in cluster:
            out.append(
                f"no cluster.storage given: the data loader and checkpoints use "
                f"'{self.storage.name}' ({self.storage.display_name}); name your storage "
                "profile (clustersim profiles list storage)"
            )
        net = self.network
        if net is not None and self.topology.kind == "single_switch" and self.nodes > 1:
            ports = self.nodes * self.nics_per_node
            if ports > net.switch_ports.value:
                out.append(
                    f"one switch joins the {ports} NIC ports of this cluster, and a "
                    f"'{net.name}' switch has {net.switch_ports.value}: simulated as one "
                    "non-blocking switch all the same (cluster.network.topology: "
                    "{kind: fat_tree} models the leaves and spines it needs)"
                )
        if net is not None and self.nodes > 1 and self.nics_per_node > self.gpus_per_node:
            out.append(
                f"{self.nics_per_node} NICs per node for {self.gpus_per_node} GPUs: each GPU "
                "sends through one NIC at most (its rail), so the rest carry no traffic here, "
                "though an ownership price counts their ports"
            )
        link, f = self.gpu.nvlink_gbps, self.fabric
        topo = self.topology
        if net is not None and isinstance(topo, FatTree) and topo.nodes_per_leaf is None:
            npl = default_nodes_per_leaf(
                net.switch_ports.value, self.nics_per_node, topo.oversubscription
            )
            if topo.oversubscription > 1.0 and self.nodes > npl:
                down = down_ports(net.switch_ports.value, topo.oversubscription)
                out.append(
                    f"the fat tree's leaf switches take {npl} nodes each ({down} of a "
                    f"{net.switch_ports.value}-port '{net.name}' switch's ports down to "
                    f"{self.nics_per_node} NICs per node), and traffic between leaves shares their "
                    f"{topo.oversubscription:g}:1 up-links: more NICs per node mean fewer "
                    "nodes per leaf (cluster.network.topology.nodes_per_leaf sets another "
                    "wiring)"
                )
        if f.technology == "nvswitch" and link is not None:
            # (less: e.g. --set cluster.gpu=b200 over a file's nvlink4-nvswitch, the GPU changed
            # and the fabric did not)
            fab = f.bandwidth_gbps.value
            than = (
                "more" if fab > link.value * 1.001 else "less" if fab < link.value * 0.999 else ""
            )
            if than:
                at = (
                    "the GPU's figure, as its own ports cap what the switch gives it (a what-if "
                    "of a faster link raises the GPU's nvlink_gbps too)"
                    if than == "more"
                    else "the fabric's figure (for this GPU as built, pick its NVLink "
                    "generation: clustersim profiles list fabric)"
                )
                out.append(
                    f"fabric '{f.name}' gives each GPU {fab:g} GB/s of NVLink, {than} than "
                    f"'{self.gpu.name}' has ({link.value:g} GB/s per direction): simulated at "
                    f"{at}"
                )
        return out

    def plan_notes(self) -> list[str]:
        """Where the plan runs otherwise than written: sequence parallelism at TP 1 not at
        all, or the software stack's sharding as another ZeRO stage."""
        out = []
        par = self.raw.get("parallelism") if isinstance(self.raw, dict) else None
        if self.tp == 1 and isinstance(par, dict) and par.get("sequence_parallel") is True:
            out.append(
                "sequence_parallel is off at TP 1 (it splits TP's activations; Megatron-LM, "
                "for one, turns it off with a warning)"
            )
        sw = self.software.display_name
        if self.gathers_once:
            out.append(
                f"under pipeline parallelism {sw} runs sharded data parallelism as FSDP2 "
                "without resharding: each stage's parameters stay gathered and its gradients "
                "unsharded through the step's micro-batches, with one all-gather per step and "
                "one reduce-scatter after the last backward (ZeRO-1's traffic and memory)"
            )
        elif self.shards_anyway:
            out.append(
                f"{sw}'s bf16 optimizer shards the optimizer states over data parallelism at "
                "ZeRO stage 0 (its own ZeRO-1 equivalent), so the run is ZeRO-1"
            )
        return out

    @property
    def selective_policy(self) -> str:
        """What selective recomputation runs again under this stack (see
        ``SoftwareProfile.selective_recompute``)."""
        pol = self.software.selective_recompute
        return "attention_core" if pol is None else pol.value

    @property
    def recompute_early_stop(self) -> bool:
        """Full recomputation stops before the layer's last matmul (see
        ``SoftwareProfile.recompute_early_stop``)."""
        return on(self.software.recompute_early_stop)

    @property
    def grads_all_reduced(self) -> bool:
        """The DP gradient reduction is a full all-reduce: plain data parallelism, or ZeRO-1 on
        a stack whose ranks all-reduce the whole gradient before each updates its own shard
        (software ``zero1_grad_all_reduce``); otherwise sharded state is reduce-scattered."""
        z = self.zero_stage
        flag = self.software.zero1_grad_all_reduce
        return z == 0 or (z == 1 and flag is not None and flag.value)

    @property
    def dp_cp(self) -> int:
        """Ranks that hold the same parameters: the data-parallel replicas and, within each,
        the context-parallel ranks (each computes gradients on its slice of the sequences).
        Gradients are reduced, and ZeRO/FSDP state sharded, over all of them, as Megatron-Core
        does (its data-parallel group "with context parallel")."""
        return self.dp * self.cp

    @property
    def micro_batches(self) -> int:
        """Micro-batches per step per pipeline (gradient-accumulation steps)."""
        return self.training.global_batch // (self.dp * self.training.micro_batch)

    def layout(self) -> dict[str, Any]:
        """The parallel layout in a few plain figures (for reports)."""
        par = self.parallelism
        return {
            "dp": self.dp,
            "tp": self.tp,
            "pp": self.pp,
            "cp": self.cp,
            "micro_batches": self.micro_batches,
            "schedule": par.pp_schedule.kind,
            "zero_stage": par.zero_stage,
            "zero_stage_effective": self.zero_stage,
            # what selective recomputation runs again, where it is on
            "selective_recompute": (
                self.selective_policy if par.recompute == "selective" else None
            ),
            "recompute": par.recompute,
            "precision": self.training.precision,
            # an uneven pipeline (listed, or the stack's split): layers per stage
            **({"stage_layers": sl} if len(set(sl := self.stage_layers())) > 1 else {}),
        }

    def stage_layers(self) -> list[int]:
        """Transformer layers held by each pipeline rank (all its virtual chunks together)."""
        return stage_layers(self.parallelism, self.model, self.software)

    def chunk_layers(self, stage: int) -> list[int]:
        """Transformer layers of each of a pipeline rank's model chunks, in chunk order."""
        return chunk_layers(self.parallelism, self.model, self.software, stage)
