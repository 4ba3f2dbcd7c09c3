"""The simulate path imports only what it uses: no scipy (1.3 s to import), stragglers included,
and no numpy (0.07 s) unless a pipeline is solved by the max-plus walk, so a cold
`clustersim simulate` starts quickly."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO

PROBE = """
import contextlib, io, sys
sys.argv = ["clustersim", "simulate", "scenarios/llama3-8b-8xh100.yaml", "--format", "json"]
sys.argv += EXTRA
from simulator.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main()
    except SystemExit as exc:
        assert not exc.code, exc.code
heavy = sorted(m for m in ("scipy", "torch", "matplotlib", "ray", "numpy") if m in sys.modules)
print(",".join(heavy))
"""


def _heavy_imports(*extra: str) -> str:
    probe = PROBE.replace("EXTRA", repr(list(extra)))
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def test_simulate_imports_no_heavy_library() -> None:
    assert _heavy_imports() == ""


def test_stragglers_need_no_scipy() -> None:
    assert "scipy" not in _heavy_imports("--set", "run.stragglers=expected").split(",")
