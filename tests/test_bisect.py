"""vitbench bisect: the search over a throwaway git repository with a fake step (each commit's speed written in
its tree), the real `ab` step over synthetic sweeps (no measurement), bad input, and the command line."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
from ab_fakes import fake_sweeps, git, make_repo
from typer.testing import CliRunner

from vitbench.cli import app
from vitbench.compare import ab as ab_mod
from vitbench.compare import bisection
from vitbench.compare.decide import Decision
from vitbench.compare.paired import Rule
from vitbench.errors import ConfigError

runner = CliRunner()
N = 16  # commits after GOOD, as the end-to-end check (docs/compare.md, "Bisect")


def _repo(tmp_path: Path, bad_at: int | None, noisy: set[int] = frozenset()) -> Path:
    """GOOD (commit 0) and N commits after it; from commit `bad_at` on the tree says SLOW (None: never), commits
    in `noisy` say NOISY. Every commit has the study file and the lock."""
    return make_repo(tmp_path, [{"n": f"{i}\n", "SLOW": "" if bad_at is not None and i >= bad_at else None,
                                 "NOISY": "" if i in noisy else None} for i in range(N + 1)])


def _fake_step(repo: Path, calls: list[str]):
    """A step that reads the verdict off the commit's tree: SLOW -> regression, NOISY -> inconclusive."""

    def step(good: str, sha: str) -> tuple[Decision, str]:
        calls.append(sha)
        files = git(repo, "ls-tree", "--name-only", sha).split()
        v = (Decision.INCONCLUSIVE if "NOISY" in files else
             Decision.REGRESSION if "SLOW" in files else Decision.NO_CHANGE)
        return v, "fake"

    return step


def _sha(repo: Path, i: int) -> str:
    return git(repo, "rev-parse", f"HEAD~{N - i}")


def test_finds_the_first_bad_commit_at_every_position_in_log2_steps(tmp_path):
    repo = _repo(tmp_path, None)
    index = {_sha(repo, i): i for i in range(N + 1)}
    for bad_at in range(1, N + 1):
        calls: list[str] = []

        def step(good: str, sha: str) -> tuple[Decision, str]:
            calls.append(sha)
            return (Decision.REGRESSION if index[sha] >= bad_at else Decision.NO_CHANGE), "fake"

        res = bisection.run_bisect("HEAD~16", "HEAD", repo=repo, step=step)
        assert res.first_bad == _sha(repo, bad_at) and res.exit_code == 1 == bisection.EXIT_FOUND
        # the check of BAD, then ceil(log2 16) = 4: at most 5 steps, within the 6
        assert len(res.steps) <= 1 + math.ceil(math.log2(N)) == res.max_steps == 5
        assert calls[0] == _sha(repo, N)  # BAD against GOOD first
        assert [s.commit for s in res.steps] == calls and res.steps[0].subject == f"commit {N}"
        assert all(s.verdict in (Decision.REGRESSION, Decision.NO_CHANGE) for s in res.steps)


def test_no_regression_between_good_and_bad_is_exit_0_after_one_step(tmp_path):
    repo = _repo(tmp_path, None)
    calls: list[str] = []
    res = bisection.run_bisect("HEAD~16", "HEAD", repo=repo, step=_fake_step(repo, calls))
    assert res.first_bad is None and res.range is None and res.exit_code == 0 and len(calls) == 1


def test_an_inconclusive_step_stops_with_the_range_never_read_as_good_or_bad(tmp_path):
    # 16 after GOOD, bad from 11: the search looks at 16 (bad), 8 (good), then 12 -- made inconclusive
    repo = _repo(tmp_path, 11, noisy={12})
    calls: list[str] = []
    res = bisection.run_bisect("HEAD~16", "HEAD", repo=repo, step=_fake_step(repo, calls))
    assert [s.verdict for s in res.steps] == [Decision.REGRESSION, Decision.NO_CHANGE, Decision.INCONCLUSIVE]
    assert res.first_bad is None and res.exit_code == 3 == bisection.EXIT_INCONCLUSIVE
    assert res.range == (_sha(repo, 8), _sha(repo, N))  # the last good and the first known bad: 12 is neither
    # BAD itself inconclusive: the range is the whole of GOOD..BAD
    repo2 = _repo(tmp_path / "b", 11, noisy={N})
    res2 = bisection.run_bisect("HEAD~16", "HEAD", repo=repo2, step=_fake_step(repo2, []))
    assert res2.range == (_sha(repo2, 0), _sha(repo2, N)) and len(res2.steps) == 1 and res2.exit_code == 3


