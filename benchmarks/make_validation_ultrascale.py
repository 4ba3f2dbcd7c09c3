"""Writes rows of the Hugging Face Ultra-Scale Playbook sweep (nanotron on H100) as scenarios:
the 1B model on one node under ``scenarios/validation/ultrascale-nanotron-1node/``, the 8B
model on two nodes where only the gradient reduction crosses them under
``ultrascale-nanotron-2node/``, and the TP scaling figures under ``ultrascale-nanotron-tp/`` (the
files are committed), from ``published/ultrascale_playbook_rows.csv`` and its source notes
(``published/ultrascale_SOURCE.md``).

Left out: rows the source flags as inconsistent (DP × micro-batch × accumulation is not the
global batch) and failed runs; the other multi-node rows, whose interconnect the source does not
state; and the 2-node TP 8 runs at micro-batch 1 (one of them fixes the nanotron stack's
host_us_per_collective)."""

from __future__ import annotations

import csv

from make_validation import ROOT, write_scenario

US_SRC = (
    "Hugging Face Ultra-Scale Playbook benchmark figure (vinjn/nanotron-ultrascale-playbook "
    "assets/data/benchmarks/benchmarks_interactive.html @e3bcfc5c; transcribed in "
    "scenarios/validation/published/ultrascale_playbook_rows.csv): {model}, {nodes} node, "
    "DP {dp} TP {tp} PP {pp}, micro-batch {mbs} x {ga} accumulation steps, ZeRO {zero}: "
    "{v} tokens/s per GPU ({mfu}% MFU as nanotron counts it)"
)
US_ASSUMES = (
    " (the source states the GPU, not the node); nanotron's bench config"
    " (examples/config_tiny_llama_bench.yaml @67c5ebb6): bf16, fp32 gradient accumulation,"
    " 1F1B, sequence parallelism with TP (tp_mode REDUCE_SCATTER), no recomputation; pipeline"
    " stages split by nanotron's cost rule; the throughput of the third step, as the benchmark"
    " times it"
)
# nanotron scripts/scaling_benchmarks.py @0e0a27ea: (layers, hidden, heads, ffn); the 1B and 3B
# models tie their embeddings (intermediate_size < 10,000), every model runs full multi-head
# attention (NUM_KEY_VALUE_HEADS = None), vocabulary 131,072, sequence 4,096.
MODELS = {
    "1B": (16, 2048, 32, 8192, True),
    "3B": (28, 3072, 32, 8192, True),
    "8B": (32, 4096, 32, 14336, False),
}


def _model(key: str) -> dict[str, object]:
    """The scenario's model section for one of ``MODELS``."""
    layers, hidden, heads, ffn, tied = MODELS[key]
    return {
        "name": f"nanotron-{key.lower()}",
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "ffn_hidden": ffn,
        "vocab": 131072,
        "tied_embeddings": tied,
    }


# 2 nodes: the runs whose only traffic between the nodes is the once-a-step gradient reduction
# (TP within a node, no pipeline), so the unstated interconnect hardly matters (eight 400 Gb/s
# NICs or RoCE: the same within 0.2%; 100 Gb/s: 2%). The TP 8 micro-batch 1 runs are left out:
# one of them fixes the stack's host_us_per_collective.
TWO_NODE_NET = {"profile": "ib-ndr-400", "nics_per_node": 8}


def _two_node(r: dict[str, str]) -> bool:
    return (
        r["model"] == "8B"
        and r["nodes"] == "2"
        and r["pp"] == "1"
        and int(r["tp"]) <= 8
        and not (r["tp"] == "8" and r["mbs"] == "1")
    )


