"""Full recomputation against PyTorch's own: the installed torch's non-reentrant checkpoint is
traced op by op during backward, and the simulator's recomputed forward must skip what torch
skips (the block's last matmul and the residual add after it, which save nothing) and keep
what torch keeps (a dropout after that matmul saves its mask, so the matmul runs again)."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.config.loading import resolve_dict
from simulator.workload.model import layer_forward_flops_per_token, recompute_flops_per_token
from simulator.workload.ops import layer_ops
from simulator.workload.recompute import (
    full_recomputed_ops,
    recomputes_collective,
    skips_last_matmul,
)

torch = pytest.importorskip("torch")


def _backward_kernels(fn: Any, x: Any, early_stop: bool, context_fn: Any = None) -> list[str]:
    """Every kernel torch dispatches during the backward of ``fn(x)`` run under non-reentrant
    checkpoint with early stop on or off, in order (the recomputation comes first);
    ``context_fn``: a selective-checkpoint policy's contexts, as ``checkpoint`` takes them."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

    class Log(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
            self.ops.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    with set_checkpoint_early_stop(early_stop):
        extra = {"context_fn": context_fn} if context_fn is not None else {}
        y = checkpoint(fn, x, use_reentrant=False, **extra)
        log = Log()
        with log:
            y.sum().backward()
    return log.ops


def _recomputed_forward_ops(dropout: float, early_stop: bool) -> list[str]:
    """The forward kernels torch runs again during the backward of one checkpointed pre-norm
    GELU block (MPT's), in order."""
    from torch import nn
    from torch.nn import functional as F

    forward_kinds = {"native_layer_norm", "addmm", "gelu", "add", "native_dropout"}
    # (the residual adds of the block are the only ``add`` kernels before its backward)

    class Block(nn.Module):
        def __init__(self, h: int = 32) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
            self.qkv, self.out = nn.Linear(h, 3 * h), nn.Linear(h, h)
            self.up, self.down = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)
            self.drop = nn.Dropout(dropout)

        def forward(self, x: Any) -> Any:
            q, k, v = self.qkv(self.ln1(x)).chunk(3, -1)
            x = x + self.out(F.scaled_dot_product_attention(q, k, v, is_causal=True))
            return x + self.drop(self.down(F.gelu(self.up(self.ln2(x)))))

    torch.manual_seed(0)
    block = Block().train()
    x = torch.randn(2, 8, 32, requires_grad=True)
    ops = _backward_kernels(block, x, early_stop)
    # The recomputation runs before the first backward kernel (the last linear layer's input
    # gradient, an ``mm``: the forward's products are ``addmm``s and the attention's ``bmm``s).
    return [op for op in ops[: ops.index("mm")] if op in forward_kinds]


def _scenario(dropout: bool, early_stop: bool | None, tp: int = 1, precision: str = "bf16") -> Any:
    software: Any = "pytorch-fsdp" if tp == 1 else "megatron-core"
    if early_stop is not None:
        flag = {"value": early_stop, "source": "test"}
        software = {"profile": software, "recompute_early_stop": flag}
    return resolve_dict(
        {
            "name": "t",
            "cluster": {"gpu": "h100-sxm-80gb", "gpus_per_node": 8, "fabric": "nvlink4-nvswitch"},
            "model": {
                "layers": 4,
                "hidden": 1024,
                "heads": 16,
                "vocab": 4096,
                "mlp": "gelu",
                "norm": "layernorm",
                "position": "learned",
                "max_positions": 512,
                "linear_bias": True,
                "dropout": dropout,
            },
            "training": {
                "seq_len": 512,
                "global_batch": 8,
                "micro_batch": 1,
                "precision": precision,
            },
            "parallelism": {"tp": tp, "recompute": "full"},
            "software": software,
        }
    )


def test_torch_recomputation_skips_the_last_matmul_and_add() -> None:
    whole = _recomputed_forward_ops(0.0, early_stop=False)
    early = _recomputed_forward_ops(0.0, early_stop=True)
    # forward of the block: norm, qkv, (attention), out, add, norm, up, gelu, down, add
    assert whole.count("addmm") == 4 and whole[-1] == "add"
    assert early.count("addmm") == 3 and early[-1] == "gelu"
    rs = _scenario(dropout=False, early_stop=True)
    fwd = layer_ops(rs)
    kept = full_recomputed_ops(rs, fwd)
    assert [o.name for o in fwd[len(kept) :]] == ["mlp_down", "residual_add"]
    assert sum(o.kind == "gemm" for o in kept) == sum(o.kind == "gemm" for o in fwd) - 1


