"""Scenario resolution: profiles by name with inline overrides, the model, DP, and the checks
(the fabric's, the layout's and the price's live in :mod:`simulator.config.layout_checks`).

Reading the YAML and applying ``--set`` overrides live in :mod:`simulator.config.reading`.

Every problem a user can cause becomes one :class:`~simulator.errors.UserError` naming the file,
the field path and what to do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from ..errors import UserError, closest
from .blame import blame_set
from .cluster import ProfileRef
from .hardware import (
    FabricProfile,
    GPUProfile,
    NetworkProfile,
    StorageProfile,
)
from .layout_checks import (
    check_fabric,
    check_hybrid_default,
    check_layout,
    check_offload,
)
from .other_files import refuse_other_files
from .parallelism import Overlap
from .price_checks import check_pricing
from .prices import CloudPrice, OwnershipPrice
from .profile_refs import resolve_profile as _resolve_profile
from .reading import apply_sets, names_ownership_price, parse_yaml, read_yaml, replaced_fields
from .scenario import ModelPresetRef, ResolvedScenario, Scenario, gathers_once
from .software import SoftwareProfile, on
from .stack_checks import check_stack
from .stage_split import split_rule
from .validation import validation_error
from .workload import ModelSpec


def parse_scenario(data: dict[str, Any], file: str | None) -> Scenario:
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, file) from None


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
            hint=(
                f"did you mean {', '.join(near)}? Or give the architecture inline "
                if near
                else f"use a preset ({', '.join(sorted(PRESETS))}) or give the architecture inline "
            )
            + "(layers, hidden, heads, vocab, ...)",
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
    # fp32 training needs the fp32 peak; bf16 a bf16 one (a GPU without bf16 tensor cores, a
    # V100, runs it emulated, far below its fp16 rate); fp16 and fp8 a 16-bit one (fp8 keeps
    # attention and the logits at the 16-bit rate)
    prec = sc.training.precision
    wants = {"fp32": ("fp32",), "bf16": ("bf16",)}.get(prec, ("bf16", "fp16"))
    if not any(d in gpu.peak_tflops for d in wants):
        hint = f"add cluster.gpu.peak_tflops.{wants[0]} {{value, source}}"
        if prec == "fp32":
            hint += f", or train in {gpu.half_dtype or 'bf16'}"
        elif prec == "bf16" and "fp16" in gpu.peak_tflops:
            hint = (
                f"train in fp16 (training.precision: fp16): {gpu.name} has no bf16 peak; or "
                "add cluster.gpu.peak_tflops.bf16 if this GPU has bf16 tensor cores"
            )
        raise UserError(
            f"precision {prec} needs a {' or '.join(wants)} peak, and GPU profile "
            f"'{gpu.name}' has none",
            file=file,
            path="training.precision",
            hint=hint,
        )
    if sc.run.stragglers == "expected" and gpu.speed_cv is None:
        raise UserError(
            f"'{sc.run.stragglers}' needs the GPU's speed variation, and GPU "
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
    from .cluster import SingleSwitch

    storage = _resolve_profile(c.storage, StorageProfile, ("storage",), file, "cluster.storage")
    price = None
    tier: Literal["on_demand", "reserved", "spot"] = "on_demand"
    if c.pricing is not None:
        ref = c.pricing.profile
        ref_kind = None
        if isinstance(ref, ProfileRef) and ref.profile is None:
            ref_kind = (ref.model_extra or {}).get("kind")
        cls: type[BaseModel] = OwnershipPrice if ref_kind == "ownership_price" else CloudPrice
        if ref_kind is None and names_ownership_price(ref if isinstance(ref, str) else ref.profile):
            cls = OwnershipPrice
        price = _resolve_profile(
            ref, cls, ("cloud_price", "ownership_price"), file, "cluster.pricing.profile"
        )
        tier = c.pricing.tier
    model = resolve_model(sc.model, file)
    par = sc.parallelism
    gpus = c.gpus_per_node * c.nodes
    tr = sc.training

    check_fabric(gpu, fabric, c.gpus_per_node, file)
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
    if par.sequence_parallel and par.tp == 1:  # nothing to split over: Megatron-LM turns it off
        par = par.model_copy(update={"sequence_parallel": False})
    software = _resolve_profile(sc.software, SoftwareProfile, ("software",), file, "software")
    check_layout(model, par, tr, dp, file, split_rule(par, software))
    check_hybrid_default(par, dp, c.gpus_per_node, file)
    if sc.run.tokens is not None and sc.run.tokens < tr.tokens_per_step:
        raise UserError(
            f"run.tokens {sc.run.tokens:g} is less than one step's {tr.tokens_per_step:,} "
            "tokens (global batch × sequence length)",
            file=file,
            path="run.tokens",
            hint="give the run's whole token budget (e.g. 1.0e12), or leave it out",
        )
    if tr.precision == "fp8" and "fp8" not in gpu.peak_tflops:
        raise UserError(
            f"GPU '{gpu.name}' has no fp8 tensor-core rate in its profile (fp8 training needs "
            "Hopper, Ada, Blackwell or CDNA3 parts)",
            file=file,
            path="training.precision",
            hint=f"use {gpu.half_dtype} on this GPU, or give its profile a peak_tflops.fp8 figure",
        )
    check_pricing(price, tier, gpu, c.gpus_per_node, file)
    check_offload(par, model, gpu, file)
    name = sc.name or (Path(file).stem if file else "scenario")
    check_stack(par, software, model, tr.global_batch // (dp * tr.micro_batch), file)
    if gpu.sm_count is not None and software.comm_sms.value >= gpu.sm_count.value:
        raise UserError(
            f"software.comm_sms {software.comm_sms.value:g} is every SM '{gpu.name}' has or "
            f"more ({gpu.sm_count.value:g}): a collective holding them leaves compute none",
            file=file,
            path="software.comm_sms",
            hint=f"give fewer than {gpu.sm_count.value:g} (NCCL holds one SM per channel, "
            "typically 8-32)",
        )
    once = gathers_once(par, software)
    par = par.model_copy(update={"overlap": _stack_overlap(par.overlap, software, once)})
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


def _stack_overlap(written: Overlap, stack: SoftwareProfile, gathers_once: bool) -> Overlap:
    """The software stack's overlap behaviour, with what the scenario sets explicitly on top.
    A stack that gathers once under pipeline parallelism (``pp_gathers_once``) reduces the
    gradients after the stage's last backward, with no backward left to hide them behind."""
    base = {name: on(getattr(stack.overlap, name)) for name in Overlap.model_fields}
    if gathers_once:
        base["dp_grad"] = False
    base.update({name: getattr(written, name) for name in written.model_fields_set})
    return Overlap(**base)


def load_scenario(path: str | Path, sets: list[str] | None = None) -> ResolvedScenario:
    """Read, override, validate and resolve a scenario file."""
    p = Path(path)
    file = str(path)
    raw = read_yaml(p)
    refuse_other_files(raw, file)
    data = apply_sets(raw, sets or [], file)
    try:
        rs = resolve(parse_scenario(data, file), file, data)
    except UserError as exc:
        raise blame_set(exc, sets or []) from None
    dropped = replaced_fields(raw, sets or []) if isinstance(raw, dict) else []
    return rs.model_copy(update={"override_notes": dropped}) if dropped else rs


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
