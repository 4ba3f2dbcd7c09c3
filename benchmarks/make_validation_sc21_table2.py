"""Writes the held-out ``sc21-table2`` validation set under ``scenarios/validation/`` (run once;
the files are committed): the PTD-parallelism rows of Narayanan et al., SC21, Table 2 (GPT-3
175B on 384-1,536 A100 and the 530B model on 560-2,240 A100, micro-batch 1, fixed global batch).
They were never used to set a profile value. Source and assumptions:
``scenarios/validation/published/sc21_table2_SOURCE.md``.
"""

from __future__ import annotations

import csv
from pathlib import Path

from make_validation import PUB, ROOT, megatron_model, selene_megatron_2021, write_scenario

SRC = (
    "Narayanan et al., SC21 (arXiv 2104.04473), Table 2, PTD parallelism "
    "(scenarios/validation/published/megatron_sc21_table2.csv): {v} TFLOP/s per GPU (hardware "
    "FLOPs, equation (3), full recomputation) on Selene, DGX A100 80GB"
)
ASSUMES = (
    "model-parallel size {mp} as TP 8 x PP {pp}; the interleaved schedule the paper names for its "
    "end-to-end runs (Sec. 5.1) with {v} chunks of {per} layers per stage (the chunking of "
    "NVIDIA/Megatron-LM examples/sc21/run_table_1.sh @79a3bb6b for the nearest Table 1 rows); "
    "Megatron-LM's local DDP and fp16 gradients; eight HDR 200 Gb/s NICs per node, non-blocking "
    "fat tree; Megatron-LM 2021 software stack"
)
# params_billion -> (layers, hidden, heads, PP, layers per virtual stage)
MODELS = {"174.6": (96, 12288, 96, 12, 4), "529.6": (105, 20480, 128, 35, 1)}


def sc21_table2() -> None:
    for r in csv.DictReader((PUB / "megatron_sc21_table2.csv").open()):
        if r["scheme"] != "ptd":
            continue
        layers, hidden, heads, pp, per = MODELS[r["params_billion"]]
        assert int(r["model_parallel_size"]) == 8 * pp, r
        v = layers // pp // per
        gpus = int(r["gpus"])
        name = f"sc21-t2-ptd-{r['params_billion']}b-{gpus}gpu"
        write_scenario(
            ROOT / "sc21-table2" / f"{name}.yaml",
            selene_megatron_2021(
                name,
                gpus,
                megatron_model(f"sc21-{r['params_billion']}b", layers, hidden, heads),
                int(r["global_batch_size"]),
                int(r["micro_batch_size"]),
                {
                    "tp": 8,
                    "pp": pp,
                    "pp_schedule": {"kind": "interleaved", "virtual_stages": v},
                    "recompute": "full",
                },
                r["tflops_per_gpu"],
                SRC.format(v=r["tflops_per_gpu"]),
                ASSUMES.format(mp=r["model_parallel_size"], pp=pp, v=v, per=per),
            ),
        )


if __name__ == "__main__":
    Path(ROOT).mkdir(parents=True, exist_ok=True)
    sc21_table2()
