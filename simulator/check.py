"""`clustersim check`: size of the job, memory per GPU, and the levers that make it fit."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from .config.loading import resolve_dict
from .config.parallelism import FSDPSharding
from .config.scenario import ResolvedScenario
from .errors import UserError
from .workload.comm import comm_summary
from .workload.memory import TIGHT_SHARE, MemoryReport, memory_report
from .workload.model import (
    hardware_flops_per_token,
    model_flops_per_token,
    param_count,
)
from .workload.recompute import skips_last_matmul


@dataclass
class Lever:
    change: list[str]  # --set expressions
    peak_gb: float


@dataclass
class CheckReport:
    rs: ResolvedScenario
    memory: MemoryReport
    params: int
    model_flops_per_step: float
    hardware_flops_per_step: float
    comm_bytes: dict[str, float]
    levers: list[Lever] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.memory.fits

    @property
    def tight(self) -> bool:
        """A plan that fits with less headroom than PyTorch's caching allocator usually
        takes beyond the live tensors this model counts (:data:`TIGHT_SHARE`)."""
        return self.fits and self.memory.peak.total_gb > TIGHT_SHARE * self.memory.capacity_gb

    def as_dict(self) -> dict[str, Any]:
        rs = self.rs
        peak = self.memory.peak
        return {
            "scenario": rs.name,
            "file": rs.source_file,
            "gpus": rs.gpus,
            "layout": rs.layout(),
            "model": rs.model.name,
            "params": self.params,
            "tokens_per_step": rs.training.tokens_per_step,
            "flops_per_step": self.model_flops_per_step,
            "hardware_flops_per_step": self.hardware_flops_per_step,
            "memory_gb_per_gpu": {
                "total": peak.total_gb,
                "capacity": self.memory.capacity_gb,
                "peak_stage": peak.stage,
                "breakdown": {
                    k: v for k, v in peak.as_dict().items() if k.endswith("_gb") and k != "total_gb"
                },
                "stages": [s.as_dict() for s in self.memory.stages],
            },
            "fits": self.fits,
            "tight": self.tight,
            "comm_bytes_per_step_per_gpu": self.comm_bytes,
            "levers": [{"set": lv.change, "peak_gb": lv.peak_gb} for lv in self.levers],
        }

    def as_row(self) -> dict[str, Any]:
        """The report as one flat CSV row: every figure the table shows, the layout's fields
        and the peak stage's memory by kind, and the changes that make a plan fit as --set
        flags (';' between the alternatives)."""
        d = self.as_dict()
        mem = d["memory_gb_per_gpu"]
        return {
            "scenario": d["scenario"],
            "gpus": d["gpus"],
            **{f"layout.{k}": v for k, v in d["layout"].items()},
            "params": d["params"],
            "tokens_per_step": d["tokens_per_step"],
            "flops_per_step": d["flops_per_step"],
            "hardware_flops_per_step": d["hardware_flops_per_step"],
            "memory_gb_per_gpu": mem["total"],
            "capacity_gb": mem["capacity"],
            "peak_stage": mem["peak_stage"],
            "fits": d["fits"],
            "tight": d["tight"],
            **{f"memory_{k}": v for k, v in mem["breakdown"].items()},
            "levers": "; ".join(" ".join(f"--set {x}" for x in lv["set"]) for lv in d["levers"]),
        }


def _candidate_changes(rs: ResolvedScenario) -> list[str]:
    par = rs.parallelism
    out: list[str] = []
    if par.recompute == "none":
        out.append("parallelism.recompute=selective")
    if par.recompute != "full":
        out.append("parallelism.recompute=full")
    if rs.dp_cp > 1 and par.dp_bucket_copy and par.zero_stage == 0:
        # gradient_as_bucket_view=True drops DDP's second gradient buffer; a ZeRO lever needs
        # it too (the copy is plain DP's only), so ZeRO comes paired with this change.
        out.append("parallelism.dp_bucket_copy=false")
    if rs.dp_cp > 1 and isinstance(par.sharding, FSDPSharding):
        # FSDP's own lever, sharding everything over the whole DP group (full_shard ~ ZeRO-3),
        # as the field: a whole-mapping --set would lose to the user's own more specific
        # `--set parallelism.sharding.strategy=...` on the same command line (or be refused
        # beside it: a ZeRO mapping has no strategy)
        if par.sharding.strategy != "full_shard":
            out.append("parallelism.sharding.strategy=full_shard")
    elif rs.dp_cp > 1:
        # Written as the field where the plan already gives a ZeRO mapping: a user's own
        # `--set parallelism.sharding.stage=0` outranks a whole-mapping --set (more specific),
        # so only the field form applied on the same command line takes effect.
        given = (rs.raw.get("parallelism") or {}).get("sharding")
        leaf = isinstance(given, dict) and given.get("kind", "zero") == "zero"
        for stage in range(par.zero_stage + 1, 4):
            out.append(
                f"parallelism.sharding.stage={stage}"
                if leaf
                else f"parallelism.sharding={{kind: zero, stage: {stage}}}"
            )
    if rs.training.micro_batch > 1:
        out.append("training.micro_batch=1")
    if rs.tp > 1 and not par.sequence_parallel:
        out.append("parallelism.sequence_parallel=true")
    m = rs.model
    # more tensor parallelism inside a node, and context parallelism (long sequences): each
    # divides the activations, the weights too for TP (the pairs below add recomputation)
    for k in (2, 4, 8):
        tp = rs.tp * k
        if m.heads % tp == 0 and tp <= rs.gpus_per_node and rs.gpus % (tp * rs.pp * rs.cp) == 0:
            out.append(f"parallelism.tp={tp}")
    for k in (2, 4, 8):
        cp = rs.cp * k
        if rs.training.seq_len % (2 * cp) == 0 and rs.gpus % (rs.tp * rs.pp * cp) == 0:
            out.append(f"parallelism.cp={cp}")
    if (
        rs.pp == 1
        and par.recompute == "none"
        and rs.gpu.host_link_gbps is not None
        and par.offload_activation_layers < m.layers // 2
    ):
        # Megatron-Core's activation offloading, as NVIDIA's GB200 recipes use it: half the
        # layers (the lever says how far; more is one --set away)
        out.append(f"parallelism.offload_activation_layers={m.layers // 2}")
    if rs.gathers_once:
        # Under a pipeline this stack holds every stage's weights and gradients whole; without
        # one, its FSDP shards them again.
        out.append("parallelism.pp=1")
    # the next few stage counts that split both the layers and the GPUs (3 as well as 2 and
    # 4: 24 GPUs of a 60-layer model fit at PP 3, and a doubling-only search offered none)
    # (each chunk of an interleaved schedule holds layers too; a plan that lists its stages'
    # layers needs a new list for another count, so gets no PP lever)
    if par.stage_layers is None:
        v = par.virtual_stages if par.pp_schedule.kind == "interleaved" else 1
        more = [
            pp
            for pp in range(rs.pp + 1, min(m.layers, rs.gpus // (rs.tp * rs.cp)) + 1)
            if m.layers % (pp * v) == 0 and rs.gpus % (pp * rs.tp * rs.cp) == 0
        ]
        out += [f"parallelism.pp={pp}" for pp in more[:3]]
    return out


# What a change usually costs in step time, lowest first (a rule of thumb, not a simulation):
# sequence parallelism and ZeRO-1/2 move no more data than before; selective recomputation
# redoes the attention core; a smaller micro-batch runs smaller GEMMs; more pipeline stages add
# bubble and more tensor parallelism exposed communication; ZeRO-3 regathers the weights every
# pass and offloading copies activations; full recomputation redoes a whole forward pass.
_USUAL_COST = (
    ("parallelism.sequence_parallel", 0),
    ("parallelism.dp_bucket_copy", 0),
    ("parallelism.sharding={kind: zero, stage: 1}", 1),
    ("parallelism.sharding={kind: zero, stage: 2}", 1),
    ("parallelism.sharding.stage=1", 1),
    ("parallelism.sharding.stage=2", 1),
    ("parallelism.recompute=selective", 2),
    ("training.micro_batch", 3),
    ("parallelism.pp", 4),
    ("parallelism.tp", 5),
    ("parallelism.cp", 5),
    ("parallelism.sharding={kind: zero, stage: 3}", 6),
    ("parallelism.sharding.stage=3", 6),
    ("parallelism.sharding.strategy=full_shard", 6),
    ("parallelism.offload_activation_layers", 6),
    ("parallelism.recompute=full", 7),
)


def _usual_cost(change: str) -> int:
    return next((c for prefix, c in _USUAL_COST if change.startswith(prefix)), 5)


def find_levers(rs: ResolvedScenario, limit: int = 5) -> list[Lever]:
    """Single changes to the plan that make it fit, and pairs of them that usually cost less
    than any single one that fits (all pairs where none does), in the order of what they
    usually cost in step time (``_USUAL_COST``, the costlier change of a pair; simulate them to
    compare for this plan). A pair that holds a change fitting alone is left out, and of the
    degrees (TP, PP, CP) only the smallest that fits."""
    base = dict(rs.raw)
    if not base:
        return []
    extra = []
    if base.get("parallelism", {}).get("dp") not in (None, "auto"):
        extra = ["parallelism.dp=auto"]
    cands = _candidate_changes(rs)
    degrees = ("parallelism.tp", "parallelism.pp", "parallelism.cp")
    found: list[Lever] = []
    alone: set[str] = set()
    seen: set[tuple[str, ...]] = set()
    for size in (1, 2):
        for combo in combinations(cands, size):
            keys = [c.split("=")[0] for c in combo]
            # the degrees come smallest first: where TP 4 fits, TP 8 is not news
            if len(set(keys)) < len(keys) or tuple(keys) in seen:
                continue
            if any(c in alone or c.split("=")[0] in alone for c in combo):
                continue
            try:
                alt = resolve_dict(base, list(combo) + extra)
            except UserError:
                continue
            rep = memory_report(alt)
            if rep.fits:
                # A scenario with an explicit DP needs it re-derived when a model-parallel
                # degree changes: the lever says so, so that applying it as printed works.
                needs = extra if any(k in degrees for k in keys) else []
                found.append(Lever(list(combo) + needs, rep.peak.total_gb))
                if size == 1:
                    # (a larger degree of one that fits alone is not news in a pair either)
                    alone.add(keys[0] if keys[0] in degrees else combo[0])
                if any(k in degrees for k in keys):
                    seen.add(tuple(keys))

    # a pair is worth reading only where it usually costs less than every single change
    # (the re-derived DP a lever may carry is not a change of its own)
    def own(lv: Lever) -> list[str]:
        return [c for c in lv.change if c not in extra]

    def cost(lv: Lever) -> tuple[int, int, int]:
        costs = [_usual_cost(c) for c in own(lv)]
        return max(costs), len(costs), sum(costs)

    singles = [cost(lv)[0] for lv in found if len(own(lv)) == 1]
    if singles:
        found = [lv for lv in found if len(own(lv)) == 1 or cost(lv)[0] < min(singles)]
    found.sort(key=cost)
    return found[:limit]


def check(rs: ResolvedScenario) -> CheckReport:
    if rs.run.scaling_reference is not None:
        from .simulate import reference_layout

        reference_layout(rs)  # a reference that cannot be laid out: the error simulate gives
    mem = memory_report(rs)
    tokens = rs.training.tokens_per_step
    s = rs.training.seq_len
    rep = CheckReport(
        rs=rs,
        memory=mem,
        params=param_count(rs.model, s),
        model_flops_per_step=model_flops_per_token(rs.model, s) * tokens,
        hardware_flops_per_step=hardware_flops_per_token(
            rs.model, s, rs.parallelism.recompute, rs.selective_policy, skips_last_matmul(rs)
        )
        * tokens,
        comm_bytes=comm_summary(rs),
    )
    if not mem.fits:
        rep.levers = find_levers(rs)
    return rep
