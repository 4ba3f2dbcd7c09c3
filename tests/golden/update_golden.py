"""Regenerate tests/golden/bundled_scenarios.json: every bundled scenario's headline figures,
which tests/test_golden.py holds the simulator to. Run it after a change that is meant to move
them, and say in the commit which figures moved and why:

    python tests/golden/update_golden.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

GOLDEN = Path(__file__).with_name("bundled_scenarios.json")
FIGURES = (
    "step_time_s",
    "tokens_per_s",
    "mfu",
    "hardware_tflops_per_gpu",
    "scaling_efficiency",
    "time_to_train_days",
)


def figures(path: Path) -> dict[str, Any]:
    from simulator.config.loading import load_scenario
    from simulator.simulate import simulate

    d = simulate(load_scenario(path)).as_dict()
    out: dict[str, Any] = {k: d[k] for k in FIGURES}
    out["memory_gb_per_gpu"] = d["memory_gb_per_gpu"]
    out["fits"] = d["fits"]
    out["breakdown_s"] = {k: v for k, v in sorted(d["breakdown_s"].items()) if v}
    cost = d.get("cost") or {}
    out["usd_per_million_tokens"] = cost.get("usd_per_million_tokens")
    return out


def main() -> None:
    from simulator.catalog import bundled_scenarios

    data = {p.stem: figures(p) for p in bundled_scenarios()}
    GOLDEN.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN} ({len(data)} scenarios)")


if __name__ == "__main__":
    main()
