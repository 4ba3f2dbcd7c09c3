"""Scenario resolution: profiles by name with inline overrides, the model, and layout checks.

Reading the YAML and applying ``--set`` overrides live in :mod:`simulator.config.reading`.

Every problem a user can cause becomes one :class:`~simulator.errors.UserError` naming the file,
the field path and what to do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from ..errors import UserError, closest
from .hardware import (
    CloudPrice,
    FabricProfile,
    GPUProfile,
    NetworkProfile,
    OwnershipPrice,
    StorageProfile,
)
from .parallelism import FSDPSharding, Overlap, ParallelismSpec
from .reading import apply_sets, parse_yaml, read_yaml
from .scenario import ModelPresetRef, ProfileRef, ResolvedScenario, Scenario
from .software import SoftwareProfile
from .validation import validation_error
from .workload import ModelSpec


def parse_scenario(data: dict[str, Any], file: str | None) -> Scenario:
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, file) from None


def _resolve_profile(
    ref: Any, cls: type[BaseModel], kinds: tuple[str, ...], file: str | None, path: str
) -> Any:
    from ..catalog import load_catalog

    if isinstance(ref, str):
        ref = ProfileRef(profile=ref)
    overrides = dict(ref.model_extra or {})
    if ref.profile is None:
        data = {"kind": kinds[0], **overrides}
    else:
        try:
            base = load_catalog().get(ref.profile, *kinds)
        except UserError as err:
            raise err.located(file, f"{path}.profile" if overrides else path) from None
        if not overrides:
            return base
        data = _deep_merge(base.model_dump(mode="json"), overrides)
        if data.get("kind") not in kinds:
            data["kind"] = base.kind  # type: ignore[attr-defined]
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, file, path, cls) from None


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and "value" not in v:
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def resolve_model(model: Any, file: str | None) -> ModelSpec:
    from ..workload.presets import PRESETS

    if isinstance(model, ModelSpec):
        return model
    name = model if isinstance(model, str) else model.preset
    if name not in PRESETS:
        near = closest(name, PRESETS)
        raise UserError(
            f"unknown model preset '{name}'",
            file=file,
            path="model" if isinstance(model, str) else "model.preset",
            hint=(f"did you mean {', '.join(near)}? " if near else "")
            + "or give the architecture inline (layers, hidden, heads, vocab, ...)",
        )
    base = PRESETS[name]
    if isinstance(model, ModelPresetRef) and model.model_extra:
        data = {**base.model_dump(), **model.model_extra}
        try:
            return ModelSpec.model_validate(data)
        except ValidationError as exc:
            raise validation_error(exc, file, "model", ModelSpec) from None
    return base


def resolve(
    sc: Scenario, file: str | None = None, raw: dict[str, Any] | None = None
) -> ResolvedScenario:
    """Look profiles up, expand the model, derive DP and check the layout."""
    c = sc.cluster
    gpu = _resolve_profile(c.gpu, GPUProfile, ("gpu",), file, "cluster.gpu")
    if sc.training.precision == "fp32" and "fp32" not in gpu.peak_tflops:
        raise UserError(
            f"precision fp32 needs an fp32 peak, and GPU profile '{gpu.name}' has none",
            file=file,
            path="training.precision",
            hint="add cluster.gpu.peak_tflops.fp32 {value, source}, or train in bf16",
        )
    if sc.run.stragglers != "off" and gpu.speed_cv is None:
        raise UserError(
            f"run.stragglers: {sc.run.stragglers} needs the GPU's speed variation, and GPU "
            f"profile '{gpu.name}' has no speed_cv",
            file=file,
            path="run.stragglers",
            hint="add cluster.gpu.speed_cv {value, source}, or set run.stragglers: off",
        )
    fabric = _resolve_profile(c.fabric, FabricProfile, ("fabric",), file, "cluster.fabric")
    network = None
    nics = 0
    topology: Any = None
    if c.network is not None:
        network = _resolve_profile(
            c.network.profile, NetworkProfile, ("network",), file, "cluster.network.profile"
        )
        nics = c.network.nics_per_node
        topology = c.network.topology
    elif c.nodes > 1:
        raise UserError(
            f"{c.nodes} nodes need a network",
            file=file,
            path="cluster.network",
            hint="add cluster.network: {profile: ib-ndr-400, nics_per_node: 8}",
        )
    from .scenario import SingleSwitch

    storage = _resolve_profile(c.storage, StorageProfile, ("storage",), file, "cluster.storage")
    price = None
    tier: Literal["on_demand", "reserved", "spot"] = "on_demand"
    if c.pricing is not None:
        ref = c.pricing.profile
        ref_kind = None
        if isinstance(ref, ProfileRef) and ref.profile is None:
            ref_kind = (ref.model_extra or {}).get("kind")
        cls: type[BaseModel] = OwnershipPrice if ref_kind == "ownership_price" else CloudPrice
        if ref_kind is None:
            from ..catalog import load_catalog

            name = ref if isinstance(ref, str) else ref.profile
            prof = load_catalog().profiles.get(str(name))
            if isinstance(prof, OwnershipPrice):
                cls = OwnershipPrice
        price = _resolve_profile(
            ref, cls, ("cloud_price", "ownership_price"), file, "cluster.pricing.profile"
        )
        tier = c.pricing.tier
    model = resolve_model(sc.model, file)
    par = sc.parallelism
    gpus = c.gpus_per_node * c.nodes
    tr = sc.training

    if c.gpus_per_node > fabric.max_gpus:
        raise UserError(
            f"{c.gpus_per_node} GPUs per node but fabric '{fabric.name}' joins at most "
            f"{fabric.max_gpus}",
            file=file,
            path="cluster.gpus_per_node",
            hint="lower gpus_per_node or pick another fabric",
        )
    denom = par.tp * par.pp * par.cp
    if par.dp == "auto":
        if gpus % denom:
            raise UserError(
                f"{gpus} GPUs cannot be split into TP·PP·CP = {par.tp}·{par.pp}·{par.cp} = "
                f"{denom} per replica",
                file=file,
                path="parallelism",
                hint=f"make TP·PP·CP divide {gpus}, or change cluster.nodes",
            )
        dp = gpus // denom
    else:
        dp = par.dp
        if dp * denom != gpus:
            raise UserError(
                f"DP·TP·PP·CP = {dp}·{par.tp}·{par.pp}·{par.cp} = {dp * denom} but the cluster "
                f"has {gpus} GPUs ({c.nodes} nodes × {c.gpus_per_node})",
                file=file,
                path="parallelism.dp",
                hint=f"set dp: auto, or dp: {gpus // denom} if TP·PP·CP divides {gpus}"
                if gpus % denom == 0
                else "make DP·TP·PP·CP equal the GPU count",
            )
    if model.heads % par.tp:
        raise UserError(
            f"TP={par.tp} does not divide the {model.heads} attention heads of {model.name}",
            file=file,
            path="parallelism.tp",
            hint=f"use a TP that divides {model.heads}: "
            + ", ".join(str(d) for d in _divisors(model.heads) if d <= 64),
        )
    if model.n_kv_heads % par.tp and par.tp % model.n_kv_heads:
        raise UserError(
            f"TP={par.tp} and the {model.n_kv_heads} KV heads of {model.name} do not divide "
            "one another",
            file=file,
            path="parallelism.tp",
            hint="use a TP that divides the KV heads or is a multiple of them",
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
    if par.stage_layers is not None:
        sl = par.stage_layers
        if len(sl) not in (par.pp, par.pp * v) or sum(sl) != model.layers or min(sl) < 1:
            raise UserError(
                f"stage_layers must list {par.pp * v} positive counts summing to "
                f"{model.layers} layers (got {len(sl)} summing to {sum(sl)})",
                file=file,
                path="parallelism.stage_layers",
                hint="fix the list or remove it for even stages",
            )
        if v > 1 and len(sl) == par.pp and min(sl) < v:
            raise UserError(
                f"with {v} virtual stages each pipeline rank needs at least {v} layers (one per "
                f"model chunk); stage_layers gives one {min(sl)}",
                file=file,
                path="parallelism.stage_layers",
                hint=f"give each rank at least {v} layers, or list all {par.pp * v} chunks",
            )
    elif model.layers % (par.pp * v):
        what = f"PP={par.pp}" + (f" × {v} virtual stages" if v > 1 else "")
        raise UserError(
            f"{what} does not divide the {model.layers} layers of {model.name}",
            file=file,
            path="parallelism.pp",
            hint="pick a PP that divides the layers, or give uneven parallelism.stage_layers",
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
    if par.sequence_parallel and (par.tp == 1 or (tr.seq_len // par.cp) % par.tp):
        raise UserError(
            "sequence_parallel needs TP > 1"
            if par.tp == 1
            else f"sequence_parallel splits the {tr.seq_len // par.cp} tokens of a sequence "
            f"(per CP rank) over TP={par.tp}, which does not divide them",
            file=file,
            path="parallelism.sequence_parallel",
            hint="set tp above 1, a seq_len that TP divides, or sequence_parallel: false",
        )
    if par.dp_bucket_copy and par.zero_stage >= 1:
        raise UserError(
            "dp_bucket_copy models DDP's gradient bucket copies, which only plain data "
            f"parallelism makes; sharding {_sharding_name(par)} has no DDP buckets",
            file=file,
            path="parallelism.dp_bucket_copy",
            hint="set dp_bucket_copy: false, or sharding: {kind: zero, stage: 0}",
        )
    if v > 1 and par.pp == 1:
        raise UserError(
            "the interleaved schedule needs PP > 1",
            file=file,
            path="parallelism.pp_schedule",
            hint="use kind: 1f1b, or raise pp",
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
    if passes > MAX_PIPELINE_PASSES:
        raise UserError(
            f"{tr.global_batch // (dp * tr.micro_batch):,} micro-batches through {par.pp * v} "
            f"pipeline stage(s) is {passes:,} passes per step, more than a planner simulates "
            f"({MAX_PIPELINE_PASSES:,})",
            file=file,
            path="training.global_batch",
            hint="raise micro_batch or DP, or lower global_batch: the step time per sample "
            "does not change past a few hundred micro-batches",
        )
    if tr.precision == "fp8" and "fp8" not in gpu.peak_tflops:
        raise UserError(
            f"GPU '{gpu.name}' has no fp8 tensor-core rate in its profile (fp8 training needs "
            "Hopper, Ada, Blackwell or CDNA3 parts)",
            file=file,
            path="training.precision",
            hint="use bf16 on this GPU, or give its profile a peak_tflops.fp8 figure",
        )
    if isinstance(price, CloudPrice):
        rates = price.tier_rates()
        if rates[tier] is None:
            have = ", ".join(t for t, r in rates.items() if r is not None)
            raise UserError(
                f"pricing profile '{price.name}' has no {tier} price",
                file=file,
                path="cluster.pricing.tier",
                hint=f"use a tier the profile has ({have}), or add {tier}_usd_per_gpu_hour to "
                "the profile",
            )
    if (
        isinstance(price, OwnershipPrice)
        and price.gpus_per_node is not None
        and price.gpus_per_node.value != c.gpus_per_node
    ):
        n = f"{price.gpus_per_node.value:g}"
        raise UserError(
            f"pricing profile '{price.name}' prices {n}-GPU nodes but the cluster has "
            f"{c.gpus_per_node} GPUs per node",
            file=file,
            path="cluster.gpus_per_node",
            hint=f"use {n} GPUs per node, or a price profile for {c.gpus_per_node}-GPU nodes "
            f"(a copy of {price.name} with that node's capex_per_node_usd and gpus_per_node)",
        )
    if price is not None and price.gpu != gpu.name:
        raise UserError(
            f"pricing profile '{price.name}' is for GPU '{price.gpu}' but the cluster uses "
            f"'{gpu.name}'",
            file=file,
            path="cluster.pricing.profile",
            hint=f"pick a price profile for {gpu.name} (`clustersim profiles list`)",
        )
    name = sc.name or (Path(file).stem if file else "scenario")
    software = _resolve_profile(sc.software, SoftwareProfile, ("software",), file, "software")
    par = par.model_copy(update={"overlap": _stack_overlap(par.overlap, software)})
    return ResolvedScenario(
        name=name,
        source_file=file,
        gpu=gpu,
        gpus_per_node=c.gpus_per_node,
        nodes=c.nodes,
        fabric=fabric,
        network=network,
        nics_per_node=nics,
        topology=topology or SingleSwitch(),
        storage=storage,
        price=price,
        price_tier=tier,
        price_utilisation=c.pricing.utilisation if c.pricing is not None else 1.0,
        model=model,
        training=tr,
        parallelism=par,
        software=software,
        dp=dp,
        run=sc.run,
        reference=sc.reference,
        raw=raw or {},
    )


# Micro-batches × pipeline stages × virtual stages the event engine is asked to run in one step:
# the Megatron-LM 1T run (512 micro-batches, PP 64, interleaved) is 65,536.
MAX_PIPELINE_PASSES = 1 << 21


def _stack_overlap(written: Overlap, stack: SoftwareProfile) -> Overlap:
    """The software stack's overlap behaviour, with what the scenario sets explicitly on top."""
    base = {name: getattr(stack.overlap, name).value for name in Overlap.model_fields}
    base.update({name: getattr(written, name) for name in written.model_fields_set})
    return Overlap(**base)


def _sharding_name(par: ParallelismSpec) -> str:
    sh = par.sharding
    if isinstance(sh, FSDPSharding):
        return f"FSDP {sh.strategy}"
    return f"ZeRO-{sh.stage}"


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def load_scenario(path: str | Path, sets: list[str] | None = None) -> ResolvedScenario:
    """Read, override, validate and resolve a scenario file."""
    p = Path(path)
    file = str(path)
    data = apply_sets(read_yaml(p), sets or [], file)
    sc = parse_scenario(data, file)
    return resolve(sc, file, data)


def resolve_dict(
    data: dict[str, Any], sets: list[str] | None = None, file: str | None = None
) -> ResolvedScenario:
    """As :func:`load_scenario`, from a mapping already in memory (sweeps, tests)."""
    data = apply_sets(data, sets or [], file)
    return resolve(parse_scenario(data, file), file, data)


__all__ = [
    "apply_sets",
    "load_scenario",
    "parse_scenario",
    "parse_yaml",
    "read_yaml",
    "resolve",
    "resolve_dict",
    "resolve_model",
    "validation_error",
]
