"""vitbench ab: the paired decision and its sequential rule on synthetic rounds, the ref's checkout, the A/B loop
with synthetic sweeps (no measurement), bad input; one slow end-to-end run of HEAD against itself."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from test_compare import SPIKE_P, STEP_CV, STEPS
from ab_fakes import fake_sweeps, git, make_repo
from typer.testing import CliRunner

from vitbench.cli import app
from vitbench.compare import EXIT_INCONCLUSIVE, to_benchmark_json, to_markdown
from vitbench.compare import ab as ab_mod
from vitbench.compare import sides as sides_mod
from vitbench.compare.decide import Decision
from vitbench.compare.paired import Paired, Rule, t_quantile, verdict
from vitbench.compare.schedule import Schedule, core_halves
from vitbench.errors import ConfigError
from tolerances_stat import Z_STAT, median_sd, min_sd, quantile_sd

runner = CliRunner()


# ------------------------------------------------------------------------------------------------ the decision
@pytest.mark.parametrize(("df", "exact"), [(1, 12.706), (2, 4.303), (3, 3.182), (10, 2.228), (30, 2.042)])
def test_t_quantile_matches_the_tables(df, exact):
    # exact: the table's rounding to 3 decimals (+-0.0005)
    assert t_quantile(0.975, df) == pytest.approx(exact, rel=0, abs=0.0005)


@pytest.mark.parametrize("df", [1.01, 1.2, 1.5, 1.8])
def test_t_quantile_is_exact_at_welchs_fractional_df(df):
    """Two runs a side put Welch's df between 1 and 2, where the Cornish-Fisher series was 1-11 % too small
    (intervals too narrow): the quantile is the t distribution's, to its own rounding (it inverts the cdf)."""
    from scipy import stats

    assert t_quantile(0.975, df) == pytest.approx(stats.t.ppf(0.975, df), rel=1e-9)


def test_paired_interval_and_decisions():
    rng = random.Random(1)
    same = [math.exp(rng.gauss(0, 0.02)) for _ in range(10)]
    p = Paired.of(same, 0.95)
    assert p.ci_low < 1 < p.ci_high and p.decision(0.05) is Decision.NO_CHANGE
    slow = [0.9 * x for x in same]
    assert Paired.of(slow, 0.95).decision(0.05) is Decision.REGRESSION
    fast = [1.2 * x for x in same]
    assert Paired.of(fast, 0.95).decision(0.05) is Decision.IMPROVEMENT
    # the interval straddles 1 - threshold: not decidable yet
    assert Paired.of([0.95 * x for x in same], 0.95).decision(0.05) is Decision.INCONCLUSIVE
    assert Paired.of([0.9], 0.95).decision(0.05) is Decision.INCONCLUSIVE  # one pair: no interval
    with pytest.raises(ValueError):
        Paired.of([1.0, math.nan], 0.95)


def _run(rule: Rule, truth: float, sd: float, rng: random.Random, trials: int = 4) -> tuple[Decision, int]:
    seq = [{f"t{i}": truth * math.exp(rng.gauss(0, sd)) for i in range(trials)} for _ in range(rule.max_pairs)]
    return rule.replay(seq)


def test_sequential_rule_aa_passes_and_ten_percent_fails():
    """Synthetic pairs with 5 % log-normal pair noise, 4 trials, up to 20 pairs: A/A almost never fails (<= 5 %
    false alarms), a 10 % slowdown (img/s x 1/1.1) is almost always caught (>= 95 %)."""
    rule = Rule(threshold=0.05, confidence=0.95, min_pairs=4, max_pairs=20)
    rng = random.Random(0)
    aa = [_run(rule, 1.0, 0.05, rng) for _ in range(300)]
    slow = [_run(rule, 1 / 1.1, 0.05, rng) for _ in range(300)]
    assert sum(v is Decision.REGRESSION for v, _ in aa) / 300 <= 0.05
    assert sum(v is Decision.NO_CHANGE for v, _ in aa) / 300 >= 0.9
    assert sum(v is Decision.REGRESSION for v, _ in slow) / 300 >= 0.95
    assert all(n >= 4 for _, n in aa + slow)  # the minimum is always measured


def test_budget_exhausted_is_inconclusive():
    rule = Rule(threshold=0.05, min_pairs=2, max_pairs=3)
    v, n = rule.replay([{"t": r} for r in (0.99, 0.90, 0.96, 0.93)])
    assert (v, n) == (Decision.INCONCLUSIVE, 3)
    assert verdict([Decision.NO_CHANGE, Decision.INCONCLUSIVE]) is Decision.INCONCLUSIVE
    assert verdict([Decision.FAILED, Decision.INCONCLUSIVE]) is Decision.REGRESSION


