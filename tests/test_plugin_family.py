"""A model family written outside the package (examples/family/vitbench_pooled.py), registered through
$VITBENCH_PLUGINS, goes through the model table, the override parser, the analytic counts and a real sweep on
both backends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "family"


def _vitbench(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(EXAMPLE), str(REPO), env.get("PYTHONPATH", "")) if p)
    env["VITBENCH_PLUGINS"] = "vitbench_pooled"
    return subprocess.run([sys.executable, "-c", "from vitbench.cli import main; main()", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.timeout(600)
def test_an_outside_family_is_listed_counted_and_swept_on_both_backends(tmp_path):
    r = _vitbench("models", "--family", "pooled_conv", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = {row["name"]: row for row in json.loads(r.stdout)}
    # 3 p^2 D + D + D k + k with p = 4, D = 8, k = 10 (the family's own formula, read back through the table)
    assert rows["Pooled-Conv-8/4"]["params_m"] == round((3 * 16 * 8 + 8 + 8 * 10 + 10) / 1e6, 3)
    assert rows["Pooled-Conv-8/4"]["stride"] == 4

    study = tmp_path / "s.yaml"
    study.write_text("name: s\ndefaults: {device: cpu, threads: 1, batch_size: 2, warmup_steps: 1, min_steps: 2, "
                     "min_seconds: 0.01}\naxes:\n  model: [Pooled-Conv-8/4, 'Pooled-Conv-8/4[width=4]']\n"
                     "  backend: [torch, jax]\n  task: [infer]\n")
    res = tmp_path / "res"
    r = _vitbench("sweep", str(study), "--results", str(res), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    from vitbench.tidy import load

    df = load(res)
    assert set(df["status"]) == {"ok"} and len(df) == 4, df[["model", "backend", "status"]]
    assert set(zip(df["model"], df["backend"])) == {(m, b) for m in ("Pooled-Conv-8/4", "Pooled-Conv-8/4[width=4]")
                                                     for b in ("torch", "jax")}
    assert (df["img_per_s"] > 0).all()
