"""The published sets of ``benchmarks/accuracy.py`` against their bands: each set's mean error
must stay inside its band, so that no later change loses accuracy unnoticed, and no published
run but the known ones may be said not to fit in its GPUs' memory. The mechanisms themselves
are tested against their analytical limits in test_accuracy.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import load_benchmark


def _accuracy() -> Any:
    return load_benchmark("accuracy")


# Mean absolute error each set must stay within: today's figure plus a small margin (the
# issue's targets are tighter; see README "Accuracy"). Tighten these as the model improves.
BANDS = {
    "sc21-1f1b": 0.07,
    "sc21-interleaved": 0.04,
    "sc21-script": 0.04,
    "korthikanti-table5": 0.035,
    "korthikanti-table4": 0.025,
    "llmfoundry-a100-80gb": 0.05,
    "llmfoundry-a100-40gb": 0.10,
    "llmfoundry-h100-80gb": 0.07,  # optimistic (+5.9% mean), see README "Accuracy"
    "llmfoundry-h100-80gb-fp8": 0.08,
    # all twelve NeMo 24.07 rows from 2026-12-06: its 5-22B rows (but GPT-3 20B) run 8-17%
    # slower than the model (Llama 3 8B also than on Megatron-Bridge 25.11)
    "nemo-h100-fp8": 0.07,
    "nemo-b200-fp8": 0.07,
    "nccl-tests": 0.075,  # 6.1% since NCCL's tuner picks across nodes (2026-12-07)
    "nccl-tests-pcie": 0.25,  # one PCIe host: host-staged (SHM) plateau 14.5 GB/s, modelled 18.7
    "h100-eager-layers": 0.06,
    # Held out: never used to set a profile value.
    "megascale-megatron": 0.065,  # fast (-4.9% mean step time) at 1,024 and 8-12k GPUs
    "bloom-176b": 0.25,  # a known miss: the per-micro-batch rate is ~20% optimistic
    "torchtitan-a100": 0.05,  # eager, as its 64-A100 presets ran (compile = false)
    "llama3-405b": 0.17,  # known misses (README "Accuracy"): fast at 8-16k GPUs
    "nemotron-4": 0.15,  # the 15B rows: DP-heavy, few micro-batches, dtype unstated
    "mtnlg-530b": 0.20,
    "nemo-gb200-fp8": 0.05,
    # Held out, gathered by an independent search (2026-11-25) and never fitted to:
    "ibm-fsdp-2024": 0.08,  # FSDP1 (HSDP at 7B) on 128 A100 and 96 H100
    "torchtitan-h100": 0.07,  # known misses: the 405B pipeline rows (interleaved +31%)
    "megatron-readme": 0.04,
    "llama1-65b": 0.05,
    # Held out, 2026-12-06: SC21 Table 2's PTD rows (micro-batch 1, fixed batch, 384-2,240 GPUs)
    "sc21-table2": 0.03,
    # Held out, 2026-12-06: torchtitan on 32-64 H200 (Trainy/WhiteFiber, June 2025), the first
    # H200 rows, float8 tensorwise (with float8 all-gathers): slow by 8.5-9.1% since the
    # backward's fp8 GEMMs promote their sums, as that recipe's do (5.4-6.0% before)
    "torchtitan-h200": 0.10,
    # Held out, 2026-12-06: AMD's Llama 3.1 8B FSDP runs on one MI300X server
    # (rocm/pytorch-training:v25.2), bf16 and fp8 at 4k and 8k tokens, the first AMD rows
    "mi300x-fsdp": 0.06,
    # Held out, 2026-12-06: NVIDIA's DGX Cloud benchmarking recipes (v25.02 on NeMo 24.12; the
    # Nemotron-4 340B table from v24.11) on DGX H100, Llama 3.1 8B-405B, GPT-3 175B, Nemotron-4
    # 15B/340B, bf16 and fp8, smallest and largest GPU count of each table (8-2,304 GPUs)
    "dgxc-h100": 0.045,
    # Held out, 2026-12-07: Megatron-LM 2019 weak scaling on 1-512 V100 (DGX-2H), the first
    # Volta rows: a known miss, 12-42% optimistic (39 TFLOPS on one GPU published, 52
    # modelled) with the 2019 stack's unfused kernels (README "Accuracy")
    "megatron-2019": 0.33,
    # Held out, 2026-12-07: an independent search's 19 rows of 2023-2026 stacks (FlagPerf,
    # Megatron-LLaMA, BigScience tr1-13B, NeMo's long-sequence tables, Megatron-Bridge 26.02):
    # known misses, 25.1% mean (README "Accuracy")
    "heldout-2024": 0.28,
    # Held out, 2026-12-07: a second 4-node 8x H100 InfiniBand nccl-tests curve (Voltage Park,
    # NCCL 2.24.3): 15.7% while the model took its own fastest algorithm, 8.7% with NCCL's
    # tuner's choice and NVLSTree's chunk pipeline; 2 MiB is still 28% fast (both 4-node
    # curves show NCCL's step to NVLSTree there). With a 2-node curve (dstack on Nebius,
    # added after that change, never fitted to): 9.1%
    "nccl-tests-heldout": 0.11,
    # Held out, 2026-12-07: MLPerf Training v3.1 and v4.0 GPT-3 175B, NVIDIA on 512-10,752
    # DGX H100 GPUs (NeMo 23.09/24.04, fp8): within -4.9..+6.2%
    "mlperf-gpt3-h100": 0.05,
    # Held out, 2026-12-07: MLPerf Training v5.0 Llama 3.1 405B, NVIDIA on 512-8,192 H100 and
    # 256 GB200 NVL72 (NeMo 25.01/25.04, fp8, CP 2, 24-288 micro-batches): H100 +2.9..+4.1% at
    # every scale, GB200 -6.9% (-6.8% before the measured Blackwell attention, 2026-12-07)
    "mlperf-llama31-405b": 0.055,
    # Held out, 2026-12-07: one BERT-large layer in eager PyTorch on a V100 SXM2 (spcl/substation,
    # Ivanov et al. 2021): 15% optimistic at both shapes, as the Megatron-LM 2019 rows are
    "v100-eager-layers": 0.17,
    # Held out, 2026-12-07 (an independent search): FlashAttention-2's GPT-3 1.3B/2.7B table on
    # 8 A100 (+4..+5% at 2k tokens, -11% at 8k and without FlashAttention), GLM-130B on 768 A100
    # 40GB (+18%), OLMo-core on H100 (0..+10%), TinyLlama on 16 A100 40GB (+1%)
    "heldout-2023": 0.085,
    # Held out, 2026-12-07: the Ultra-Scale Playbook's single-node nanotron runs (1B, 8 H100,
    # every DP/TP/PP/ZeRO mix it ran): 7.3% mean (7.8% before the host kept its lead across
    # spans); TP 2-8 at micro-batch 1 is host-bound, whose per-call host time comes from one
    # 2-node row outside the set
    "ultrascale-nanotron-1node": 0.09,
    # Held out, 2026-12-07: the Playbook's TP scaling figures (3B, TP 2-8 on one node, with and
    # without sequence parallelism, the largest micro-batch that fit): +0.7..+15.6%, all fast
    "ultrascale-nanotron-tp": 0.11,
    # Held out, 2026-12-07: the Playbook's 8B runs on 2 nodes where only the gradient reduction
    # crosses them (DP 2 x TP 8 at micro-batch 2-8, DP 4 x TP 4 at 1): 2.9% mean, 5.2% max
    # (6.6% and 13% before the host kept its lead across spans)
    "ultrascale-nanotron-2node": 0.05,
}


def test_accuracy_sets_stay_in_their_bands() -> None:
    report = _accuracy().run(list(BANDS))
    for name, band in BANDS.items():
        s = report[name]["summary"]
        assert s["rows"] > 0, name
        assert s["mean_abs"] <= band, f"{name}: mean |error| {s['mean_abs']:.1%} > {band:.0%}"
    # nccl-tests below 1 MiB (64 KiB up): the target is 30%, for every point.
    small = report["nccl-tests"]["summary_small"]
    assert small["rows"] > 0 and small["mean_abs"] <= 0.13, small
    assert small["max_abs"] <= 0.30, small
    # Only the two points whose source's own in-place run contradicts them stay out of the
    # summaries (scenarios/validation/nccl/SOURCES.md); every other published point counts.
    odd = [r["row"] for r in report["nccl-tests"]["rows"] if r["outlier"]]
    assert sorted(odd) == [
        "nccl-allreduce-4x8xh100-ib-ndr-nccltests309 2 MiB",
        "nccl-allreduce-8x8xh100-ib-ndr-nccltests309 8 MiB",
    ]
    # Of the training rows, only llm-foundry's MPT-1B on 32 A100 40GB, which the same table's
    # 64- and 128-GPU runs of the same per-GPU work contradict (reference.contradicted_by).
    odd = [
        r["row"]
        for n, rep in report.items()
        if not n.startswith("nccl")
        for r in rep["rows"]
        if r.get("outlier")
    ]
    assert odd == ["mpt-1b-a100-40gb-s2048-g32-mb10"]
    foundry = report["llmfoundry-a100-40gb"]
    assert foundry["summary"]["rows"] == len(foundry["rows"]) - 1


# Published runs the memory model says do not fit, though each ran (README "Accuracy"): the
# Llama 3 405B rows hold Megatron's interleaved warm-up of 141 one-layer chunks (75 GB) with
# no recomputation, where Meta reports freeing tensors the model cannot name (and shards the
# gradients, which the rows' ZeRO-1 does not). GB200's rows fit since they reduce gradients
# in bf16 as the Megatron-Bridge performance scripts do, and its 70B row (Megatron FSDP, 40
# layers offloaded) gathers its parameters in fp8 as its FP8-CS recipe does (198.2 GB of
# 198.9; 199.9 with 16-bit gathers). (The MPT-1B rows at micro-batch 10
# on 40 GB and 20 on H100 fit once the loss's logits are counted as llm-foundry's fused
# cross-entropy holds them: test_logit_memory.) No other row may join them.
KNOWN_OVER = {
    "llama3-405b-8192xh100",
    "llama3-405b-16384xh100",
}


def test_published_runs_fit_in_their_gpus_memory() -> None:
    acc = _accuracy()
    skip = ("nccl-tests", "nccl-tests-pcie", "h100-eager-layers", "korthikanti-table4")
    sets = [s for s in BANDS if s not in skip]
    over = {r["row"] for rep in acc.run(sets).values() for r in rep["rows"] if acc._over(r)}
    assert over == KNOWN_OVER, (sorted(over - KNOWN_OVER), sorted(KNOWN_OVER - over))


def test_a_curve_reference_cannot_be_marked_contradicted() -> None:
    """A collective benchmark's curve marks its contradicted points in its CSV: a
    ``contradicted_by`` on the whole curve is refused."""
    from pydantic import ValidationError

    from simulator.config.reference import Reference

    with pytest.raises(ValidationError, match="marks its contradicted points"):
        Reference(metric="busbw_gbps", curve="x.csv", source="nccl-tests", contradicted_by="odd")
    ref = Reference(metric="step_time_s", value=1.0, source="paper", contradicted_by="its twin")
    assert ref.contradicted_by == "its twin"