@pytest.mark.parametrize("kw", [{"threshold": 0}, {"threshold": 1.5}, {"confidence": 1}, {"min_pairs": 1},
                                {"min_pairs": 4, "max_pairs": 3}])
def test_rule_refuses_bad_settings(kw):
    with pytest.raises(ConfigError):
        Rule(**kw)


# -------------------------------------------------------------------------------------------- git and checkout
@pytest.fixture()
def repo(tmp_path) -> Path:
    """A tiny git repository with two commits, a study file and a lock."""
    return make_repo(tmp_path, [{}, {"NEW": "2\n"}])


def test_the_report_never_pools_an_ab_run_s_two_sides_and_a_side_s_rows_name_their_commit(repo, monkeypatch,
                                                                                            tmp_path):
    """`vitbench report` on an `ab --results` folder pooled both sides' rounds as repeats of one trial (24 trials
    "from 12 sweep run(s)", one median over the baseline's and the working tree's code, one `vitbench git`), and
    the baseline's rows (a `git archive` tree) recorded git_sha None. Such a folder is refused, naming each side's
    folder; a side's folder is reported with the commit --results' SIDES_FILE names for rows that record none;
    and the archived side's sweeps are told their commit ($VITBENCH_GIT_SHA, read by vitbench.env.git_sha)."""
    from vitbench.env import GIT_SHA_ENV, git_sha, short_sha
    from vitbench.report import build_report

    told: dict[str, str | None] = {}

    def scale(side: ab_mod.Side) -> float:
        told[side.name] = side.env().get(GIT_SHA_ENV)
        return 1.0

    fake_sweeps(monkeypatch, scale, 0.01)
    res = ab_mod.run_ab("HEAD~1", repo=repo, rule=Rule(min_pairs=2, max_pairs=2), results=tmp_path / "AB")
    assert res.pairs == 2
    base = git(repo, "rev-parse", "HEAD~1")
    assert told == {"baseline": base, "current": None}  # the working tree's own checkout says it
    for where in (tmp_path / "AB", tmp_path):  # the folder, or one holding it
        with pytest.raises(ConfigError) as e:
            build_report(where, tmp_path / "rep", formats=("md",), plots=False)
        said = " ".join(str(e.value).split())
        assert "two code versions" in said and f"HEAD~1 = {short_sha(base)}" in said, said
        assert f"vitbench report {tmp_path / 'AB' / 'baseline'}" in said, said
    for side, sha in (("baseline", base), ("current", "c" * 40)):
        rep = build_report(tmp_path / "AB" / side, tmp_path / f"rep-{side}", formats=("md",), plots=False)
        assert set(rep.df["env.git_sha"]) == {sha} and f"vitbench git: {sha}" in rep.meta, rep.meta
    one = build_report(tmp_path / "AB" / "baseline" / "pair01", tmp_path / "rep-1", formats=("md",), plots=False)
    assert set(one.df["env.git_sha"]) == {base}
    # outside a git checkout, the variable is the commit (inside one, git's own answer stands)
    monkeypatch.setenv(GIT_SHA_ENV, "d" * 40)
    git_sha.cache_clear()
    try:
        assert git_sha(str(tmp_path / "AB")) == "d" * 40 and git_sha(str(repo)) != "d" * 40
    finally:
        git_sha.cache_clear()


def test_checkout_is_the_refs_tree_and_is_removed(repo):
    sha = ab_mod.resolve_ref(repo, "HEAD~1")
    with ab_mod.checkout(repo, sha) as tmp:
        assert (tmp / "src" / "studies" / "ci.yaml").read_text() == "name: ci\n"
        assert not (tmp / "src" / "NEW").exists() and not (tmp / "src" / ".git").exists()
    assert not tmp.exists()
    with pytest.raises(KeyboardInterrupt), ab_mod.checkout(repo, sha) as tmp2:
        raise KeyboardInterrupt
    assert not tmp2.exists()  # removed on Ctrl-C too
    assert len(git(repo, "worktree", "list").splitlines()) == 1  # the repository is untouched