def test_a_dropout_after_the_matmul_keeps_it_recomputed() -> None:
    early = _recomputed_forward_ops(0.1, early_stop=True)
    # the dropout's mask is saved, so the last matmul, whose output it masks, runs again
    # (on CPU the mask is a bernoulli draw multiplied in; the residual add still does not run)
    assert early.count("addmm") == 4 and early[-1] in ("addmm", "native_dropout")
    rs = _scenario(dropout=True, early_stop=True)
    fwd = layer_ops(rs)
    kept = full_recomputed_ops(rs, fwd)
    assert any(o.name == "mlp_down" for o in kept)
    assert len(kept) >= len(fwd) - 1  # at most the separate residual add is skipped
    assert not skips_last_matmul(rs)  # so the hardware FLOPs count it too
    assert skips_last_matmul(_scenario(dropout=False, early_stop=True))


def test_without_early_stop_the_whole_forward_runs_again() -> None:
    rs = _scenario(dropout=False, early_stop=False)
    fwd = layer_ops(rs)
    assert full_recomputed_ops(rs, fwd) == fwd
    assert _scenario(dropout=False, early_stop=None, tp=2).recompute_early_stop is False


def test_early_stop_skips_the_closing_tp_collective_and_its_flops() -> None:
    rs = _scenario(dropout=False, early_stop=True, tp=2)
    fwd = layer_ops(rs)
    names = [o.name for o in fwd[len(full_recomputed_ops(rs, fwd)) :]]
    assert names[0] == "mlp_down" and names[-1] == "residual_add"
    closing = [o for o in fwd if o.kind == "collective" and o.name in names]
    assert closing and not any(recomputes_collective(rs, o) for o in closing)
    opening = [o for o in fwd if o.kind == "collective" and o.name not in names]
    assert opening and all(recomputes_collective(rs, o) for o in opening)
    m, s = rs.model, rs.training.seq_len
    saved = m.layers * 2.0 * m.ffn * m.hidden  # mlp_down's forward FLOPs per token
    full = recompute_flops_per_token(m, s, "full")
    assert full == pytest.approx(m.layers * layer_forward_flops_per_token(m, s))
    assert recompute_flops_per_token(m, s, "full", skip_last=True) == pytest.approx(full - saved)


def test_early_stop_makes_a_recomputing_step_faster_not_slower() -> None:
    from simulator.simulate import simulate

    with_stop = simulate(_scenario(dropout=False, early_stop=True), scaling=False)
    without = simulate(_scenario(dropout=False, early_stop=False), scaling=False)
    assert with_stop.metrics.step_time_s < without.metrics.step_time_s
    # the skipped matmul is at most a quarter of a recomputing layer's work (2 of 8 parts)
    assert with_stop.metrics.step_time_s > 0.75 * without.metrics.step_time_s


def _custom_linear_recomputes_its_matmul() -> bool:
    """Whether early stop re-runs a block's last matmul when it is an ``autograd.Function``
    that saves its inputs inside ``forward`` (as TransformerEngine's and torchao's fp8 linear
    layers do): the saved tensors are packed only after the forward has computed."""

    class Lin(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any, w: Any) -> Any:
            ctx.save_for_backward(x, w)
            return x @ w.t()

        @staticmethod
        def backward(ctx: Any, g: Any) -> Any:
            x, w = ctx.saved_tensors
            return g @ w, g.reshape(-1, g.shape[-1]).t() @ x.reshape(-1, x.shape[-1])

    torch.manual_seed(0)
    up, down = torch.randn(128, 32, requires_grad=True), torch.randn(32, 128, requires_grad=True)
    x = torch.randn(2, 8, 32, requires_grad=True)

    def block(x: Any) -> Any:
        return x + Lin.apply(torch.nn.functional.gelu(x @ up.t()), down)

    ops = _backward_kernels(block, x, early_stop=True)
    recompute = ops[: ops.index("gelu_backward")]
    # forward has two matmuls; the backward of the last one runs two more before gelu_backward
    return recompute.count("matmul") + recompute.count("mm") + recompute.count("bmm") >= 4


def test_fp8_linear_layers_run_their_last_matmul_again() -> None:
    assert _custom_linear_recomputes_its_matmul()
    rs = _scenario(dropout=False, early_stop=True, precision="fp8")
    fwd = layer_ops(rs)
    kept = full_recomputed_ops(rs, fwd)
    assert any(o.name == "mlp_down" for o in kept)
    assert [o.name for o in fwd[len(kept) :]] == ["residual_add"]
    assert not skips_last_matmul(rs)
