"""torchtitan's op-level selective recomputation (every second ``mm`` run again) runs under the
same non-reentrant checkpoint as full recomputation, so it early-stops at the same place: the
installed torch is traced with torchtitan's policy, and the simulator must skip what torch
skips (the final residual add, the closing TP all-reduce, and a last matmul the policy would
run again). Without it, selective recomputation under TP without sequence parallelism ran the
closing all-reduce again and was slower than full recomputation (a layout-fuzz finding)."""

from __future__ import annotations

from typing import Any

import pytest
from test_recompute_trace import _backward_kernels

from simulator.config.loading import resolve_dict
from simulator.simulate import simulate
from simulator.workload.model import layer_matmuls, recompute_flops_per_token
from simulator.workload.ops import layer_ops
from simulator.workload.recompute import recomputed_ops, recomputes_collective, skips_last_matmul

torch = pytest.importorskip("torch")

_FORWARD = {"mm", "add", "silu", "gelu", "mul", "bmm", "_safe_softmax", "rsqrt"}


def _recomputed(mlp: str, early_stop: bool) -> list[str]:
    """The kernels torch runs between the loss's backward and the first activation backward
    of one checkpointed bias-free pre-norm block under torchtitan's policy (save every ``mm``
    output but every second one's, and the attention kernel's)."""
    from torch import nn
    from torch.nn import functional as F
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    mm = torch.ops.aten.mm.default
    saved = {mm, torch.ops.aten._scaled_dot_product_flash_attention.default}

    def policy() -> Any:
        counts: dict[str, int] = {}

        def fn(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
            key = "recompute" if ctx.is_recompute else "forward"
            if func == mm:
                counts[key] = counts.get(key, 0) + 1
            keep = func in saved and not (func == mm and counts.get(key, 0) % 2 == 0)
            return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

        return create_selective_checkpoint_contexts(fn)

    class Block(nn.Module):
        def __init__(self, h: int = 32) -> None:
            super().__init__()
            self.wq, self.wk, self.wv, self.wo = (nn.Linear(h, h, bias=False) for _ in range(4))
            self.w1, self.w3 = nn.Linear(h, 4 * h, bias=False), nn.Linear(h, 4 * h, bias=False)
            self.w2 = nn.Linear(4 * h, h, bias=False)
            self.n1, self.n2 = nn.RMSNorm(h), nn.RMSNorm(h)

        def forward(self, x: Any) -> Any:
            y = self.n1(x)
            att = F.scaled_dot_product_attention(self.wq(y), self.wk(y), self.wv(y), is_causal=True)
            x = x + self.wo(att)
            y = self.n2(x)
            h = F.silu(self.w1(y)) * self.w3(y) if mlp == "swiglu" else F.gelu(self.w1(y))
            return x + self.w2(h)

    torch.manual_seed(0)
    block, x = Block(), torch.randn(2, 8, 32, requires_grad=True)
    ops = _backward_kernels(block, x, early_stop, policy)
    return [o for o in ops if o in _FORWARD]


def _skipped(mlp: str) -> list[str]:
    """The kernels early stop spares: the backward with it on is the one with it off less a
    stretch of the recomputation (the common head and tail removed; which of two equal
    kernels is "the" spared one is ambiguous, so compare them as a multiset)."""
    off, on = _recomputed(mlp, early_stop=False), _recomputed(mlp, early_stop=True)
    head = 0
    while head < len(on) and off[head] == on[head]:
        head += 1
    tail = 0
    while tail < len(on) - head and off[-1 - tail] == on[-1 - tail]:
        tail += 1
    assert len(off) - tail - head == len(off) - len(on)
    return off[head : len(off) - tail]


def _scenario(
    mlp: str, tp: int, sp: bool = False, early_stop: bool = True, recompute: str = "selective"
) -> Any:
    software: Any = "torchtitan"
    if not early_stop:
        flag = {"value": False, "source": "test"}
        software = {"profile": "torchtitan", "recompute_early_stop": flag}
    return resolve_dict(
        {
            "name": "t",
            "cluster": {"gpu": "h100-sxm-80gb", "gpus_per_node": 4, "fabric": "pcie5-host"},
            "model": {"layers": 4, "hidden": 3072, "heads": 24, "vocab": 32000, "mlp": mlp},
            "training": {"seq_len": 1024, "global_batch": 4, "micro_batch": 1},
            "parallelism": {"tp": tp, "sequence_parallel": sp, "recompute": recompute},
            "software": software,
        }
    )


def test_torch_stops_the_op_level_policy_early() -> None:
    # GELU: six matmuls, the policy runs the second, fourth and sixth (w2) again; early stop
    # spares w2 and the residual add after it
    assert sorted(_skipped("gelu")) == ["add", "mm"]
    # SwiGLU: w2 is the seventh matmul, saved; early stop spares the residual add
    assert _skipped("swiglu") == ["add"]


@pytest.mark.parametrize("mlp", ["gelu", "swiglu"])
def test_the_model_skips_what_torch_skips(mlp: str) -> None:
    rs = _scenario(mlp, tp=2)
    fwd = layer_ops(rs)
    again = recomputed_ops(rs, fwd)
    assert not any(o.name == "residual_add" and o is fwd[-1] for o in again)
    closing = [o for o in fwd if o.kind == "collective"][-1]
    assert closing.collective == "all_reduce" and not recomputes_collective(rs, closing)
    opening = [o for o in fwd if o.kind == "collective"][0]
    assert recomputes_collective(rs, opening)  # the attention's all-reduce still runs again
    # the hardware FLOPs leave w2 out exactly where torch does not run it again
    assert skips_last_matmul(rs) is (mlp == "gelu")
    m, s = rs.model, rs.training.seq_len
    per_token = recompute_flops_per_token(m, s, "selective", "alternate_matmuls", True)
    full = recompute_flops_per_token(m, s, "selective", "alternate_matmuls", False)
    w2 = 2.0 * m.layers * layer_matmuls(m)[-1][1]
    assert full - per_token == pytest.approx(w2 if mlp == "gelu" else 0.0, abs=0)
    without = _scenario(mlp, tp=2, early_stop=False)
    assert recomputes_collective(without, closing) and not skips_last_matmul(without)


@pytest.mark.parametrize("sp", [False, True])
@pytest.mark.parametrize("mlp", ["gelu", "swiglu"])
def test_selective_never_slower_than_full(mlp: str, sp: bool) -> None:
    """What the op-level policy runs again is a subset of what full recomputation runs again,
    so its step is never longer (TP 4 through PCIe, where each recomputed all-reduce costs;
    without SP it was 15.46 ms against 14.23 ms)."""
    steps = {
        rc: simulate(_scenario(mlp, tp=4, sp=sp, recompute=rc), scaling=False).metrics.step_time_s
        for rc in ("selective", "full")
    }
    assert steps["selective"] <= steps["full"]