def test_bad_input_exits_2(repo, tmp_path):
    cases = [
        (["ab", "nosuchref", "--repo", str(repo)], "no such commit"),
        (["ab", "HEAD~1", "--repo", str(tmp_path / "nowhere")], "not a directory"),
        (["ab", "HEAD~1", "--repo", str(tmp_path)], "not inside a git checkout"),
        (["ab", "HEAD", "--repo", str(repo)], "compare a commit with itself"),
        (["ab", "HEAD~1", "--repo", str(repo), "--budget-s", "0"], "--budget-s"),
        (["ab", "HEAD~1", "--repo", str(repo), "--budget-s", "nan"], "--budget-s"),
        (["ab", "HEAD~1", "--repo", str(repo), "--min-pairs", "1"], "--min-pairs"),
        (["ab", "HEAD~1", "--repo", str(repo), "--study", "studies/none.yaml"], "no such file"),
        (["ab", "HEAD~1", "--repo", str(repo), "--format", "xml"], "--format"),
        (["ab", "HEAD~1", "--repo", str(repo), "--schedule", "random"], "--schedule"),
        (["ab", "HEAD~1", "--repo", str(repo), "--statistic", "mean"], "--statistic"),
    ]
    for args, msg in cases:
        res = runner.invoke(app, args)
        assert res.exit_code == 2, (args, res.output)
        assert msg in res.output and "Traceback" not in res.output, (args, res.output)


def test_a_ref_without_the_study_names_the_way_out(repo):
    (repo / "studies" / "other.yaml").write_text("name: other\n")
    res = runner.invoke(app, ["ab", "HEAD~1", "--repo", str(repo), "--study", "studies/other.yaml"])
    assert res.exit_code == 2 and "--baseline-study" in res.output


def test_a_relative_study_stays_inside_each_side_s_tree(repo, tmp_path):
    """A relative --study is read in each side's tree; ../../x climbed out of both (a review swept /etc/passwd as
    the baseline's study). Refused naming the flag; an absolute path is the way to a study outside."""
    (tmp_path / "outside.yaml").write_text("name: outside\n")
    rel = os.path.relpath(tmp_path / "outside.yaml", repo)
    res = runner.invoke(app, ["ab", "HEAD~1", "--repo", str(repo), "--study", rel])
    assert res.exit_code == 2 and "leaves the working tree" in " ".join(res.output.split()), res.output


def test_a_relative_results_folder_is_where_the_user_typed_it_not_in_a_side_s_tree(tmp_path, monkeypatch):
    """Each side's sweep runs in its own tree (cwd): `ab --results abrel` sent the baseline's rows into its
    temporary `git archive` checkout (removed with it: "no records", exit 2) and the current side's into the
    repository. A round's sweep is told the folder from where the user is."""
    tree, here = tmp_path / "side-tree", tmp_path / "user"
    tree.mkdir(), here.mkdir()
    fake_python = tmp_path / "python"  # records the sweep's arguments and where it ran, as `vitbench sweep` would
    fake_python.write_text('#!/bin/sh\nprintf "%s\\n" "$PWD" "$@" > "$ARGS_AT"\n')
    fake_python.chmod(0o755)
    side = ab_mod.Side("baseline", "HEAD~1", tree, Path("study.yaml"), str(fake_python), "this one")
    monkeypatch.chdir(here)
    monkeypatch.setenv("ARGS_AT", str(tmp_path / "args"))
    running = side.start_round(Path("abrel") / "baseline" / "pair01" / "leg1")
    assert running.proc.wait(timeout=60) == 0
    cwd, *args = (tmp_path / "args").read_text().splitlines()
    assert cwd == str(tree) and args[args.index("--results") + 1] == str(here / "abrel/baseline/pair01/leg1")
    assert args[args.index("sweep") + 1] == "study.yaml"  # a relative study: read in the side's own tree


# ----------------------------------------------------------------------------------- the loop, synthetic sweeps
ROUND_NOISE = 0.01  # _fake_sweeps: each round's speed x lognormal(0, this) (a machine state)


def _fake_sweeps(monkeypatch, slowdown: float, noise: float = ROUND_NOISE, **kw) -> list[tuple[str, Path]]:
    """Synthetic sweeps (tests/ab_fakes.py) of two trials; current's steps are `slowdown` times as long. Returns
    (side, root) of every leg's round in the order they ran."""
    return fake_sweeps(monkeypatch, lambda side: slowdown if side.name == "current" else 1.0, noise,
                       models=("ViT-Nano/4", "R-Nano"), **kw)


