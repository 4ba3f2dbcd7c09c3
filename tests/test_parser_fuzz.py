"""Fuzzing the scenario parser: whatever a user writes, resolution either succeeds or raises
:class:`~simulator.errors.UserError` (one message, exit 2); never another exception."""

from __future__ import annotations

import copy
import math
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import inline_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.config.loading import read_yaml, resolve_dict
from simulator.errors import UserError

# CLUSTERSIM_FUZZ_EXAMPLES=5000 for a deeper run; 200 keeps the suite fast.
EXAMPLES = int(os.environ.get("CLUSTERSIM_FUZZ_EXAMPLES", "200"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _base_scenarios() -> list[dict[str, Any]]:
    inline = inline_scenario(
        "llama3-8b",
        nodes=2,
        tp=2,
        pp=2,
        sequence_parallel=True,
        sharding={"kind": "zero", "stage": 1},
        recompute="selective",
        pp_schedule={"kind": "interleaved", "virtual_stages": 2},
    )
    inline["training"]["optimizer"] = {"kind": "adamw", "master_weights_fp32": True}
    inline["cluster"]["network"]["topology"] = {"kind": "fat_tree", "oversubscription": 2.0}
    inline["run"] = {"tokens": 1e9, "scaling_reference": {"nodes": 1}}
    gpt = inline_scenario(
        {"preset": "megatron-1.7b", "layers": 24},
        gpus_per_node=8,
        tp=2,
        flash_attention=False,
        sharding={"kind": "fsdp", "strategy": "hybrid_shard", "shard_group": 2},
    )
    inline_model = inline_scenario(
        {
            "name": "tiny",
            "layers": 4,
            "hidden": 256,
            "heads": 8,
            "kv_heads": 2,
            "vocab": 1000,
            "mlp": "gelu",
            "position": "learned",
        },
        gpus_per_node=4,
        pp=2,
        stage_layers=[1, 3],
    )
    # Catalogue names (profile lookup, overrides merged into a catalogue profile).
    catalog = {
        "cluster": {
            "gpu": {"profile": "h100-sxm-80gb", "memory_gb": 40},
            "gpus_per_node": 8,
            "nodes": 2,
            "fabric": "nvlink4-nvswitch",
            "network": {
                "profile": "ib-ndr-400",
                "nics_per_node": 8,
                "topology": {"kind": "rail_optimized"},
            },
            "storage": "lustre",
            "pricing": {"profile": "aws-p5-h100", "tier": "spot"},
        },
        "model": "llama3-8b",
        "training": {"seq_len": 4096, "global_batch": 64, "micro_batch": 2},
        "parallelism": {"tp": 4, "dp": "auto"},
    }
    bases = [inline, gpt, inline_model, catalog]
    for b in bases:
        resolve_dict(b)  # each base is valid
    return bases


BASES = _base_scenarios()


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path in a nested dict/list (including the root)."""
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


def _get(node: Any, path: tuple[Any, ...]) -> Any:
    for k in path:
        node = node[k]
    return node


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=-3, max_value=130),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(
        [
            "auto",
            "h100-sxm-80gb",
            "a100-sxm4-80gb",
            "llama3-70b",
            "gpt3-175b",
            "zero",
            "fsdp",
            "interleaved",
            "gpipe",
            "1f1b",
            "full",
            "selective",
            "bf16",
            "fp8",
            "fp4",
            "profile",
            "preset",
            "kind",
            "value",
            "",
            "-1",
            "1e400",
            "nan",
            ".inf",
            "0",
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.one_of(
                st.text(max_size=10),
                st.sampled_from(
                    ["kind", "profile", "preset", "value", "source", "stage", "layers", "tp"]
                ),
            ),
            children,
            max_size=4,
        ),
    ),
    max_leaves=8,
)
keys = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        [
            "kind",
            "profile",
            "preset",
            "tp",
            "pp",
            "dp",
            "cp",
            "value",
            "source",
            "tensor_parallel",
            "stage_layers",
            "network",
            "pricing",
        ]
    ),
    st.integers(-2, 5),
)


def _floats(node: Any) -> list[float]:
    if isinstance(node, float):
        return [node]
    if isinstance(node, dict):
        return [x for v in node.values() for x in _floats(v)]
    if isinstance(node, list | tuple):
        return [x for v in node for x in _floats(v)]
    return []


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    data = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(data)
        path = draw(st.sampled_from(paths))
        op = draw(st.sampled_from(["delete", "replace", "add", "replace", "nudge"]))
        if not path:
            if op == "add":
                data[draw(keys)] = draw(values)
            continue
        parent = _get(data, path[:-1])
        key = path[-1]
        if op == "delete":
            if isinstance(parent, dict):
                del parent[key]
            elif isinstance(parent, list):
                parent.pop(key)
        elif op == "replace":
            parent[key] = draw(values)
        elif op == "nudge":
            old = parent[key]
            if isinstance(old, bool):
                parent[key] = not old
            elif isinstance(old, int | float):
                parent[key] = draw(st.sampled_from([-old, 0, old * 2, old + 1, old - 1, old / 3]))
            elif isinstance(old, str):
                parent[key] = old + draw(st.sampled_from(["x", "-", "0", " "]))
        else:  # add an unknown (or known) key to the mapping that holds `path`
            target = _get(data, path)
            if isinstance(target, dict):
                target[draw(keys)] = draw(values)
            elif isinstance(target, list):
                target.append(draw(values))
    return data


@FUZZ
@given(mutated())
def test_mutated_scenarios_resolve_or_raise_user_error(data: dict[str, Any]) -> None:
    try:
        rs = resolve_dict(data, file="fuzz.yaml")
    except UserError as err:
        text = err.render()
        assert text.strip()
        assert "Traceback" not in text
        assert len(text) < 2000  # one message, not a dump
        return
    # Whatever resolved is self-consistent, and every figure in it is a finite number.
    assert all(math.isfinite(x) for x in _floats(rs.model_dump(exclude={"raw"})))
    assert rs.dp * rs.tp * rs.pp * rs.cp == rs.gpus
    assert sum(rs.stage_layers()) == rs.model.layers
    assert rs.training.global_batch % (rs.dp * rs.training.micro_batch) == 0


set_paths = st.sampled_from(
    [
        "parallelism.tp",
        "parallelism.pp",
        "parallelism.dp",
        "parallelism.sharding",
        "parallelism.sharding.stage",
        "training.global_batch",
        "training.seq_len",
        "model",
        "model.layers",
        "cluster.gpu",
        "cluster.gpu.memory_gb",
        "cluster.nodes",
        "cluster",
        "run.tokens",
        "parallelism.pp_schedule",
        "cluster.network.topology",
        "x.y.z",
        "",
        "training..seq_len",
        "parallelism.stage_layers",
    ]
)
set_values = st.one_of(
    st.text(max_size=20),
    st.sampled_from(
        [
            "4",
            "-1",
            "auto",
            "{kind: zero, stage: 3}",
            "[1, 2",
            "{",
            "null",
            "~",
            "true",
            "1e9",
            ".nan",
            "[8, 8, 8, 8]",
            "{kind: interleaved}",
            "h100",
        ]
    ),
)


@FUZZ
@given(
    st.sampled_from(BASES), st.lists(st.tuples(set_paths, set_values, st.booleans()), max_size=3)
)
def test_set_expressions_resolve_or_raise_user_error(
    base: dict[str, Any], sets: list[tuple[str, str, bool]]
) -> None:
    exprs = [f"{p}={v}" if eq else f"{p}{v}" for p, v, eq in sets]
    try:
        resolve_dict(base, exprs, file="fuzz.yaml")
    except UserError:
        pass


@settings(max_examples=max(1, EXAMPLES // 2), deadline=None)
@given(
    st.one_of(
        st.text(max_size=200),
        st.builds(
            lambda b: (
                yaml.safe_dump(b, sort_keys=False)
                if not isinstance(b, float) or math.isfinite(b)
                else "x"
            ),
            values,
        ),
        st.sampled_from(
            [
                "a: 2024-13-45\n",
                "a: &a [*a]\n",
                "!!python/object:os.system x\n",
                "a: b: c\n",
                "[",
                "{a: 1",
                "---\n---\n",
                "a: !!binary abc\n",
                "a: 1\na: 2\n",
                "\t- x\n",
                "cluster: &c {gpu: *c}\n",
            ]
        ),
    )
)
def test_yaml_text_reads_or_raises_user_error(tmp_path_factory: Any, text: str) -> None:
    f = Path(tmp_path_factory.mktemp("yaml")) / "s.yaml"
    f.write_text(text)
    try:
        data = read_yaml(f)
    except UserError:
        return
    assert isinstance(data, dict)
    try:
        resolve_dict(data, file=str(f))
    except UserError:
        pass


@pytest.mark.parametrize("raw", [b"\xff\xfe\x00garbage", b"cluster: \x80\x81\n"])
def test_binary_file_is_a_user_error(tmp_path: Path, raw: bytes) -> None:
    f = tmp_path / "binary.yaml"
    f.write_bytes(raw)
    with pytest.raises(UserError) as exc:
        read_yaml(f)
    assert exc.value.file == str(f)


def test_impossible_date_is_a_user_error(tmp_path: Path) -> None:
    f = tmp_path / "date.yaml"
    f.write_text("name: x\nwhen: 2024-13-45\n")
    with pytest.raises(UserError) as exc:
        read_yaml(f)
    assert "month" in exc.value.message


@pytest.mark.parametrize(
    "expr",
    [
        "cluster.gpu.memory_gb=.nan",
        "cluster.gpu.peak_tflops.bf16=.inf",
        "cluster.gpu.efficiency.matmul_max={value: .nan, source: a datasheet}",
        "training.memory_reserve_gb=.inf",
        "parallelism.dp_bucket_mb=.inf",
        "run.tokens=.inf",
    ],
)
def test_non_finite_numbers_are_rejected(expr: str) -> None:
    with pytest.raises(UserError) as exc:
        resolve_dict(BASES[0], [expr], file="s.yaml")
    assert "finite" in exc.value.message
    assert exc.value.path == expr.split("=")[0] + (
        ".value" if expr.startswith("cluster.gpu") else ""
    )
