"""One operation of a rank's pass: what the engine times (FLOPs, bytes, a GEMM's shape) or,
for a collective, its message and group. The operation lists are built in ``ops`` and
``elementwise``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..config.scenario import ResolvedScenario

OpKind = Literal["gemm", "attention", "memory", "collective"]
CollKind = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "p2p"]


def act_bytes(rs: ResolvedScenario) -> int:
    """Bytes per activation element: 16-bit under bf16, fp16 and fp8 (fp8 GEMM inputs are
    cast), 32-bit under fp32."""
    return 4 if rs.training.precision == "fp32" else 2


@dataclass(frozen=True)
class Op:
    name: str
    kind: OpKind
    flops: float = 0.0
    bytes: float = 0.0
    collective: CollKind | None = None
    group: Literal["tp", "cp", "dp", "pp"] | None = None
    msg_bytes: float = 0.0  # collective: the full buffer S of nccl-tests' definition
    # GEMM: (batch, m, n, k) of the forward product out[m,n] = in[m,k] @ w[k,n]; the backward
    # pass runs the two products dIn = dOut @ w^T and dW = in^T @ dOut.
    dims: tuple[int, int, int, int] | None = None
    backward: bool = False
    # Memory-bound: its backward's traffic where not 2x the forward's. Collective: the
    # message of its mirror in the other pass where it differs (an fp8 all-gather's bf16
    # gradient reduce-scatter), which a backward re-gather of the input moves too.
    backward_bytes: float | None = None
    # A GEMM that fp8 training leaves at the 16-bit tensor rate (attention scores and values,
    # the logits): fp8 recipes cast only the transformer blocks' linear layers.
    wide: bool = False
    # Attention: the keys each query attends over, the length the kernel's efficiency follows.
    kv_len: int = 0
    # Memory-bound: the bytes of the distinct tensors it touches, where it passes over them
    # more than once (0: the bytes it moves); what decides whether it runs in a cache.
    footprint: float = 0.0
    # GEMM: a linear layer's product, whose [k, n] operand is a weight (its gradient in dW):
    # the operand each pass streams afresh (see efficiency.gemm_weight_bandwidth).
    weight: bool = False
    # Backward GEMM: both products (dIn and dW), or only one of them where a stack runs a
    # collective between the two (see workload.tp_backward).
    part: Literal["both", "dgrad", "wgrad"] = "both"
    # Collective: the stack launches it asynchronously beside the GEMM before it (a CP one:
    # beside the attention kernel before it, for ``cover`` of that kernel's time).
    overlapped: bool = False
    cover: float = 1.0
    # Collective: the pass it runs in, where it has no mirror in the other (an all-reduce
    # whose conjugate is the identity: the embedding's forward one, the output layer's backward
    # one without sequence parallelism).
    only: Literal["both", "forward", "backward"] = "both"