def test_ab_loop_no_change_alternates_and_reports(repo, monkeypatch, tmp_path):
    calls = _fake_sweeps(monkeypatch, 1.0)
    res = ab_mod.run_ab("HEAD~1", repo=repo, rule=Rule(min_pairs=4), results=tmp_path / "rounds")
    assert res.verdict is Decision.NO_CHANGE and res.exit_code == 0 and res.pairs == 4
    legs = len(ab_mod.DEFAULT_SCHEDULE.legs(core_halves()))  # 2 where this machine can pin, else 1
    # pairs A B, B A: drift cancels (a pair's legs start the sides in the same order)
    assert [name for name, _ in calls[:4 * legs]] == ["baseline", "current"] * legs + ["current", "baseline"] * legs
    assert {r.decision for r in res.comparison.rows} == {Decision.NO_CHANGE}
    assert all(r.method.startswith("paired: 4 round pairs") and r.ci_low < 1 < r.ci_high
               for r in res.comparison.rows)
    md = to_markdown(res.comparison)
    assert "the same environment for both sides" in md and "HEAD~1 = " in md and "4 pairs" in md
    # each side's commit is the context's: not a difference of the environments (the archive's rows say none)
    assert not any(k == "git_sha" for k, _, _ in res.comparison.env_diff) and "git_sha" not in md
    assert all("decision: no change" in e["extra"] for e in to_benchmark_json(res.comparison))
    assert (tmp_path / "rounds" / "baseline" / "pair04" / f"leg{legs}" / "results.jsonl").exists()
    # which commit each side ran, for `history append`'s paired points (a git-archive side records none itself)
    sides = json.loads((tmp_path / "rounds" / ab_mod.SIDES_FILE).read_text())
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD", "HEAD~1"], capture_output=True,
                          text=True, check=True).stdout.split()
    assert sides["baseline"]["commit"] == head[1] and sides["current"]["commit"] in (head[0], head[0] + "-dirty")
    # and the load the gate read around each pair, which its busy pairs are judged by (history append's too)
    loads = ab_mod.pair_loads(tmp_path / "rounds")
    assert sorted(loads) == [f"pair{n:02d}" for n in range(1, 5)]
    assert [x for x in loads.values() if x is not None] == [x for x, y in zip(res.rounds.others, loads.values())
                                                            if y is not None]


@pytest.mark.parametrize("schedule", list(ab_mod.Schedule))
@pytest.mark.parametrize("statistic", list(ab_mod.Statistic))
def test_ab_loop_catches_a_ten_percent_slowdown(repo, monkeypatch, schedule, statistic):
    _fake_sweeps(monkeypatch, 1.1, own=schedule.own_load)
    res = ab_mod.run_ab("HEAD~1", repo=repo, schedule=schedule, statistic=statistic)
    assert res.verdict is Decision.REGRESSION and res.exit_code == 1
    # sampling: a round's value is its best, p90 or median step (min_sd / quantile_sd / median_sd) times its
    # round's speed; a pair's log-ratio has sd sqrt(2 (ROUND_NOISE^2 + that^2)), the geometric mean over the pairs
    # divides by sqrt(pairs)
    step_sd = {ab_mod.Statistic.BEST: min_sd(STEP_CV, STEPS),
               ab_mod.Statistic.P90: quantile_sd(STEP_CV, STEPS, 0.1, SPIKE_P),  # img/s's 0.9: the steps' 0.1
               ab_mod.Statistic.MEDIAN: median_sd(STEP_CV, STEPS, SPIKE_P)}[statistic]
    sampling = Z_STAT * np.sqrt(2 * (ROUND_NOISE**2 + step_sd**2) / res.pairs)
    assert all(r.ratio == pytest.approx(1 / 1.1, rel=sampling) for r in res.comparison.rows)
    assert any(r.decision is Decision.REGRESSION and r.ci_high < 0.95 for r in res.comparison.rows)
    # the first regression ends it
    assert 4 <= res.pairs < 10 and res.stopped == f"decided after {res.pairs} pairs"


def test_turns_with_a_baseline_that_cannot_take_turns_runs_together_and_says_so(tmp_path, monkeypatch):
    repo = make_repo(tmp_path, [{"vitbench/turns.py": None}, {"vitbench/turns.py": "# takes turns\n"}])
    _fake_sweeps(monkeypatch, 1.0, own=Schedule.TOGETHER.own_load)
    said: list[str] = []
    res = ab_mod.run_ab("HEAD~1", repo=repo, schedule=Schedule.TURNS, rule=Rule(min_pairs=2, max_pairs=2),
                        progress=said.append)
    context = dict(res.comparison.context)
    assert "baseline side's code cannot take turns" in context["schedule"] and said[0] == context["schedule"]
    assert context["rounds"].startswith("2 pairs, together")


