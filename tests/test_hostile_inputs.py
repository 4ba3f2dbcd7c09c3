"""Hostile input through the real command-line entry point.

A seeded generator makes at least 1,000 scenarios that are each wrong in one known way (wrong
type, out of range, missing, unknown, a layout that does not divide, a YAML trick, a hostile
profile name, oversized text) from the bundled scenarios. Each goes through
``simulator.cli.main`` (``check`` or ``simulate``) and must give exit code 2, one message on
stderr naming the file, nothing on stdout, no traceback, within 5 s; the whole run stays within
a bounded amount of memory. Hostile but *valid* names must print as written.
"""

from __future__ import annotations

import contextlib
import functools
import io
import random
import resource
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO

from simulator import cli

CASES = 1000
BASES = ["llama3-8b-8xh100", "llama3-70b-64xh100", "dp-over-pcie", "net-ib-ndr-256xh100"]

INT_FIELDS = [
    ("cluster", "nodes"),
    ("cluster", "gpus_per_node"),
    ("training", "seq_len"),
    ("training", "global_batch"),
    ("training", "micro_batch"),
    ("parallelism", "tp"),
    ("parallelism", "pp"),
    ("parallelism", "cp"),
]
FLOAT_FIELDS = [
    ("parallelism", "dp_bucket_mb"),
    ("training", "memory_reserve_gb"),
    ("run", "tokens"),
]
WRONG_TYPES: list[Any] = ["abc", [1, 2], {"a": 1}, True, "", "8 GPUs"]
OUT_OF_RANGE_INT: list[Any] = [0, -1, -(2**40), 10**32, 2**64, 1.5, 1e300]
OUT_OF_RANGE_FLOAT: list[Any] = [-1.0, 1e300, float("inf"), float("nan"), -1e-300]
BAD_FIGURES = [
    ("gpu", "h100-sxm-80gb", {"efficiency": {"matmul_max": 0}}),
    ("gpu", "h100-sxm-80gb", {"efficiency": {"matmul_max": 1.5}}),
    ("gpu", "h100-sxm-80gb", {"efficiency": {"in_step_factor": -1}}),
    ("gpu", "h100-sxm-80gb", {"memory_bandwidth_gbps": 0}),
    ("gpu", "h100-sxm-80gb", {"memory_gb": 1e300}),
    ("gpu", "h100-sxm-80gb", {"peak_tflops": {"bf16": 0}}),
    ("gpu", "h100-sxm-80gb", {"efficiency": {"kernel_launch_us": -5}}),
    ("storage", "lustre", {"read_gbps_per_client": 0}),
    ("storage", "lustre", {"latency_ms": -1}),
    ("fabric", "nvlink4-nvswitch", {"bandwidth_gbps": 1e-300}),
    ("fabric", "nvlink4-nvswitch", {"achievable_fraction": 0}),
]
HOSTILE_NAMES = [
    "../../etc/passwd",
    "[/]",
    "[red]x[/red]",
    "\x1b[31mred",
    "h100\x00",
    "a" * 300,
    "h100-sxm-80gb ",
    "${HOME}",
]
ALIAS_BOMB = "l1: &l1 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(2, 10)
)
YAML_TRICKS = [
    "a: &a [*a]\n",
    "!!python/object/apply:os.system ['echo hi']\n",
    "cluster: {gpu: h100\n",
    "- just\n- a list\n",
    "\t- tab\n",
    "x: !!binary abc\n",
    "a: 2024-13-45\n",
    'name: "\\ud800"\n',
    "[" * 5000 + "]" * 5000 + "\n",
    ALIAS_BOMB,
    "name: " + "x" * 1_100_000 + "\n",
]


def _bases() -> list[dict[str, Any]]:
    return [yaml.safe_load((REPO / "scenarios" / f"{b}.yaml").read_text()) for b in BASES]