def test_bad_input_is_refused_before_any_step(tmp_path):
    repo = _repo(tmp_path, 5)
    calls: list[str] = []
    step = _fake_step(repo, calls)
    for args, kw, says in [
        (("nosuch", "HEAD"), {}, "GOOD 'nosuch': no such commit"),
        (("HEAD~3", "nö"), {}, "BAD 'nö': no such commit"),
        (("HEAD", "HEAD~3"), {}, "not an ancestor"),
        (("HEAD", "HEAD"), {}, "nothing to bisect"),
        (("HEAD~3", "HEAD"), {"study": "studies/none.yaml"}, "--study studies/none.yaml"),
        (("HEAD~3", "HEAD"), {"study": str(tmp_path / "none.yaml")}, "no such file"),
        (("HEAD~3", "HEAD"), {"budget_s": math.nan}, "--budget-s"),
        (("HEAD~3", "HEAD"), {"repo": tmp_path}, "not inside a git checkout"),
    ]:
        with pytest.raises(ConfigError) as e:
            bisection.run_bisect(*args, **{"repo": repo, "step": step, **kw})
        assert says in str(e.value), (args, kw, str(e.value))
    assert calls == []
    # GOOD off BAD's first-parent line (a side branch) is refused too
    main = git(repo, "branch", "--show-current")
    git(repo, "checkout", "-qb", "side", "HEAD~10")
    (repo / "side").write_text("x")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "side")
    with pytest.raises(ConfigError, match="not an ancestor"):
        bisection.run_bisect("side", main, repo=repo, step=step)


def _fake_sweeps(monkeypatch, slowdown: float):
    """Synthetic sweeps (tests/ab_fakes.py): a side whose code has SLOW in its tree is `slowdown` times as slow."""
    return fake_sweeps(monkeypatch, lambda side: slowdown if (side.root / "SLOW").exists() else 1.0, noise=0.01)


def test_the_ab_step_measures_each_commit_from_its_own_checkout(tmp_path, monkeypatch):
    repo = _repo(tmp_path, 6)
    rounds = _fake_sweeps(monkeypatch, 1.1)
    lines: list[str] = []
    res = bisection.run_bisect("HEAD~16", "HEAD", repo=repo, rule=Rule(min_pairs=3), progress=lines.append)
    assert res.first_bad == _sha(repo, 6) and len(res.steps) <= 5
    assert {name for name, _ in rounds} == {"baseline", "current"}
    # every side ran from a checkout (git archive, no .git), never the repository's working tree; all removed
    assert all(root != repo and not (root / ".git").exists() for _, root in rounds)
    assert not any(root.exists() for _, root in rounds)
    assert any(line.startswith("step 1: ") and "regression" in line and "ViT-Nano/4" in line for line in lines)
    assert all(s.verdict is not Decision.INCONCLUSIVE for s in res.steps)


def test_the_command_line_prints_the_steps_and_exits_like_ab(tmp_path, monkeypatch):
    repo = _repo(tmp_path, 9)
    monkeypatch.setattr(bisection, "ab_step", lambda root, *a: _fake_step(root, []))
    res = runner.invoke(app, ["bisect", "HEAD~16", "HEAD", "--repo", str(repo)])
    assert res.exit_code == 1, res.output
    assert f"first bad commit: {_sha(repo, 9)} (commit 9)" in res.output
    # the progress (stderr, as each step ends) and the summary (stdout: one line a step)
    progress = [ln for ln in res.output.splitlines() if ln.startswith("step ") and "after GOOD" in ln]
    steps_printed = [ln for ln in res.output.splitlines() if ln.startswith("step ") and "after GOOD" not in ln]
    assert len(progress) == len(steps_printed)
    assert 1 <= len(steps_printed) <= 5 and steps_printed[0].split()[2] == _sha(repo, N)[:12]
    repo2 = _repo(tmp_path / "none", None)
    res = runner.invoke(app, ["bisect", "HEAD~16", "HEAD", "--repo", str(repo2)])
    assert res.exit_code == 0 and "no regression" in res.output
    res = runner.invoke(app, ["bisect", "HEAD~16", "HEAD", "--repo", str(repo2), "--threshold", "2"])
    assert res.exit_code == 2 and "--threshold" in res.output and "Traceback" not in res.output