@pytest.mark.parametrize("others", [ab_mod.BUSY_CORES, 1.0])
def test_ab_on_a_busy_host_leaves_the_busy_pairs_out_and_says_so(repo, monkeypatch, others):
    # a 2x slowdown, plain in every pair: but every pair shared the machine with others (BUSY_CORES or more
    # beyond the gate's own): no decision rests on them, and the verdict says why
    _fake_sweeps(monkeypatch, 2.0, others=others)
    res = ab_mod.run_ab("HEAD~1", repo=repo, rule=Rule(min_pairs=2, max_pairs=3))
    assert res.verdict is Decision.INCONCLUSIVE and res.exit_code == 3
    host = dict(res.comparison.context)["host"]
    assert "3 of 3 pairs busy" in host and "left out of every decision" in host
    assert all("0 of the 2 pairs a decision needs" in r.note and "3 busy pair(s) left out" in r.note
               for r in res.comparison.rows)
    _fake_sweeps(monkeypatch, 2.0, others=ab_mod.BUSY_CORES / 2)  # below the line: decided
    res = ab_mod.run_ab("HEAD~1", repo=repo, rule=Rule(min_pairs=2, max_pairs=3))
    assert res.verdict is Decision.REGRESSION and "every pair quiet" in dict(res.comparison.context)["host"]


def test_the_gates_own_reading_of_the_load_decides_not_the_rows(repo, monkeypatch, tmp_path):
    # under `turns` a row's own meter counts the other side and the other leg as others (1.5 cores of the gate's
    # own), and on a saturated machine it cannot see more: the gate measures around the pair instead (TreeMeter)
    _fake_sweeps(monkeypatch, 2.0, others=1.0)  # the rows say busy
    monkeypatch.setattr(ab_mod.TreeMeter, "other_cores", 0.1)  # the gate saw the machine quiet
    res = ab_mod.run_ab("HEAD~1", repo=repo, rule=Rule(min_pairs=2, max_pairs=3), results=tmp_path / "r")
    assert res.verdict is Decision.REGRESSION and "every pair quiet" in dict(res.comparison.context)["host"]
    pairs = ab_mod.Pairs(own_load=1.0)  # a pair read back from its directories: the rows' reading less own_load
    pairs.add(tmp_path / "r" / "baseline" / "pair01", tmp_path / "r" / "current" / "pair01")
    assert pairs.others == [pytest.approx(1.0 + ab_mod.DEFAULT_SCHEDULE.own_load - 1.0)] and pairs.busy() == [True]


def test_a_busy_pair_s_progress_line_says_it_was_left_out(repo, monkeypatch):
    # `pair 1 (baseline first, 214 s): ` ended at its colon on a busy host: its ratios were in no decision and the
    # line said nothing; a quiet pair's line gives its ratios and no such words
    _fake_sweeps(monkeypatch, 1.0, others=1.0)
    said: list[str] = []
    ab_mod.run_ab("HEAD~1", repo=repo, rule=Rule(min_pairs=2, max_pairs=2), progress=said.append)
    lines = [s for s in said if s.startswith("pair ")]
    assert len(lines) == 2 and all(s.endswith("): busy (others' load >= 0.5 cores, or not recorded): this pair "
                                              "left out") for s in lines), lines
    _fake_sweeps(monkeypatch, 1.0)
    said.clear()
    ab_mod.run_ab("HEAD~1", repo=repo, rule=Rule(min_pairs=2, max_pairs=2), progress=said.append)
    assert all("ViT-Nano/4 infer" in s and "busy" not in s for s in said if s.startswith("pair ")), said


def test_the_study_line_says_an_absolute_study_is_one_file_for_both_sides(repo, monkeypatch, tmp_path):
    # docs/compare.md: an absolute --study is one file that both sides run; the context said "each side's own copy"
    one = tmp_path / "one.yaml"
    one.write_text("name: ci\n")
    _fake_sweeps(monkeypatch, 1.0)
    res = ab_mod.run_ab("HEAD~1", repo=repo, study=str(one), rule=Rule(min_pairs=2, max_pairs=2))
    assert dict(res.comparison.context)["study"] == f"{one} (one file outside the trees: both sides run it)"
    res = ab_mod.run_ab("HEAD~1", repo=repo, study="studies/ci.yaml", baseline_study=str(one),
                        rule=Rule(min_pairs=2, max_pairs=2))
    assert dict(res.comparison.context)["study"] == (f"baseline {one} (a file outside the trees), current "
                                                     "studies/ci.yaml (the working tree's own copy)")
    res = ab_mod.run_ab("HEAD~1", repo=repo, rule=Rule(min_pairs=2, max_pairs=2))
    assert dict(res.comparison.context)["study"] == ("baseline studies/ci.yaml, current studies/ci.yaml "
                                                     "(each side's own copy)")


