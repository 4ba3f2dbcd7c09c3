"""Shared helpers: inline hardware profiles (so the maths tests do not depend on the catalogue),
scenario builders, and a runner for the real `clustersim` command line."""

from __future__ import annotations

import copy
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from simulator.config.loading import resolve_dict
from simulator.config.scenario import ResolvedScenario

REPO = Path(__file__).resolve().parent.parent

SRC = "test fixture (not a real datasheet)"


def fig(value: float) -> dict[str, Any]:
    return {"value": value, "source": SRC}


# Complete profiles, given inline (no `profile:` key), loosely modelled on an 80 GB H100 node.
GPU_80GB: dict[str, Any] = {
    "name": "test-gpu-80gb",
    "display_name": "Test GPU 80GB",
    "vendor": "nvidia",
    "memory_gb": fig(80),
    "memory_bandwidth_gbps": fig(3350),
    "nvlink_gbps": fig(450),
    "tdp_w": fig(700),
    "peak_tflops": {"bf16": fig(989.4), "fp16": fig(989.4), "fp8": fig(1978.9)},
    "efficiency": {
        "matmul_max": fig(0.75),
        "matmul_half_flops": fig(2.0e10),
        "attention_max": fig(0.55),
        "memory_bandwidth": fig(0.85),
        "kernel_launch_us": fig(4),
    },
}

FABRIC: dict[str, Any] = {
    "name": "test-fabric",
    "display_name": "Test NVSwitch fabric",
    "technology": "nvswitch",
    "bandwidth_gbps": fig(450),
    "latency_us": fig(3),
    "achievable_fraction": fig(0.8),
    "max_gpus": 64,
}

NETWORK: dict[str, Any] = {
    "name": "test-net",
    "display_name": "Test 400G InfiniBand",
    "technology": "infiniband",
    "port_gbps": fig(400),
    "latency_us": fig(5),
    "achievable_fraction": fig(0.8),
    "tail_latency": {"sigma": fig(0.1)},
}

STORAGE: dict[str, Any] = {
    "name": "test-storage",
    "display_name": "Test parallel FS",
    "technology": "parallel_fs",
    "read_gbps_per_client": fig(10),
    "write_gbps_per_client": fig(5),
    "latency_ms": fig(1),
}


def inline_scenario(
    model: Any = "llama3-8b",
    *,
    gpus_per_node: int = 8,
    nodes: int = 1,
    seq_len: int = 2048,
    global_batch: int | None = None,
    micro_batch: int = 1,
    precision: str = "bf16",
    flash_attention: bool = True,
    gpu_memory_gb: float | None = None,
    grad_reduce_dtype: str | None = None,
    **parallelism: Any,
) -> dict[str, Any]:
    """A scenario dict that uses only inline profiles."""
    gpu = copy.deepcopy(GPU_80GB)
    if gpu_memory_gb is not None:
        gpu["memory_gb"] = fig(gpu_memory_gb)
    cluster: dict[str, Any] = {
        "gpu": gpu,
        "gpus_per_node": gpus_per_node,
        "nodes": nodes,
        "fabric": copy.deepcopy(FABRIC),
        "storage": copy.deepcopy(STORAGE),
    }
    if nodes > 1:
        cluster["network"] = {"profile": copy.deepcopy(NETWORK), "nics_per_node": 8}
    gpus = gpus_per_node * nodes
    training: dict[str, Any] = {
        "seq_len": seq_len,
        "global_batch": global_batch if global_batch is not None else 8 * gpus,
        "micro_batch": micro_batch,
        "precision": precision,
        "flash_attention": flash_attention,
    }
    if grad_reduce_dtype is not None:
        training["grad_reduce_dtype"] = grad_reduce_dtype
    return {
        "name": "inline-test",
        "cluster": cluster,
        "model": model,
        "training": training,
        "parallelism": parallelism,
    }


def resolve_inline(model: Any = "llama3-8b", **kw: Any) -> ResolvedScenario:
    return resolve_dict(inline_scenario(model, **kw))


# Scenario that uses catalogue profiles by name (needs hardware_profiles/ to be populated).
CATALOG_SCENARIO: dict[str, Any] = {
    "name": "catalog-test",
    "cluster": {
        "gpu": "h100-sxm-80gb",
        "gpus_per_node": 8,
        "nodes": 1,
        "fabric": "nvlink4-nvswitch",
        "storage": "local-nvme",
    },
    "model": "llama3-8b",
    "training": {"seq_len": 4096, "global_batch": 64, "micro_batch": 1},
    "parallelism": {"tp": 2, "sharding": {"kind": "zero", "stage": 1}},
}


def write_yaml(path: Path, data: Any) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str, cwd: Path | None = None) -> CliResult:
    """Run the command line in this process through `main()`, the console-script entry point
    (which maps UserError to exit 2), capturing stdout/stderr and the exit status. An uncaught
    exception becomes exit 1 with its traceback on stderr, as it would in a real process."""
    import contextlib
    import io
    import os
    import traceback

    from simulator import cli

    out, err = io.StringIO(), io.StringIO()
    old_argv, old_cwd = sys.argv, os.getcwd()
    old_width = cli.out._width  # wide tables, as COLUMNS=200 gives a process
    code = 0
    try:
        sys.argv = ["clustersim", *args]
        cli.out.width = 200
        os.chdir(cwd or REPO)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli.main()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except Exception:  # report it as an interpreter would
                traceback.print_exc()
                code = 1
    finally:
        sys.argv = old_argv
        cli.out._width = old_width
        os.chdir(old_cwd)
    return CliResult(code, out.getvalue(), err.getvalue())


def run_cli_process(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 60
) -> CliResult:
    """Run the real console script in a fresh interpreter (`python -m simulator.cli`)."""
    import os

    base = dict(os.environ)
    base.pop("CLUSTERSIM_PROFILE_PATH", None)
    proc = subprocess.run(
        [sys.executable, "-m", "simulator.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd or REPO,
        timeout=timeout,
        env={**base, "COLUMNS": "200", **(env or {})},
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def cli():
    """The real console script in a fresh process: ``cli(*args, cwd=..., timeout=..., env=...)``."""
    return run_cli_process


def h100_probe_two_ranks() -> dict[str, Any]:
    """The bundled one-GPU H100 probe, given the two-process intra-node all-reduce a
    calibration needs (alpha 100 µs, 1 GB/s)."""
    import json

    probe = json.loads((REPO / "benchmarks/results/probe-h100-2026-11-23.json").read_text())
    probe.update(world_size=2, procs_per_node=2)
    probe["collectives"] = collective_rows("all_reduce", "intra", lambda b: 1e-4 + b / 1e9)
    return probe


def collective_rows(op: str, group: str, time_s: Any) -> list[dict[str, Any]]:
    """A probe's timings of ``op`` over a two-rank ``group`` at 1 KiB to 16 MiB (every fourth
    power of two), each taking ``time_s(bytes)`` seconds."""
    return [
        {"op": op, "group": group, "group_size": 2, "bytes": b, "time_s": time_s(b)}
        for b in (2**k for k in range(10, 25, 2))
    ]


def load_benchmark(name: str) -> Any:
    """A script of ``benchmarks/`` imported as a module (``accuracy`` for the scoreboard)."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
