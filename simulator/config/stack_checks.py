"""What a software stack cannot run: the layouts its own code refuses (tied embeddings under a
pipeline, ZeRO stages under one, schedules it lacks, a 1F1B pipeline with too few
micro-batches), each a
:class:`~simulator.errors.UserError` naming the field and what to do instead."""

from __future__ import annotations

from ..errors import UserError
from .layout_checks import sharding_name
from .parallelism import ParallelismSpec
from .software import SoftwareProfile
from .workload import ModelSpec


def check_stack(
    par: ParallelismSpec,
    software: SoftwareProfile,
    model: ModelSpec,
    micro_batches: int,
    file: str | None,
) -> None:
    """What the software stack cannot run (``micro_batches``: per step per pipeline)."""
    tie = software.pp_tied_embeddings
    if par.pp > 1 and model.tied_embeddings and tie is not None and not tie.value:
        raise UserError(
            f"{software.display_name} cannot tie the input and output embeddings under "
            f"pipeline parallelism (PP={par.pp}) ({tie.source})",
            file=file,
            path="model.tied_embeddings",
            hint="set model.tied_embeddings: false, pp: 1, or use another software stack",
        )
    cap = software.pp_max_zero_stage
    if par.pp > 1 and cap is not None and par.zero_stage > cap.value:
        raise UserError(
            f"{software.display_name} cannot run {sharding_name(par)} with pipeline "
            f"parallelism (PP={par.pp}): it allows ZeRO stage {cap.value} at most there "
            f"({cap.source})",
            file=file,
            path="parallelism.sharding",
            hint=f"use sharding: {{kind: zero, stage: {cap.value}}}, pp: 1, or a stack that "
            "shards under pipelines (torchtitan's FSDP)",
        )
    kinds = software.pp_schedules
    kind = par.pp_schedule.kind
    if par.pp > 1 and kinds is not None and kind not in kinds.value:
        raise UserError(
            f"{software.display_name} cannot run the {kind} pipeline schedule: it runs "
            f"{', '.join(kinds.value)} ({kinds.source})",
            file=file,
            path="parallelism.pp_schedule",
            hint=f"use pp_schedule: {{kind: {kinds.value[0]}}}, or another software stack",
        )
    floor = software.pp_1f1b_min_micro_batches
    if par.pp > 1 and kind == "1f1b" and floor is not None:
        need = par.pp - 1 if floor.value == "pp_minus_1" else par.pp
        if micro_batches < need:
            other = kinds is None or "gpipe" in kinds.value
            raise UserError(
                f"the 1F1B engine of {software.display_name} needs at least "
                f"{'PP-1' if floor.value == 'pp_minus_1' else 'PP'} = {need} micro-batches per "
                f"step; this layout gives each pipeline {micro_batches} ({floor.source})",
                file=file,
                path="training.global_batch",
                hint=f"raise global_batch {need / max(micro_batches, 1):g}x or more, or lower "
                "micro_batch" + (", or use pp_schedule: {kind: gpipe}" if other else ""),
            )


__all__ = ["check_stack"]
