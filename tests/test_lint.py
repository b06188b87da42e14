"""The code passes pyflakes' rules (`ruff check --select F,E9`: undefined names, unused imports and variables,
syntax errors). An unused variable is often a check that stopped being made: runner.py's `rerun` set outlived the
rule that read it for a session, and compare's unpacked interval columns were never read."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_pyflakes_rules_hold():
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "F,E9",
                          "--output-format", "concise", "vitbench", "tests", "benchmarks", "scripts"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