def test_a_trial_not_ok_on_both_sides_says_so_beside_inconclusive(repo, monkeypatch):
    # every round's trial timed out on both sides (a busy host, a 120 s timeout): the table said only "0 of the 2
    # pairs a decision needs ...; no pair to decide on", exit 3, as if the noise had left it undecided
    from ab_fakes import bench_record, write_jsonl

    def start_round(self, out: Path, cpus=None, env=None):
        out.mkdir(parents=True)
        write_jsonl(out / "results.jsonl", [bench_record("ViT-Nano/4", status="timeout", run_id=self.name)])
        return ab_mod.Running(self, subprocess.Popen(["true"]), out / "log", out, cpus)

    _fake_sweeps(monkeypatch, 1.0)  # the meter: a quiet machine
    monkeypatch.setattr(ab_mod.Side, "start_round", start_round)
    res = ab_mod.run_ab("HEAD~1", repo=repo, rule=Rule(min_pairs=2, max_pairs=2))
    assert res.verdict is Decision.INCONCLUSIVE and res.exit_code == 3
    (row,) = res.comparison.rows
    assert "; not ok in 2 of 2 pair(s) on the baseline, in 2 on current (the rounds' rows say why" in row.note, \
        row.note


def _pairs_of(tmp_path: Path, speeds: list[tuple[float, float, float]], model=lambda n: "ViT-Nano/4"
              ) -> ab_mod.Pairs:
    """Pairs read back from generated rounds: per pair (baseline step s, current step s, others' load cores);
    `model`: the model the n-th pair's rounds measured."""
    from ab_fakes import bench_record, write_jsonl

    pairs = ab_mod.Pairs()
    for n, (b_s, c_s, others) in enumerate(speeds):
        dirs = []
        for side, step in (("baseline", b_s), ("current", c_s)):
            d = tmp_path / side / f"pair{n + 1:02d}"
            d.mkdir(parents=True)
            write_jsonl(d / "results.jsonl", [bench_record(model(n), [step * (1 + i / 100) for i in range(10)],
                                                           run_id=f"{side}{n}")])
            dirs.append(d)
        pairs.add(*dirs, others=others)
    return pairs


def test_the_sides_columns_are_over_the_pairs_the_ratio_is_over(tmp_path):
    # the baseline/current columns averaged every pair, busy ones included (current 2x as fast in those), while
    # the ratio was over the quiet pairs only: 3 quiet pairs at 0.8, 2 busy at 2.0 showed columns whose quotient
    # was 1.376 beside a ratio of 0.800, and 'mean of 5 runs' counted the pairs the decision left out
    from vitbench.compare import row_cells

    busy = ab_mod.BUSY_CORES
    pairs = _pairs_of(tmp_path, [(0.01, 0.0125, 0.0), (0.02, 0.025, busy / 2), (0.01, 0.005, busy),
                                 (0.015, 0.01875, 0.0), (0.01, 0.005, 2 * busy)])
    (row,) = ab_mod.rows(pairs, Rule(min_pairs=2))
    assert row.ratio == pytest.approx(0.8) and row.current / row.baseline == pytest.approx(row.ratio)
    assert row.repeats == (3, 3) and row.samples == (30, 30)
    cells = row_cells(row)
    assert all(cells[side].endswith(" (geometric mean of 3 quiet pairs; 2 busy left out)")
               for side in ("baseline", "current")), cells
    # no quiet pair: the busy pairs' values, said to be in no decision (never mixed with quiet ones)
    pairs = _pairs_of(tmp_path / "busy", [(0.01, 0.005, busy), (0.01, 0.005, 2 * busy)])
    (row,) = ab_mod.rows(pairs, Rule(min_pairs=2))
    assert row.ratio is None and row.current / row.baseline == pytest.approx(2.0)
    assert row_cells(row)["current"].endswith(" (geometric mean of 2 busy pairs, in no decision)")
    (entry,) = to_benchmark_json(SimpleNamespace(rows=[row]))
    assert "value: geometric mean of 2 busy pairs, in no decision" in entry["extra"], entry


