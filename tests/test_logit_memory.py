"""The loss's logits at the output layer's backward, per software stack.

The last pipeline stage holds, for one micro-batch, what the loss saved for backward and the
gradient it writes, per logit (token x vocabulary entry of the rank's shard): fp32 logits and an
fp32 gradient (8 bytes) where a stack says nothing; Megatron's vocab-parallel cross-entropy
keeps its fp32 softmax and turns it into the gradient in place, plus the 16-bit copy its cast
back returns (6); llm-foundry's fused cross-entropy keeps the 16-bit logits and writes a 16-bit
gradient (4). Every published llm-foundry run fits by this count (four did not at 8 bytes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.config.loading import load_scenario
from simulator.workload.memory import stage_memory

ROOT = Path(__file__).resolve().parents[1]
VALIDATION = ROOT / "scenarios" / "validation"
# MPT-1B, micro-batch 10 of 2,048 tokens, on 32 A100 40GB (FSDP, no recomputation)
ROW = VALIDATION / "llmfoundry-a100-40gb" / "mpt-1b-a100-40gb-s2048-g32-mb10.yaml"
GB = 1e9


def _activations(overrides: list[str]) -> tuple[float, float]:
    rs = load_scenario(ROW, overrides)
    logits = rs.training.micro_batch * rs.training.seq_len * rs.model.vocab / rs.tp
    return stage_memory(rs, rs.pp - 1).activations_gb * GB, logits


@pytest.mark.parametrize("stack, per_logit", [("pytorch-fsdp", 4.0), ("megatron-core", 6.0)])
def test_a_stack_holds_its_own_bytes_per_logit(stack: str, per_logit: float) -> None:
    base, logits = _activations(
        [f"software={{profile: {stack}, logit_bytes: {{value: 8, source: test}}}}"]
    )
    own, _ = _activations([f"software={stack}"])
    assert base - own == pytest.approx(logits * (8.0 - per_logit), rel=1e-9)


def test_a_stack_that_says_nothing_holds_fp32_logits_and_gradient() -> None:
    unset, logits = _activations(["software={profile: pytorch-fsdp, logit_bytes: null}"])
    two, _ = _activations(
        ["software={profile: pytorch-fsdp, logit_bytes: {value: 2, source: test}}"]
    )
    assert unset - two == pytest.approx(logits * 6.0, rel=1e-9)


def test_every_published_llm_foundry_run_fits() -> None:
    rows = sorted(VALIDATION.glob("llmfoundry-*/*.yaml"))
    assert len(rows) > 100
    for path in rows:
        rs = load_scenario(path)
        peak = max(stage_memory(rs, s).total_gb for s in range(rs.pp))
        assert peak <= rs.gpu.capacity_gb, (path.name, peak)


def test_under_fp32_training_the_logits_and_their_gradient_are_fp32() -> None:
    """A stack's ``logit_bytes`` describes 16-bit logits; training in fp32, the loss keeps fp32
    logits and writes an fp32 gradient whatever the stack."""
    own, logits = _activations(["training.precision=fp32", "software=pytorch-fsdp"])
    eight, _ = _activations(
        [
            "training.precision=fp32",
            "software={profile: pytorch-fsdp, logit_bytes: {value: 8, source: test}}",
        ]
    )
    assert own == pytest.approx(eight, rel=1e-12)
