"""The checks that a resolved layout makes sense: degrees against heads,
layers, batch and sequence, sharding groups, pipeline chunks, the stack and the fabric (the
price profile's checks: :mod:`.price_checks`). Each failure is one
:class:`~simulator.errors.UserError` naming the file, the field path and what to do."""

from __future__ import annotations

from ..errors import UserError
from .hardware import FabricProfile, GPUProfile
from .parallelism import FSDPSharding, ParallelismSpec
from .stage_split import ranks_without_blocks
from .workload import ModelSpec, TrainingSpec

# Micro-batches × pipeline stages × virtual stages the event engine is asked to run in one step:
# the Megatron-LM 1T run (512 micro-batches, PP 64, interleaved) is 65,536.
MAX_PIPELINE_PASSES = 1 << 21
# GPipe is simulated micro-batch by micro-batch (its queues grow with the count, so no steady
# state is extrapolated, engine/periodic.py): about 50,000 passes a second, so a few seconds.
MAX_GPIPE_PASSES = 1 << 17


def check_layout(
    model: ModelSpec,
    par: ParallelismSpec,
    tr: TrainingSpec,
    dp: int,
    file: str | None,
    split: str = "even",
) -> None:
    """The parallel layout against the model and the training batch; ``split``: the stack's
    rule for layers the scenario does not place (only an even split needs PP to divide them)."""
    if model.heads % par.tp:
        raise UserError(
            f"TP={par.tp} does not divide the {model.heads} attention heads of {model.name}",
            file=file,
            path="parallelism.tp",
            hint=f"use a TP that divides {model.heads}: " + _tp_choices(model),
        )
    if model.n_kv_heads % par.tp and par.tp % model.n_kv_heads:
        raise UserError(
            f"TP={par.tp} and the {model.n_kv_heads} KV heads of {model.name} do not divide "
            "one another",
            file=file,
            path="parallelism.tp",
            hint="use a TP that divides the KV heads or is a multiple of them: "
            + _tp_choices(model),
        )
    if model.ffn % par.tp:
        raise UserError(
            f"TP={par.tp} does not divide the feed-forward width {model.ffn} of {model.name} "
            "(each TP rank holds an equal column slice of the MLP)",
            file=file,
            path="parallelism.tp",
            hint="use a TP that divides it: " + _tp_choices(model),
        )
    sh = par.sharding
    if isinstance(sh, FSDPSharding) and sh.shard_group is not None:
        if sh.strategy != "hybrid_shard":
            raise UserError(
                f"shard_group applies to hybrid_shard; {sh.strategy} shards over all of DP×CP",
                file=file,
                path="parallelism.sharding.shard_group",
                hint="remove shard_group, or use strategy: hybrid_shard",
            )
        if (dp * par.cp) % sh.shard_group:
            raise UserError(
                f"shard_group {sh.shard_group} does not divide the {dp * par.cp} DP×CP ranks",
                file=file,
                path="parallelism.sharding.shard_group",
                hint="use a divisor of DP×CP: "
                + ", ".join(str(d) for d in _divisors(dp * par.cp)[:12]),
            )
    v = par.virtual_stages
    if v > 1 and par.pp == 1:  # before the chunks: no virtual stage count helps PP 1
        raise UserError(
            "the interleaved schedule needs PP > 1",
            file=file,
            path="parallelism.pp_schedule",
            hint="use kind: 1f1b, or raise pp",
        )
    if par.stage_layers is not None:
        sl = par.stage_layers
        # Only the ends may be empty: the first chunk can hold just the embedding and the last
        # just the output layer and loss (Llama 3, Sec. 3.3.2; Megatron-Core's pipeline layout).
        ends_only = len(sl) == par.pp * v and len(sl) >= 2
        zero = next(
            (i for i, n in enumerate(sl) if n < 1 and not (ends_only and i in (0, len(sl) - 1))),
            None,
        )
        if len(sl) not in (par.pp, par.pp * v) or sum(sl) != model.layers or zero is not None:
            why = f"; stage_layers[{zero}] is 0" if zero is not None else ""
            raise UserError(
                f"stage_layers must list {par.pp * v} counts summing to {model.layers} layers, "
                f"each at least 1 (the first and last may be 0 when every chunk is listed; "
                f"got {len(sl)} summing to {sum(sl)}{why})",
                file=file,
                path="parallelism.stage_layers",
                hint="fix the list, or remove it to let the software stack place the layers",
            )
        if v > 1 and len(sl) == par.pp and min(sl) < v:
            raise UserError(
                f"with {v} virtual stages each pipeline rank needs at least {v} layers (one per "
                f"model chunk); stage_layers gives one {min(sl)}",
                file=file,
                path="parallelism.stage_layers",
                hint=f"give each rank at least {v} layers, or list all {par.pp * v} chunks",
            )
    elif split == "cost_thresholds" and (empty := ranks_without_blocks(model, par.pp)):
        fit = max(p for p in range(1, par.pp) if not ranks_without_blocks(model, p))
        raise UserError(
            f"PP={par.pp}: the stack's cost split (nanotron's) leaves pipeline rank"
            f"{'s' if len(empty) > 1 else ''} {', '.join(map(str, empty))} without any block "
            f"of {model.name}: it fills each rank to an equal share of the estimated cost, and "
            f"the {model.layers} layers and output layer run out first (nanotron cannot build "
            "that layout)",
            file=file,
            path="parallelism.pp",
            hint=f"use PP {fit} or less, or list parallelism.stage_layers",
        )
    elif split == "even" and model.layers % (par.pp * v):
        if model.layers % par.pp or par.pp > model.layers:
            v = 1  # PP itself does not fit the layers: that is the setting to change first
        what = f"PP={par.pp}" + (f" × {v} virtual stages" if v > 1 else "")
        more = par.pp * v > model.layers
        raise UserError(
            f"{what} "
            + (
                f"gives more pipeline chunks than the {model.layers} layers of {model.name}"
                if more
                else f"does not divide the {model.layers} layers of {model.name}"
            ),
            file=file,
            path="parallelism.pp_schedule.virtual_stages" if v > 1 else "parallelism.pp",
            hint=_chunks_hint(model.layers, par.pp, v, more),
        )
    if tr.global_batch % (dp * tr.micro_batch):
        raise UserError(
            f"global batch {tr.global_batch} is not a multiple of DP·micro_batch = "
            f"{dp}·{tr.micro_batch} = {dp * tr.micro_batch}",
            file=file,
            path="training.global_batch",
            hint=f"use a global batch that is a multiple of {dp * tr.micro_batch}",
        )
    if par.cp > 1 and tr.seq_len % (2 * par.cp):  # Megatron/TE: 2·CP load-balanced chunks
        raise UserError(
            f"CP={par.cp} splits each sequence into 2·CP = {2 * par.cp} chunks, which do not "
            f"divide the sequence length {tr.seq_len}",
            file=file,
            path="parallelism.cp",
            hint=f"make seq_len a multiple of {2 * par.cp}, or pick another CP",
        )
    # (at TP 1 resolve() has already turned sequence parallelism off)
    if par.sequence_parallel and (tr.seq_len // par.cp) % par.tp:
        raise UserError(
            f"sequence_parallel splits the {tr.seq_len // par.cp} tokens of a sequence "
            f"(per CP rank) over TP={par.tp}, which does not divide them",
            file=file,
            path="parallelism.sequence_parallel",
            hint=f"use a seq_len that {par.tp * par.cp} divides, or sequence_parallel: false",
        )
    if par.dp_bucket_copy and par.zero_stage >= 1:
        raise UserError(
            "dp_bucket_copy models DDP's gradient bucket copies, which only plain data "
            f"parallelism makes; sharding {sharding_name(par)} has no DDP buckets",
            file=file,
            path="parallelism.dp_bucket_copy",
            hint="set dp_bucket_copy: false, or sharding: {kind: zero, stage: 0}",
        )
    if tr.param_gather_dtype == "fp8" and (tr.precision != "fp8" or par.zero_stage < 3):
        raise UserError(
            "param_gather_dtype fp8 gathers the float8 weights of fp8 training, layer by layer "
            "under ZeRO-3/FSDP; "
            + (
                f"this plan trains in {tr.precision}"
                if tr.precision != "fp8"
                else f"sharding {sharding_name(par)} is modelled with one gather a step (as "
                "ZeRO-1/2), not a gather per layer"
            ),
            file=file,
            path="training.param_gather_dtype",
            hint="set training.param_gather_dtype: bf16 (or remove it), or train in fp8 with "
            "sharding: {kind: fsdp} (or ZeRO stage 3)",
        )
    if par.pp > 1 and v > 1 and (tr.global_batch // (dp * tr.micro_batch)) % par.pp:
        raise UserError(
            "the interleaved schedule needs the micro-batch count to be a multiple of PP "
            f"(got {tr.global_batch // (dp * tr.micro_batch)} micro-batches, PP={par.pp})",
            file=file,
            path="training.global_batch",
            hint="change global_batch or micro_batch, or use the 1f1b schedule",
        )
    passes = (tr.global_batch // (dp * tr.micro_batch)) * par.pp * v
    gpipe = par.pp_schedule.kind == "gpipe"
    limit = MAX_GPIPE_PASSES if gpipe else MAX_PIPELINE_PASSES
    if passes > limit:
        raise UserError(
            f"{tr.global_batch // (dp * tr.micro_batch):,} micro-batches through {par.pp * v} "
            f"pipeline stage(s) is {passes:,} passes per step, more than a planner simulates "
            f"({limit:,}{', GPipe being simulated pass by pass' if gpipe else ''})",
            file=file,
            path="training.global_batch",
            hint="raise micro_batch or DP, or lower global_batch: the step time per sample "
            "does not change past a few hundred micro-batches",
        )


def check_hybrid_default(
    par: ParallelismSpec, dp: int, gpus_per_node: int, file: str | None
) -> None:
    """Hybrid sharding without ``shard_group`` shards over a node's DP×CP ranks (FSDP's
    HYBRID_SHARD: inside the node, replicated across nodes); a node's worth that does not
    divide DP×CP is a layout that cannot exist (12 ranks in groups of 8)."""
    sh = par.sharding
    if not isinstance(sh, FSDPSharding) or sh.strategy != "hybrid_shard" or sh.shard_group:
        return
    ranks = dp * par.cp
    group = min(ranks, max(1, gpus_per_node // par.tp))
    if ranks % group:
        raise UserError(
            f"hybrid_shard shards over a node's {group} DP×CP ranks (gpus_per_node / TP), which "
            f"does not divide the {ranks} DP×CP ranks: the replicas would not be whole",
            file=file,
            path="parallelism.sharding.shard_group",
            hint="set shard_group to a divisor of DP×CP: "
            + ", ".join(str(d) for d in _divisors(ranks)[:12]),
        )


def sharding_name(par: ParallelismSpec) -> str:
    sh = par.sharding
    if isinstance(sh, FSDPSharding):
        return f"FSDP {sh.strategy}"
    return f"ZeRO-{sh.stage}"


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def check_offload(
    par: ParallelismSpec, model: ModelSpec, gpu: GPUProfile, file: str | None
) -> None:
    """Activation offloading as Megatron-Core runs it (TransformerConfig's checks on
    cpu_offloading: fewer layers than the model has, no pipeline parallelism, no activation
    recomputation), over a host link the GPU profile knows."""
    n = par.offload_activation_layers
    if not n:
        return
    path = "parallelism.offload_activation_layers"
    if n >= model.layers:
        raise UserError(
            f"offloading {n} layers' activations leaves none of the {model.layers} on the GPU",
            file=file,
            path=path,
            hint=f"offload at most {model.layers - 1} layers",
        )
    if par.pp > 1 or par.recompute != "none":
        raise UserError(
            "activation offloading runs without pipeline parallelism or recomputation "
            "(Megatron-Core refuses either with cpu_offloading)",
            file=file,
            path=path,
            hint="set pp: 1 and recompute: none, or offload no layers",
        )
    if gpu.host_link_gbps is None:
        raise UserError(
            f"GPU profile '{gpu.name}' gives no host link bandwidth, which offloading moves "
            "activations over",
            file=file,
            path=path,
            hint="give the profile host_link_gbps (GB/s per direction: PCIe or NVLink-C2C)",
        )


__all__ = [
    "MAX_PIPELINE_PASSES",
    "check_layout",
    "check_offload",
    "sharding_name",
]


def _tp_choices(model: ModelSpec) -> str:
    """The TP degrees up to 64 that every per-head and per-column split of ``model`` allows
    (the attention heads, the KV heads, the feed-forward width), so a hint never names one the
    next check refuses; the GPUs must hold it too."""
    ok = [
        d
        for d in _divisors(model.heads)
        if d <= 64
        and (model.n_kv_heads % d == 0 or d % model.n_kv_heads == 0)
        and model.ffn % d == 0
    ]
    allowed = ", ".join(str(d) for d in ok)
    return f"{allowed} (what its heads, KV heads and feed-forward width allow)"


def _chunks_hint(layers: int, pp: int, v: int, more: bool) -> str:
    """What to change when PP × virtual stages does not divide the layers."""
    if v > 1:
        fits = [x for x in range(2, layers // pp + 1) if layers % (pp * x) == 0]
        if fits:
            return (
                f"use virtual_stages {' or '.join(str(x) for x in fits[-3:])} with PP={pp} "
                "(PP × virtual_stages must divide the layers), or give parallelism.stage_layers"
            )
        return (
            f"no virtual stage count divides the {layers} layers over PP={pp}: use the 1f1b "
            "schedule, another PP, or give parallelism.stage_layers"
        )
    if more:
        return f"pick a PP of at most {layers} that divides the layers"
    return "pick a PP that divides the layers, or give uneven parallelism.stage_layers"


def check_fabric(
    gpu: GPUProfile, fabric: FabricProfile, gpus_per_node: int, file: str | None
) -> None:
    """The fabric against the GPU it joins and the node's GPU count."""
    # NVLink/NVSwitch joins NVIDIA GPUs only, Infinity Fabric AMD ones (PCIe joins any).
    needs = {"nvswitch": "nvidia", "infinity_fabric": "amd"}.get(fabric.technology)
    if needs is not None and gpu.vendor != needs:
        raise UserError(
            f"fabric '{fabric.name}' ({fabric.technology}) joins {needs.upper()} GPUs only, "
            f"and '{gpu.name}' is {'an' if gpu.vendor.upper()[:1] in 'AEIOU' else 'a'} "
            f"{gpu.vendor.upper()} GPU",
            file=file,
            path="cluster.fabric",
            hint="pick a fabric for this GPU (clustersim profiles list fabric), e.g. a PCIe one",
        )
    if fabric.technology == "nvswitch":
        link = gpu.nvlink_gbps
        if link is None:
            raise UserError(
                f"fabric '{fabric.name}' is NVLink through NVSwitch, and '{gpu.name}' has no "
                "NVLink to a switch",
                file=file,
                path="cluster.fabric",
                hint="pick a PCIe fabric for this GPU (clustersim profiles list fabric), or "
                "give the GPU profile its nvlink_gbps",
            )
    if gpus_per_node > fabric.max_gpus.value:
        raise UserError(
            f"{gpus_per_node} GPUs per node but fabric '{fabric.name}' joins at most "
            f"{fabric.max_gpus.value}",
            file=file,
            path="cluster.gpus_per_node",
            hint="lower gpus_per_node or pick another fabric",
        )
    # (two, the default, also on a one-GPU node: one socket then holds nothing)
    if fabric.technology == "pcie_host" and fabric.sockets > max(2, gpus_per_node):
        raise UserError(
            f"{fabric.sockets} CPU sockets for {gpus_per_node} GPUs per node: the sockets "
            "split the node's GPUs, so each holds at least one",
            file=file,
            path="cluster.fabric.sockets",
            hint=f"give at most {max(2, gpus_per_node)} sockets (2 on a dual-socket host)",
        )
