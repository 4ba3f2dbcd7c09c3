"""How a pipeline's transformer layers are spread over its ranks and their model chunks.

A scenario may list them (``parallelism.stage_layers``); otherwise the software stack's rule
applies (``pp_split``): an even split, or a split by estimated compute cost, one function per
rule (``SPLITS``). The embedding always sits on the first rank and the output layer and loss
on the last.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import accumulate

from .parallelism import ParallelismSpec
from .software import SoftwareProfile
from .workload import ModelSpec


def even_split(model: ModelSpec, pp: int) -> list[int]:
    """The same number of layers on every rank (the layout checks require PP to divide them)."""
    return [model.layers // pp] * pp


def _cost_blocks(model: ModelSpec, pp: int) -> tuple[list[int], list[int]]:
    """nanotron's assignment: the decoder layers and all blocks each rank receives."""
    layer = 4 * model.heads * model.head_dim * model.hidden + 3 * model.ffn * model.hidden
    costs = [0] + [layer] * model.layers + [0, model.vocab * model.hidden, 0, 0]
    total = sum(costs)
    layers, blocks = [0] * pp, [0] * pp
    rank = 0
    for i, cum in enumerate(accumulate(costs)):
        layers[rank] += 1 <= i <= model.layers
        blocks[rank] += 1
        # the integer form of cum > total·(rank+1)/pp
        if cum * pp > total * (rank + 1) and rank < pp - 1:
            rank += 1
    return layers, blocks


def cost_thresholds(model: ModelSpec, pp: int) -> list[int]:
    """nanotron's split (``models/base.py`` ``build_model``): blocks in model order (embedding,
    decoder layers, final norm, output layer, fp32 cast, loss), each decoder layer costing
    4·heads·head_dim·hidden + 3·ffn·hidden and the output layer vocab·hidden
    (``get_block_compute_costs``; the rest nothing), go to the current rank, which advances by
    one once the running cost passes (strictly) its share total·(r+1)/pp. The layer that
    crosses a threshold stays on the earlier rank, and ranks after the last layer hold none
    (the output layer goes to the last rank here)."""
    return _cost_blocks(model, pp)[0]


def ranks_without_blocks(model: ModelSpec, pp: int) -> list[int]:
    """The pipeline ranks nanotron's split leaves with no block at all (not even the loss): a
    layout nanotron cannot build (its benchmark sweep skips them)."""
    return [r for r, n in enumerate(_cost_blocks(model, pp)[1]) if n == 0]


SPLITS: dict[str, Callable[[ModelSpec, int], list[int]]] = {
    "even": even_split,
    "cost_thresholds": cost_thresholds,
}


def split_rule(par: ParallelismSpec, software: SoftwareProfile) -> str:
    """The rule that places the layers where the scenario lists none: the stack's, for
    one-chunk schedules (interleaved chunks are split evenly)."""
    rule = software.pp_split.value if software.pp_split is not None else "even"
    return rule if par.virtual_stages == 1 else "even"


def stage_layers(par: ParallelismSpec, model: ModelSpec, software: SoftwareProfile) -> list[int]:
    """Transformer layers held by each pipeline rank (all its virtual chunks together)."""
    v, sl = par.virtual_stages, par.stage_layers
    if sl is not None:
        if len(sl) == par.pp * v and v > 1:
            return [sum(sl[c * par.pp + r] for c in range(v)) for r in range(par.pp)]
        return list(sl)
    return SPLITS[split_rule(par, software)](model, par.pp)


def chunk_layers(
    par: ParallelismSpec, model: ModelSpec, software: SoftwareProfile, stage: int
) -> list[int]:
    """Transformer layers of each of a pipeline rank's model chunks, in chunk order: as listed
    where stage_layers gives every chunk (stage by stage within each round of chunks), else the
    rank's layers split as evenly as they go, the first chunks one more."""
    p, v, sl = par.pp, par.virtual_stages, par.stage_layers
    if sl is not None and len(sl) == p * v:
        return [sl[c * p + stage] for c in range(v)]
    base, extra = divmod(stage_layers(par, model, software)[stage], v)
    return [base + (1 if c < extra else 0) for c in range(v)]
