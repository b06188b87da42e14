"""Shared by the `vitbench ab` and `vitbench bisect` tests: a throwaway git repository with the files `ab` needs
(a study file and a lock), and synthetic sweeps in place of real rounds (no measurement)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from test_compare import bench_record, steps, write_jsonl

from vitbench.compare import ab as ab_mod


def git(cwd: Path, *args: str) -> str:
    p = subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True)
    return p.stdout.strip()


def make_repo(tmp_path: Path, commits: Sequence[dict[str, str | None]]) -> Path:
    """A git repository at tmp_path/repo whose every commit has studies/ci.yaml, a lock and vitbench/turns.py (its
    code takes turns: `--schedule turns`); commit i writes the files of `commits[i]` (name -> text; None removes
    the file)."""
    r = tmp_path / "repo"
    (r / "studies").mkdir(parents=True)
    (r / "vitbench").mkdir()
    git(tmp_path, "init", "-q", str(r))
    git(r, "config", "user.email", "t@example.com")
    git(r, "config", "user.name", "t")
    (r / "studies" / "ci.yaml").write_text("name: ci\n")
    (r / "vitbench" / "requirements.lock").write_text("numpy==1\n")
    (r / "vitbench" / "turns.py").write_text("# takes turns (vitbench ab --schedule turns)\n")
    for i, files in enumerate(commits):
        for name, text in files.items():
            if text is None:
                (r / name).unlink(missing_ok=True)
            else:
                (r / name).write_text(text)
        git(r, "add", "-A")
        git(r, "commit", "-qm", f"commit {i}")
    return r


def fake_sweeps(monkeypatch, scale: Callable[[ab_mod.Side], float], noise: float,
                models: Sequence[str] = ("ViT-Nano/4",), others: float = 0.0,
                own: float = ab_mod.DEFAULT_SCHEDULE.own_load) -> list[tuple[str, Path]]:
    """Side.start_round writes a synthetic round (one bench record per model) instead of running a sweep: every
    step `scale(side)` times as long, times the round's own lognormal(0, `noise`) speed (a machine state); each row
    says other processes used the gate's own other side (`own`: one core under `together`) plus `others` cores.
    Returns (side name, side root) of every round, in the order they ran."""
    rng = np.random.default_rng(0)
    rounds: list[tuple[str, Path]] = []

    def start_round(self, out: Path, cpus=None, env=None):
        out.mkdir(parents=True)
        rounds.append((self.name, self.root))
        s = scale(self) * float(rng.lognormal(0, noise))
        recs = [bench_record(m, steps(rng, scale=s), run_id=f"{self.name}{len(rounds)}") for m in models]
        for r in recs:
            r.metrics["other_load_cores"] = own + others
            if self.name == "current":  # the working tree's rows say its commit; a `git archive` side's none
                r.env["git_sha"] = "c" * 40
        write_jsonl(out / "results.jsonl", recs)
        return ab_mod.Running(self, subprocess.Popen(["true"]), out / "log", out, cpus)

    class Meter:  # the gate's own reading of others' load around a pair: `others`, as the rows say
        other_cores = others

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    monkeypatch.setattr(ab_mod.Side, "start_round", start_round)
    monkeypatch.setattr(ab_mod, "TreeMeter", Meter)
    return rounds