def _set(data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = data
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[path[-1]] = value


def _mappings(node: Any, out: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        out.append(node)
        for v in node.values():
            _mappings(v, out)
    return out


@functools.lru_cache(maxsize=2)
def generate(n: int, seed: int = 12) -> list[tuple[str, str]]:
    """``n`` (kind, YAML text) pairs, each invalid in the way its kind says."""
    rnd = random.Random(seed)
    bases = _bases()
    cases: list[tuple[str, str]] = []
    kinds = [
        "wrong_type",
        "int_range",
        "float_range",
        "figure",
        "missing",
        "unknown",
        "layout",
        "profile_name",
        "yaml",
        "long_text",
    ]
    while len(cases) < n:
        kind = kinds[len(cases) % len(kinds)]
        data = yaml.safe_load(yaml.safe_dump(rnd.choice(bases)))
        if kind == "wrong_type":
            path = rnd.choice(INT_FIELDS + FLOAT_FIELDS)
            _set(data, path, rnd.choice(WRONG_TYPES))
        elif kind == "int_range":
            _set(data, rnd.choice(INT_FIELDS), rnd.choice(OUT_OF_RANGE_INT))
        elif kind == "float_range":
            _set(data, rnd.choice(FLOAT_FIELDS), rnd.choice(OUT_OF_RANGE_FLOAT))
        elif kind == "figure":
            what, name, over = rnd.choice(BAD_FIGURES)
            key = {"gpu": "gpu", "storage": "storage", "fabric": "fabric"}[what]
            data["cluster"][key] = {"profile": name, **over}
            if what == "gpu":
                data["cluster"].pop("pricing", None)
        elif kind == "missing":
            path = rnd.choice(
                [("cluster",), ("model",), ("training",), ("training", "seq_len")]
                + [("training", "global_batch"), ("cluster", "gpu"), ("cluster", "fabric")]
            )
            node = data
            for key in path[:-1]:
                node = node[key]
            node.pop(path[-1], None)
        elif kind == "unknown":
            target = rnd.choice(_mappings(data, []))
            target[rnd.choice(["tensor_parallel", "nodez", "gpu_count", "zzz", "Seq_Len"])] = 1
        elif kind == "layout":
            _set(
                data,
                *rnd.choice(
                    [
                        (("parallelism", "tp"), 3),
                        (("parallelism", "tp"), 7),
                        (("parallelism", "pp"), 7),
                        (("parallelism", "cp"), 5),
                        (("parallelism", "dp"), 3),
                        (("training", "global_batch"), 1009),
                        (("cluster", "gpus_per_node"), 1000),
                    ]
                ),
            )
            if data["parallelism"].get("dp") == "auto" and data["parallelism"].get("tp") == 1:
                data["parallelism"]["tp"] = 3  # a 1-GPU-divisor layout must still fail
        elif kind == "profile_name":
            slot = rnd.choice(["gpu", "fabric", "storage"])
            data["cluster"][slot] = rnd.choice(HOSTILE_NAMES)
        elif kind == "yaml":
            cases.append((kind, rnd.choice(YAML_TRICKS)))
            continue
        elif kind == "long_text":
            _set(data, ("name",), "n" * rnd.choice([201, 5000, 200_000]))
        cases.append((kind, yaml.safe_dump(data, allow_unicode=True)))
    return cases


def run_cli(*argv: str) -> tuple[int, str, str]:
    """``clustersim argv...`` in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    old = sys.argv
    sys.argv = ["clustersim", *argv]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            cli.main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = old
    return code, out.getvalue(), err.getvalue()


def test_generator_covers_every_kind() -> None:
    cases = generate(CASES)
    assert len(cases) >= 1000
    assert len({k for k, _ in cases}) == 10


def test_a_thousand_bad_scenarios_each_exit_2_with_one_message(tmp_path: Path) -> None:
    cases = generate(CASES)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    slowest = 0.0
    for i, (kind, text) in enumerate(cases):
        f = tmp_path / f"case{i}.yaml"
        f.write_text(text, encoding="utf-8", errors="surrogatepass")
        cmd = "check" if i % 2 else "simulate"
        t0 = time.perf_counter()
        code, out, err = run_cli(cmd, str(f))
        took = time.perf_counter() - t0
        slowest = max(slowest, took)
        where = f"case {i} ({kind}, {cmd}): {err or out}"
        assert code == 2, where
        assert out == "", where
        assert "Traceback" not in err, where
        assert err.startswith("error: ") and err.count("error:") == 1, where
        assert str(f) in err.splitlines()[0], where
        assert len(err) < 2000, where
        assert took < 5.0, where
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert grown_mb < 500, f"peak memory grew by {grown_mb:.0f} MB"


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("[/]", "[/]"),
        ("[red]x[/red]", "[red]x[/red]"),
        ("[link=https://example.com]y[/link]", "[link=https://example.com]y[/link]"),
        ("\x1b[31mred\x1b[0m", "[31mred[0m"),
        ('a,b"c', 'a,b"c'),
    ],
)
def test_hostile_but_valid_names_print_as_written(tmp_path: Path, name: str, shown: str) -> None:
    data = _bases()[0]
    data["name"] = name
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(data, allow_unicode=True))
    code, out, err = run_cli("simulate", str(f), "--no-scaling")
    assert code == 0, err
    assert shown in out and "\x1b" not in out
    code, out, err = run_cli("check", str(f), "--format", "csv")
    assert code == 0, err
    import csv

    rows = list(csv.reader(io.StringIO(out)))
    assert rows[1][0] == name  # CSV stays exact
    code, out, err = run_cli("simulate", str(f), "--no-scaling", "--format", "json")
    import json

    assert json.loads(out)["scenario"] == name  # so does JSON


@pytest.mark.parametrize("name", ["a\nb", "a\r\nb", "tail\n", "a\u2028b"])
def test_a_name_with_a_line_break_is_refused(tmp_path: Path, name: str) -> None:
    data = _bases()[0]
    data["name"] = name
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(data, allow_unicode=True))
    code, out, err = run_cli("check", str(f))
    assert code == 2 and "one line" in err and "Traceback" not in err, err


def test_a_path_that_is_not_utf8_is_named_as_it_is() -> None:
    """A byte of a non-UTF-8 file name shows as \\xff: the message never names base.yaml
    (which may exist) for ba\\xffse.yaml."""
    import os

    from simulator.report.text import plain

    name = os.fsdecode(b"ba\xffse.yaml")
    assert plain(name) == "ba\\xffse.yaml"
    assert plain("a\x1b[31mb") == "a[31mb"  # control characters still go
    code, _, err = run_cli("simulate", name)
    assert code == 2 and "ba\\xffse.yaml" in err


def test_a_key_in_two_merged_mappings_is_refused_not_guessed(tmp_path: Path) -> None:
    """``<<: [*long, *batch]`` with micro_batch in both: YAML says the first wins, PyYAML 6
    took the last; refused with both lines, as a key given twice is. A merge without
    overlap, or of one mapping twice, loads as written."""
    from simulator.config.yamlio import YamlDuplicateKey, load_text

    f = tmp_path / "merge.yaml"
    f.write_text(
        "name: merged\n"
        "_long: &long {seq_len: 8192, micro_batch: 4}\n"
        "_batch: &batch {global_batch: 64, micro_batch: 1}\n"
        "cluster: {gpu: h100-sxm-80gb, gpus_per_node: 8, nodes: 1, fabric: nvlink4-nvswitch}\n"
        "model: llama3-8b\n"
        "training: {<<: [*long, *batch]}\n"
    )
    code, _out, err = run_cli("check", str(f))
    assert code == 2 and "Traceback" not in err
    assert "'micro_batch' is given by two of the mappings merged" in err
    assert "lines 2 and 3" in err
    assert load_text("a: &a {x: 1}\nb: &b {y: 2}\nc: {<<: [*a, *b], x: 3}")["c"] == {
        "x": 3,
        "y": 2,
    }
    assert load_text("a: &a {x: 1}\nc: {<<: [*a, *a]}")["c"] == {"x": 1}
    with pytest.raises(YamlDuplicateKey):
        load_text("a: &a {x: 1}\nb: &b {x: 2}\nc: {<<: [*a, *b]}")


def test_signed_fractions_without_a_leading_digit_are_floats() -> None:
    # YAML 1.2's core schema: [-+]? ( . [0-9]+ | ... ): -.5 is a number, as .5 and -0.5 are
    from simulator.config.yamlio import load_text

    assert load_text("a: -.5\nb: +.5e2\nc: .5") == {"a": -0.5, "b": 50.0, "c": 0.5}
    assert load_text("a: -.5", shipped=True) == {"a": -0.5}
