"""vitbench bisect: the search over a throwaway git repository with a fake step (each commit's speed written in
its tree), the real `ab` step over synthetic sweeps (no measurement), bad input, and the command line."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from ab_fakes import fake_sweeps, git, make_repo
from typer.testing import CliRunner

from vitbench.cli import app
from vitbench.compare import bisection
from vitbench.compare.decide import Decision
from vitbench.compare.paired import Paired, Rule, TwoPoint, between
from vitbench.env import short_sha
from vitbench.errors import ConfigError

runner = CliRunner()
N = 16  # commits after GOOD, as the end-to-end check (docs/compare.md, "Bisect")


def _repo(tmp_path: Path, bad_at: int | None, noisy: set[int] = frozenset()) -> Path:
    """GOOD (commit 0) and N commits after it; from commit `bad_at` on the tree says SLOW (None: never), commits
    in `noisy` say NOISY. Every commit has the study file and the lock."""
    return make_repo(tmp_path, [{"n": f"{i}\n", "SLOW": "" if bad_at is not None and i >= bad_at else None,
                                 "NOISY": "" if i in noisy else None} for i in range(N + 1)])


# pair ratios commit / GOOD as a step would measure them: as fast as GOOD, 10 % slower, and too noisy to tell
FAST, SLOW, NOISY = [1.0, 1.01, 0.99, 1.0], [0.9, 0.91, 0.89, 0.9], [0.7, 1.2, 0.8, 1.1]


def _measured(ratios: list[float], **others: list[float]) -> bisection.Measured:
    return bisection.Measured({"t": ratios, **others}, names={"t": "ViT-Nano/4 infer"}, how="fake")


def _fake_step(repo: Path, calls: list[str]):
    """A step that reads the ratios off the commit's tree: SLOW -> 10 % slower, NOISY -> too noisy to tell."""

    def step(good: str, sha: str, rule: Rule) -> bisection.Measured:
        calls.append(sha)
        files = git(repo, "ls-tree", "--name-only", sha).split()
        return _measured(NOISY if "NOISY" in files else SLOW if "SLOW" in files else FAST)

    return step


def _sha(repo: Path, i: int) -> str:
    return git(repo, "rev-parse", f"HEAD~{N - i}")


def test_finds_the_first_bad_commit_at_every_position_in_log2_steps(tmp_path):
    repo = _repo(tmp_path, None)
    index = {_sha(repo, i): i for i in range(N + 1)}
    for bad_at in range(1, N + 1):
        calls: list[str] = []

        def step(good: str, sha: str, rule: Rule) -> bisection.Measured:
            calls.append(sha)
            return _measured(SLOW if index[sha] >= bad_at else FAST)

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
    assert 1 <= len(steps_printed) <= 5 and steps_printed[0].split()[2] == short_sha(_sha(repo, N))
    repo2 = _repo(tmp_path / "none", None)
    res = runner.invoke(app, ["bisect", "HEAD~16", "HEAD", "--repo", str(repo2)])
    assert res.exit_code == 0 and "no regression" in res.output
    res = runner.invoke(app, ["bisect", "HEAD~16", "HEAD", "--repo", str(repo2), "--threshold", "2"])
    assert res.exit_code == 2 and "--threshold" in res.output and "Traceback" not in res.output


def test_an_inconclusive_first_step_says_bad_was_never_shown_slower(tmp_path, monkeypatch):
    """Step 1 (BAD against GOOD) inconclusive: it said "the first bad commit is after GOOD and at or before BAD",
    a regression BAD was never shown to have. It says the step could not tell, and what to do."""
    repo = _repo(tmp_path, 11, noisy={N})
    monkeypatch.setattr(bisection, "ab_step", lambda root, *a: _fake_step(root, []))
    res = runner.invoke(app, ["bisect", "HEAD~16", "HEAD", "--repo", str(repo)])
    out = " ".join(res.output.split())
    assert res.exit_code == 3, res.output
    assert "step 1 could not tell whether BAD" in out and "nothing was bisected" in out, out
    assert "--budget-s" in out and "quieter host" in out and "first bad commit is" not in out, out
    repo2 = _repo(tmp_path / "later", 11, noisy={12})  # a later step inconclusive: the range it had narrowed to
    res = runner.invoke(app, ["bisect", "HEAD~16", "HEAD", "--repo", str(repo2)])
    out = " ".join(res.output.split())
    lo, hi = short_sha(_sha(repo2, 8)), short_sha(_sha(repo2, N))
    assert res.exit_code == 3 and f"after {lo} and at or before {hi}" in out, out


# ---- after step 1, a commit is held between GOOD's speed and BAD's (vitbench.compare.paired.TwoPoint) ----------
def _p(ratio: float, lo: float, hi: float) -> Paired:
    return Paired((ratio,) * 4, ratio, lo, hi)


