"""The simulate path imports only what it uses: no scipy (1.3 s to import) unless stragglers are
asked for, and no numpy (0.07 s) unless a pipeline is solved by the max-plus walk, so a cold
`clustersim simulate` starts quickly."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO

PROBE = """
import contextlib, io, sys
sys.argv = ["clustersim", "simulate", "scenarios/llama3-8b-8xh100.yaml", "--format", "json"]
from simulator.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main()
    except SystemExit as exc:
        assert not exc.code, exc.code
heavy = sorted(m for m in ("scipy", "torch", "matplotlib", "ray", "numpy") if m in sys.modules)
print(",".join(heavy))
"""


def test_simulate_imports_no_heavy_library() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "", out.stdout
