"""Parameter and FLOP counts of a decoder-only transformer.

FLOPs follow the convention of Narayanan et al. (SC21) and Korthikanti et al. (2022): a multiply-
add is 2 FLOPs, attention scores are counted over the full s×s matrix (no causal halving), the
backward pass costs twice the forward pass, and embeddings cost no FLOPs. For a GPT model this
gives model FLOPs per step 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) and, with full recomputation,
hardware FLOPs 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) (the SC21 formula).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.workload import ModelSpec


@dataclass(frozen=True)
class ParamBreakdown:
    embedding: int
    positions: int
    attention_per_layer: int
    mlp_per_layer: int
    norms_per_layer: int
    final_norm: int
    lm_head: int
    layers: int

    @property
    def per_layer(self) -> int:
        return self.attention_per_layer + self.mlp_per_layer + self.norms_per_layer

    @property
    def total(self) -> int:
        return (
            self.embedding
            + self.positions
            + self.layers * self.per_layer
            + self.final_norm
            + self.lm_head
        )


def param_breakdown(m: ModelSpec, seq_len: int | None = None) -> ParamBreakdown:
    h, kv, f = m.hidden, m.kv_dim, m.ffn
    bias = m.linear_bias
    attn = h * (h + 2 * kv) + h * h + ((h + 2 * kv) + h if bias else 0)
    n_in = 2 if m.mlp == "swiglu" else 1
    mlp = n_in * h * f + f * h + ((n_in * f + h) if bias else 0)
    norm_params = 2 * h if m.norm == "layernorm" else h
    positions = 0
    if m.position == "learned":
        positions = (m.max_positions or seq_len or 2048) * h
    return ParamBreakdown(
        embedding=m.vocab * h,
        positions=positions,
        attention_per_layer=attn,
        mlp_per_layer=mlp,
        norms_per_layer=2 * norm_params,
        final_norm=norm_params,
        lm_head=0 if m.tied_embeddings else m.vocab * h,
        layers=m.layers,
    )


@dataclass(frozen=True)
class ParamTensors:
    """How many parameter tensors the model holds (what a per-tensor optimizer loop visits):
    fused QKV and fused first MLP matrix, as Megatron's and the probe's layers hold them."""

    per_layer: int
    embedding: int  # first stage: word embedding and learned positions
    head: int  # last stage: final norm and an untied output layer


def param_tensors(m: ModelSpec) -> ParamTensors:
    norm = 2 if m.norm == "layernorm" else 1  # weight (and bias)
    linears = 4  # qkv, attention output, MLP in, MLP out
    per_layer = linears * (2 if m.linear_bias else 1) + 2 * norm
    return ParamTensors(
        per_layer=per_layer,
        embedding=1 + (1 if m.position == "learned" else 0),
        head=norm + (0 if m.tied_embeddings else 1),
    )


def param_count(m: ModelSpec, seq_len: int | None = None) -> int:
    return param_breakdown(m, seq_len).total


def layer_matmul_params(m: ModelSpec) -> int:
    """Weights of one layer that take part in GEMMs (2 FLOPs per weight per token)."""
    h, kv, f = m.hidden, m.kv_dim, m.ffn
    n_in = 2 if m.mlp == "swiglu" else 1
    return h * (h + 2 * kv) + h * h + n_in * h * f + f * h


def layer_matmuls(m: ModelSpec) -> list[tuple[str, int]]:
    """A layer's weight matmuls in the order its forward runs them, unfused (as an eager
    PyTorch block calls them): name and weights (input width × output width)."""
    h, kv, f = m.hidden, m.kv_dim, m.ffn
    mlp_in = [("w1", h * f), ("w3", h * f)] if m.mlp == "swiglu" else [("w1", h * f)]
    return [("wq", h * h), ("wk", h * kv), ("wv", h * kv), ("wo", h * h), *mlp_in, ("w2", f * h)]


def alternate_recomputed(m: ModelSpec) -> set[str]:
    """The layer matmuls torchtitan's op-level selective checkpointing runs again: every
    second ``aten.mm`` it counts. A biased linear layer dispatches ``aten.addmm``, which the
    policy neither counts nor saves, so with biases every matmul runs again."""
    names = [n for n, _w in layer_matmuls(m)]
    if m.linear_bias:
        return set(names)
    return {n for i, n in enumerate(names, start=1) if i % 2 == 0}


def attention_core_flops_per_token(m: ModelSpec, seq_len: int) -> float:
    """QK^T and attention·V for one token of one layer, forward: 2·s·h each."""
    return 4.0 * seq_len * m.heads * m.head_dim


def layer_forward_flops_per_token(m: ModelSpec, seq_len: int) -> float:
    return 2.0 * layer_matmul_params(m) + attention_core_flops_per_token(m, seq_len)


def logits_forward_flops_per_token(m: ModelSpec) -> float:
    return 2.0 * m.hidden * m.vocab


def forward_flops_per_token(m: ModelSpec, seq_len: int) -> float:
    return m.layers * layer_forward_flops_per_token(m, seq_len) + logits_forward_flops_per_token(m)


def model_flops_per_token(m: ModelSpec, seq_len: int) -> float:
    """Training FLOPs per token without recomputation (forward + backward = 3 × forward)."""
    return 3.0 * forward_flops_per_token(m, seq_len)


def recompute_flops_per_token(
    m: ModelSpec,
    seq_len: int,
    recompute: str,
    selective: str = "attention_core",
    skip_last: bool = False,
) -> float:
    """Extra forward FLOPs per token spent re-computing activations in the backward pass.
    ``selective`` is what selective recomputation runs again: the attention core
    (Korthikanti et al.) or every second matmul (torchtitan's op-level policy).
    ``skip_last``: recomputation stops before the layer's last matmul (``w2``), which then
    does not run again (``recompute.skips_last_matmul``)."""
    if recompute == "full":
        last = 2.0 * layer_matmuls(m)[-1][1] if skip_last else 0.0
        return m.layers * (layer_forward_flops_per_token(m, seq_len) - last)
    if recompute == "selective":
        if selective == "alternate_matmuls":
            redo = alternate_recomputed(m)
            if skip_last:
                redo.discard(layer_matmuls(m)[-1][0])
            again = sum(w for n, w in layer_matmuls(m) if n in redo)
            return m.layers * 2.0 * again
        return m.layers * attention_core_flops_per_token(m, seq_len)
    return 0.0


def hardware_flops_per_token(
    m: ModelSpec,
    seq_len: int,
    recompute: str,
    selective: str = "attention_core",
    skip_last: bool = False,
) -> float:
    return model_flops_per_token(m, seq_len) + recompute_flops_per_token(
        m, seq_len, recompute, selective, skip_last
    )


def megatron_sc21_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """The SC21 paper's FLOPs per iteration (with full recomputation), for comparison."""
    return (
        96.0
        * batch
        * seq
        * layers
        * hidden**2
        * (1 + seq / (6.0 * hidden) + vocab / (16.0 * layers * hidden))
    )