def test_a_trial_absent_from_a_pair_has_its_later_pairs_read_with_their_own_load(tmp_path):
    # ViT-Nano/4 has no row in the first pair (quiet; another trial ran): its second pair (busy, current 2x as
    # fast) was read with the first pair's load, decided on as quiet (ratio 2.0), and its third (quiet, 0.8) left
    # out as busy
    busy = ab_mod.BUSY_CORES
    pairs = _pairs_of(tmp_path, [(0.01, 0.01, 0.0), (0.01, 0.005, 2 * busy), (0.01, 0.0125, 0.0)],
                      model=lambda n: "R-Micro" if n == 0 else "ViT-Nano/4")
    key = next(k for k, (b, _) in pairs.trials.items() if b.config["model"] == "ViT-Nano/4")
    assert pairs.values(key)[0] == (None, None) and pairs.ratios()[key] == [pytest.approx(0.8)]


def test_a_pair_whose_rows_do_not_say_the_load_counts_as_busy():
    pairs = ab_mod.Pairs(others=[0.1, None, ab_mod.BUSY_CORES, 0.49])
    assert pairs.busy() == [False, True, True, False]


def test_ab_loop_budget_spent_is_inconclusive_exit_3(repo, monkeypatch):
    _fake_sweeps(monkeypatch, 1.05, noise=0.03)
    res = ab_mod.run_ab("HEAD~1", repo=repo, rule=Rule(min_pairs=2, max_pairs=3))
    assert res.verdict is Decision.INCONCLUSIVE and res.exit_code == EXIT_INCONCLUSIVE == 3
    assert "INCONCLUSIVE" in to_markdown(res.comparison) and "--max-pairs 3 reached" in res.stopped
    calls = _fake_sweeps(monkeypatch, 1.05, noise=0.03)
    res = ab_mod.run_ab("HEAD~1", repo=repo, budget_s=1e-3)  # one pair, then no room for another
    legs = len(ab_mod.DEFAULT_SCHEDULE.legs(core_halves()))
    assert res.pairs == 1 and len(calls) == 2 * legs and "time budget" in res.stopped and res.exit_code == 3


# ---------------------------------------------------------------------------------- the test-only slowdown
def test_extra_work_is_switched_by_its_variable_and_marks_the_record(monkeypatch):
    from vitbench.backends.base import Step, StopRule
    from vitbench.measure import extra_work
    from vitbench.measure.throughput import bench

    monkeypatch.delenv(extra_work.ENV, raising=False)
    assert extra_work.requested() is None
    for bad in ("ten", "-0.1", "nan", "11"):
        monkeypatch.setenv(extra_work.ENV, bad)
        with pytest.raises(ConfigError, match=extra_work.ENV):
            extra_work.requested()
    monkeypatch.setenv(extra_work.ENV, "0.2")
    rec = bench(Step("ViT-Nano/4", batch_size=2), threads=1, warmup_steps=1,
                stop=StopRule(min_steps=3, min_seconds=0.0, max_seconds=2.0))
    info = rec.raw["test_extra_work"]
    assert info["fraction"] == 0.2 and info["units"] >= 1
    # the work is sized to the fraction of the sizing step (whole units, at least one)
    assert info["units"] * info["unit_s"] == pytest.approx(0.2 * info["sized_on_step_s"], abs=info["unit_s"])
    monkeypatch.delenv(extra_work.ENV)
    assert "test_extra_work" not in bench(Step("ViT-Nano/4", batch_size=2), threads=1, warmup_steps=1,
                                          stop=StopRule(min_steps=3, min_seconds=0.0, max_seconds=2.0)).raw


# ------------------------------------------------------------------------------------------------ end to end
TINY = """name: tiny-ab
repeats: 1
defaults: {device: cpu, threads: 1, batch_size: 2, warmup_steps: 1, min_steps: 3, min_seconds: 0.05,
           max_seconds: 1}
axes: {model: [ViT-Nano/4], task: [infer]}
"""


@pytest.mark.slow
def test_ab_head_against_itself_end_to_end(tmp_path):
    """The real thing on this repository: HEAD's code (git archive) against the working tree, two pairs."""
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")
    study = tmp_path / "tiny.yaml"
    study.write_text(TINY)
    res = runner.invoke(app, ["ab", "HEAD", "--repo", str(root), "--allow-same", "--study", str(study),
                              "--min-pairs", "2", "--max-pairs", "2", "--format", "md",
                              "--results", str(tmp_path / "r")])
    assert res.exit_code in (0, 1, 3), res.output
    assert "ViT-Nano/4 infer" in res.output and "paired: 2 round pairs" in res.output
    from vitbench.compare.schedule import legs_of

    pairs = sorted((tmp_path / "r").glob("*/pair0*"))  # 2 sides x 2 pairs, each leg with its rows
    assert len(pairs) == 4 and all((leg / "results.jsonl").is_file() for p in pairs for leg in legs_of(p)), pairs