def test_between_decides_for_the_measured_point_the_interval_leaves_standing():
    a = 0.921  # R-Micro infer on BAD in docs/compare.md's bisection
    # step 3 of that run: inconclusive under the threshold rule (its interval holds 0.95), bad between the points
    assert _p(0.937, 0.898, 0.977).ratio and Paired.of([0.92, 0.95, 0.93, 0.95], 0.95).decision(0.05) \
        is Decision.INCONCLUSIVE
    assert between(_p(0.937, 0.898, 0.977), a) is Decision.REGRESSION
    assert between(_p(0.99, 0.93, 1.05), a) is Decision.NO_CHANGE  # above BAD, holds 1: as fast as GOOD
    assert between(_p(0.95, 0.90, 1.01), a) is Decision.INCONCLUSIVE  # holds both points
    # both excluded (the speed changed in two commits): the nearer point in log, the midpoint sqrt(a) = 0.9597
    assert between(_p(0.950, 0.93, 0.97), a) is Decision.REGRESSION
    assert between(_p(0.970, 0.93, 0.99), a) is Decision.NO_CHANGE
    assert between(Paired((0.9,), 0.9, None, None), a) is Decision.INCONCLUSIVE


def test_two_point_counts_only_the_trials_that_regressed_on_bad():
    rule = TwoPoint(min_pairs=4, against=(("t", 0.9),))
    noisy_other = {"t": SLOW, "u": NOISY}
    assert rule.decisions(noisy_other)["t"][1] is Decision.REGRESSION
    assert rule.decisions(noisy_other)["u"][1] is Decision.INCONCLUSIVE  # shown, under the threshold rule
    fast_other = {"t": FAST, "u": NOISY}  # t decided (good), u not: only t counts
    assert rule.done(fast_other, 4) and not Rule(min_pairs=4).done(fast_other, 4)
    assert not rule.done({"t": NOISY, "u": FAST}, 4) and not rule.done({"t": SLOW}, 3)  # below min_pairs
    assert rule.replay([{"t": r, "u": n} for r, n in zip(FAST, NOISY)]) == (Decision.NO_CHANGE, 4)


def test_a_commit_with_a_smaller_slowdown_is_found_where_the_threshold_rule_stopped(tmp_path):
    """BAD 7 % slower (a real R-Micro bisection's size): the threshold rule cannot call a commit 'regression'
    until its interval is under 0.95; the two points decide it, and a trial that did not regress on BAD and is
    noisy in every step neither stops nor decides a step."""
    repo = _repo(tmp_path, 11)
    seven = [0.92, 0.95, 0.93, 0.95]  # 0.937, interval about [0.91, 0.96]: holds 0.95
    calls: list[str] = []

    def step(good: str, sha: str, rule: Rule) -> bisection.Measured:
        calls.append(sha)
        slow = "SLOW" in git(repo, "ls-tree", "--name-only", sha).split()
        return _measured(seven if slow else FAST, u=NOISY)

    lines: list[str] = []
    res = bisection.run_bisect("HEAD~16", "HEAD", repo=repo, step=step, rule=Rule(min_pairs=4),
                               progress=lines.append)
    assert res.first_bad is None and res.exit_code == 3  # step 1 under the threshold rule: not a regression yet
    bad_first = [0.90, 0.92, 0.91, 0.92]  # BAD measured well: 0.912 [0.90, 0.93]

    def step2(good: str, sha: str, rule: Rule) -> bisection.Measured:
        slow = "SLOW" in git(repo, "ls-tree", "--name-only", sha).split()
        return _measured(bad_first if sha == _sha(repo, N) else seven if slow else FAST, u=NOISY)

    res = bisection.run_bisect("HEAD~16", "HEAD", repo=repo, step=step2, rule=Rule(min_pairs=4),
                               progress=lines.append)
    assert res.first_bad == _sha(repo, 11) and res.exit_code == 1 and len(res.steps) <= 5, lines
    assert [s.verdict for s in res.steps[1:]].count(Decision.INCONCLUSIVE) == 0
    assert "(not counted: it did not regress on BAD)" in res.steps[1].detail
    assert any(" bad: " in ln for ln in lines) and any(" good: " in ln for ln in lines)


def test_a_trial_that_failed_on_bad_makes_a_commit_bad_where_it_fails(tmp_path):
    repo = _repo(tmp_path, 5)

    def step(good: str, sha: str, rule: Rule) -> bisection.Measured:
        slow = "SLOW" in git(repo, "ls-tree", "--name-only", sha).split()
        return bisection.Measured({"t": [] if slow else FAST}, frozenset({"t"}) if slow else frozenset())

    res = bisection.run_bisect("HEAD~16", "HEAD", repo=repo, step=step)
    assert res.first_bad == _sha(repo, 5) and res.exit_code == 1
    assert res.steps[0].verdict is Decision.REGRESSION and "failed" in res.steps[0].detail