def ultrascale() -> None:
    rows = csv.DictReader((ROOT / "published" / "ultrascale_playbook_rows.csv").open())
    for r in rows:
        if r["model"] not in MODELS or r["tok_s_gpu"] in ("", "nan"):
            continue
        one_node = r["nodes"] == "1" and r["model"] == "1B"
        if not one_node and not _two_node(r):
            continue
        if "INCONSISTENT" in r["note"]:
            continue
        dp, tp, pp, mbs, ga, zero = (
            int(r[k]) for k in ("dp", "tp", "pp", "mbs", "grad_acc", "zero")
        )
        name = f"nanotron-{r['model'].lower()}-dp{dp}-tp{tp}-pp{pp}-mb{mbs}-z{zero}"
        write_scenario(
            ROOT / f"ultrascale-nanotron-{'1' if one_node else '2'}node" / f"{name}.yaml",
            {
                "name": name,
                "cluster": {
                    "gpu": "h100-sxm-80gb",
                    "gpus_per_node": 8,
                    "nodes": int(r["nodes"]),
                    "fabric": "nvlink4-nvswitch",
                    **({} if one_node else {"network": TWO_NODE_NET}),
                },
                "model": _model(r["model"]),
                "training": {
                    "seq_len": 4096,
                    "global_batch": dp * mbs * ga,
                    "micro_batch": mbs,
                    "precision": "bf16",
                },
                "parallelism": {
                    "dp": dp,
                    "tp": tp,
                    "pp": pp,
                    "sequence_parallel": tp > 1,
                    "sharding": {"kind": "zero", "stage": zero},
                },
                "software": "nanotron",
                "reference": {
                    "metric": "tokens_per_s_per_gpu",
                    "value": float(r["tok_s_gpu"]),
                    "source": US_SRC.format(
                        model=r["model"],
                        nodes=r["nodes"],
                        dp=dp,
                        tp=tp,
                        pp=pp,
                        mbs=mbs,
                        ga=ga,
                        zero=zero,
                        v=r["tok_s_gpu"],
                        mfu=r["mfu_pct"],
                    ),
                    "assumes": (
                        "one HGX H100 SXM node"
                        if one_node
                        else "two HGX H100 SXM nodes with eight 400 Gb/s NICs each (AWS p5, "
                        "which the sweep's paths suggest, has 32 x 100 Gb/s EFA)"
                    )
                    + US_ASSUMES,
                },
            },
        )


# The Playbook's TP scaling figures (3B model, sequence 4,096, one node up to TP 8): tokens/s
# per GPU at TP 2, 4 and 8 with the largest micro-batch that fit. With sequence parallelism
# (fragments/tp_sp_scaling.html) nanotron's scripts/scaling_benchmarks.py @0e0a27ea pairs each
# figure with its micro-batch in a comment: "(2, 3), # 363.66 TFLOPs, 14167.25 tok/s/gpu";
# without it (fragments/tp_scaling.html, tp_mode ALL_REDUCE) the figure's labels are the only
# micro-batches given.
TP_FIGURES = {
    True: {2: (3, 14167.25), 4: (9, 13460.16), 8: (18, 10888.53)},
    False: {2: (3, 13923.18), 4: (8, 12420.76), 8: (12, 10903.32)},
}
TP_SRC = (
    "Hugging Face Ultra-Scale Playbook, vinjn/nanotron-ultrascale-playbook "
    "fragments/{file} @e3bcfc5c ('{title}', 3B model): TP {tp}, {v} tokens/s per GPU"
)


def ultrascale_tp() -> None:
    for sp, runs in TP_FIGURES.items():
        for tp, (mbs, value) in runs.items():
            name = f"nanotron-3b-tp{tp}-{'sp' if sp else 'allreduce'}-mb{mbs}"
            software: str | dict = "nanotron"
            if not sp:
                # ALL_REDUCE mode runs the plain column and row linears: synchronous
                # all-reduces, none beside a GEMM (tp_linear_async_communication is set only
                # with REDUCE_SCATTER in scaling_benchmarks.py create_config)
                software = {
                    "profile": "nanotron",
                    "overlap": {
                        "tp_backward": {
                            "value": False,
                            "source": "nanotron scripts/scaling_benchmarks.py @0e0a27ea "
                            "create_config: tp_linear_async_communication = True if tp_mode "
                            "== 'REDUCE_SCATTER' else False",
                        }
                    },
                }
            write_scenario(
                ROOT / "ultrascale-nanotron-tp" / f"{name}.yaml",
                {
                    "name": name,
                    "cluster": {
                        "gpu": "h100-sxm-80gb",
                        "gpus_per_node": tp,
                        "nodes": 1,
                        "fabric": "nvlink4-nvswitch",
                    },
                    "model": _model("3B"),
                    "training": {
                        "seq_len": 4096,
                        "global_batch": mbs,
                        "micro_batch": mbs,
                        "precision": "bf16",
                    },
                    "parallelism": {"dp": 1, "tp": tp, "pp": 1, "sequence_parallel": sp},
                    "software": software,
                    "reference": {
                        "metric": "tokens_per_s_per_gpu",
                        "value": value,
                        "source": TP_SRC.format(
                            file="tp_sp_scaling.html" if sp else "tp_scaling.html",
                            title="Throughput Scaling with TP/SP" if sp else "TP scaling",
                            tp=tp,
                            v=value,
                        ),
                        "assumes": "the TP ranks of one HGX H100 node and no data parallelism "
                        "(the figure varies TP alone); one micro-batch per step (the sweep "
                        "script's batch_accumulation_per_replica 1); sequence 4,096, as "
                        "nanotron's MFU of 363.66 TFLOPs at 14,167 tokens/s works out; "
                        + (
                            "micro-batch from the script's comment (the figure labels 4, 10, 20)"
                            if sp
                            else "micro-batch from the figure's labels"
                        ),
                    },
                },
            )


if __name__ == "__main__":
    ultrascale()
    ultrascale_tp()