def test_refs_environment_is_this_one_when_its_pins_are_a_subset(tmp_path, monkeypatch):
    """REF's side shares this interpreter when every pin of its lock is this lock's (identical, or packages
    added since); a pin that differs means a virtualenv from REF's own lock (its build stubbed to fail here)."""
    root, base = tmp_path / "root", tmp_path / "base"
    (root / "vitbench").mkdir(parents=True)
    (base / "src" / "vitbench").mkdir(parents=True)
    lock = "# c\nnumpy==2.0\ntorch==2.15.0\n"
    (root / sides_mod.LOCK).write_text(lock)
    (base / "src" / sides_mod.LOCK).write_text(lock)
    exe, why = sides_mod._environment(root, "a" * 40, base)
    assert exe == sys.executable and "identical" in why
    (root / sides_mod.LOCK).write_text(lock + "onnxruntime==1.32.0\n")
    exe, why = sides_mod._environment(root, "a" * 40, base)
    assert exe == sys.executable and "subset" in why and "1 packages added" in why
    (root / sides_mod.LOCK).write_text(lock.replace("2.0", "2.1"))
    monkeypatch.setattr(sides_mod.subprocess, "run",
                        lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", "no network"))
    with pytest.raises(ConfigError, match="differs from the working tree's"):
        sides_mod._environment(root, "a" * 40, base)


def test_fewer_pairs_than_min_pairs_decide_nothing():
    """A budget that ends before `min_pairs` leaves every trial inconclusive, however narrow its interval (an
    A/A run at load 22 ended after 3 pairs with R-Micro infer 1.20 [1.06, 1.36]: identical code 'improved')."""
    rule = Rule(threshold=0.05, min_pairs=4)
    tight = [1.20, 1.21, 1.22]
    (p, d), = rule.decisions({"t": tight}).values()
    assert p.ci_low > 1.05 and d is Decision.INCONCLUSIVE
    (p, d), = rule.decisions({"t": tight + [1.2]}).values()
    assert d is not Decision.INCONCLUSIVE  # from min_pairs on, the interval decides


def test_the_gates_check_their_shared_flags_in_one_place():
    """compare takes --threshold 0 (any change its interval excludes), ab and bisect refuse it (their sequential
    rule stops on "no change" only inside a margin); --confidence in [0.5, 1) everywhere, NaN refused (0.001 gave
    a "0% CI" regression, exit 1). A threshold and confidence are shown as set (0.025: "2.5%", not "2%")."""
    import math

    import pytest

    from vitbench.compare.decide import check_gate
    from vitbench.compare.paired import Rule
    from vitbench.errors import ConfigError

    check_gate(0.0, 0.95, zero_threshold=True)
    for args in ((0.0, 0.95, False), (math.nan, 0.95, True), (1.0, 0.95, True), (0.05, math.nan, True)):
        with pytest.raises(ConfigError, match="--threshold|--confidence"):
            check_gate(*args)
    with pytest.raises(ConfigError, match=r"--threshold must be a fraction in \(0, 1\)"):
        Rule(threshold=0.0)
    with pytest.raises(ConfigError, match=r"--confidence must be in \[0.5, 1\), e.g. 0.95; got 0.001"):
        check_gate(0.05, 0.001, zero_threshold=True)
    check_gate(0.05, 0.5, zero_threshold=True)
    from vitbench.numfmt import percent

    assert [percent(x) for x in (0.025, 0.05, 0.9999, 0.95)] == ["2.5%", "5%", "99.99%", "95%"]


def test_pairs_json_that_vitbench_never_writes_is_no_reading(tmp_path):
    """pairs.json is ab's own file, but history reads it later: nested past json's depth was a traceback
    (RecursionError), and a load of -5 counted the pair quiet; either is no reading (the rows decide)."""
    (tmp_path / ab_mod.PAIRS_FILE).write_text("[" * 100_000 + "]" * 100_000)
    assert ab_mod.pair_loads(tmp_path) == {}
    (tmp_path / ab_mod.PAIRS_FILE).write_text(json.dumps({"pair01": -5, "pair02": True, "pair03": 0.2}))
    assert ab_mod.pair_loads(tmp_path) == {"pair01": None, "pair02": None, "pair03": 0.2}
