"""`vitbench bisect GOOD BAD`: the first commit between GOOD and BAD whose speed regressed against GOOD, each
step a `vitbench ab` run (vitbench.compare.ab: paired rounds, each side its own checkout and environment).

The commits are BAD's first-parent line back to GOOD (`git rev-list --first-parent GOOD..BAD`: a merge is
one step, as `git bisect --first-parent`). Every step measures GOOD (baseline) against one commit (current), so
each verdict is against the same reference:

1. GOOD against BAD, under the gate's threshold rule: a regression confirms there is something to find, and
   measures how slow BAD is, per trial that regressed (no change: exit 0, nothing to bisect);
2. binary search: each commit is decided between the two measured points, GOOD's speed and BAD's
   (vitbench.compare.paired.TwoPoint): a commit as slow as BAD is bad (the first bad one is it or before it), one
   as fast as GOOD is good (the first bad one is after it): ceil(log2(N)) steps for N commits after GOOD. Only
   the trials that regressed in step 1 count.

An inconclusive step (its interval holds both points when the step's budget ends) is never read as good or
bad: the bisection stops there, names the range it had narrowed the first bad commit to, and exits 3, as an
inconclusive `ab` does; rerun on that range (`vitbench bisect LO HI`) with a larger --budget-s. Where step 1
itself was inconclusive, BAD was never shown slower and nothing was narrowed (`bad_unconfirmed`). Exit codes as
`ab`'s: 1 = a regression, located (the first bad commit); 0 = BAD did not regress against GOOD; 2 = bad input;
3 = a step was inconclusive.
"""

from __future__ import annotations

import contextlib
import math
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from vitbench.compare.ab import DEFAULT_BUDGET_S, DEFAULT_STUDY, checkout, check_budget, commit_side, measure, \
    repo_root, resolve_ref
from vitbench.compare.comparison import EXIT_INCONCLUSIVE, EXIT_NO_CHANGE, EXIT_REGRESSION as EXIT_FOUND
from vitbench.compare.sides import _git, resolve_commit
from vitbench.compare.decide import Decision
from vitbench.compare.paired import Rule, TwoPoint, verdict
from vitbench.env import short_sha
from vitbench.errors import ConfigError, clip


@dataclass(frozen=True)
class Step:
    """One `ab` run: GOOD (baseline) against `commit` (current)."""

    commit: str  # full SHA
    subject: str
    verdict: Decision  # regression (bad) | no change (good) | inconclusive, over the trials that count
    detail: str  # the trials' ratios and intervals, one line
    elapsed_s: float
    reading: str = ""  # the verdict as the search reads it: BAD's as the gate words it, later ones good / bad


@dataclass(frozen=True)
class Measured:
    """What one step measured: per trial (its key) the pair ratios commit / GOOD, the trials not ok on the
    commit's side, each trial's label, and how it went (pairs, seconds)."""

    ratios: dict[str, list[float]]
    failed: frozenset[str] = frozenset()
    names: dict[str, str] = field(default_factory=dict)
    how: str = ""


# A step: (GOOD's SHA, the commit's SHA, the rule that stops it) -> what it measured. The real one runs `ab`
# under that rule; tests pass their own (fast, from a marker in the commit).
Measure = Callable[[str, str, Rule], Measured]


@dataclass
class BisectResult:
    good: str
    bad: str
    commits: list[str]  # GOOD's descendants on BAD's first-parent line, oldest first, BAD last
    steps: list[Step] = field(default_factory=list)
    first_bad: str | None = None
    range: tuple[str, str] | None = None  # (last known good, first known bad) where a step was inconclusive
    elapsed_s: float = 0.0

    @property
    def exit_code(self) -> int:
        if self.first_bad is not None:
            return EXIT_FOUND
        return EXIT_INCONCLUSIVE if self.range is not None else EXIT_NO_CHANGE

    @property
    def bad_unconfirmed(self) -> bool:
        """Step 1 (BAD against GOOD) was inconclusive: BAD was never shown slower, nothing was narrowed (the
        range is all of GOOD..BAD only because nothing was learnt)."""
        return self.range is not None and len(self.steps) == 1

    @property
    def max_steps(self) -> int:
        """The steps a bisection of these commits takes at most: the check of BAD, then ceil(log2(N))."""
        return 1 + math.ceil(math.log2(len(self.commits))) if len(self.commits) > 1 else 1


def _resolve(root: Path, name: str, ref: str) -> str:
    try:
        return resolve_ref(root, ref)
    except ConfigError as e:
        raise ConfigError(str(e).replace("REF ", f"{name} ", 1)) from None


def commits_between(root: Path, good: str, bad: str) -> list[str]:
    """GOOD's descendants on BAD's first-parent line, oldest first (BAD last); ConfigError unless GOOD is an
    ancestor of BAD on that line."""
    if good == bad:
        raise ConfigError(f"GOOD and BAD are the same commit {short_sha(good)}: nothing to bisect")
    first = _git(root, "rev-list", "--first-parent", "--reverse", f"{good}..{bad}").split()
    parent = (resolve_commit(f"{first[0]}^", root) or "") if first else ""
    if parent != good:
        raise ConfigError(f"GOOD {short_sha(good)} is not an ancestor of BAD {short_sha(bad)} on BAD's "
                          "first-parent line (give GOOD older than BAD, e.g. GOOD = the last release, BAD = HEAD)")
    return first


def search(good: str, commits: list[str], step: Measure, rule: Rule = Rule(),
           subject: Callable[[str], str] = lambda c: "", progress: Callable[[str], None] = lambda s: None
           ) -> BisectResult:
    """The bisection over `commits` (oldest first, BAD last) with `step` measuring GOOD against one commit: BAD
    under `rule`, every later commit under the TwoPoint rule that BAD's measurement makes (module docstring)."""
    t0 = time.monotonic()
    res = BisectResult(good, commits[-1], commits)

    def run(i: int, rule: Rule) -> tuple[Decision, dict]:
        t = time.monotonic()
        m = step(good, commits[i], rule)
        decided = rule.decisions(m.ratios, m.failed)
        v = verdict([d for k, (_, d) in decided.items() if rule.counts(k)] or [Decision.INCONCLUSIVE])
        detail = "; ".join(_trial_line(m.names.get(k, k[:12]), p, d, rule.counts(k))
                           for k, (p, d) in decided.items())
        detail = f"{m.how}: {detail}" if m.how else detail
        res.steps.append(Step(commits[i], subject(commits[i]), v, detail, time.monotonic() - t,
                              _word(v, i == len(commits) - 1)))
        progress(f"step {len(res.steps)}: {short_sha(commits[i])} ({i + 1} of {len(commits)} after GOOD) "
                 f"{res.steps[-1].reading}: {detail}")
        return v, decided

    lo, hi = -1, len(commits) - 1  # commits[lo] good (-1: GOOD itself), commits[hi] bad
    first, decided = run(hi, rule)
    if first is Decision.INCONCLUSIVE:
        res.range = (good, commits[hi])
    # BAD's slowdown per trial that regressed: the point each later commit is held against. A trial that failed
    # on BAD's side with no ok pair is held against 0: a commit where it fails is bad, one where it runs good.
    two = TwoPoint(rule.threshold, rule.confidence, rule.min_pairs, rule.max_pairs,
                   against=tuple((k, p.ratio or 0.0) for k, (p, d) in decided.items()
                                 if d in (Decision.REGRESSION, Decision.FAILED)))
    while first is Decision.REGRESSION and hi - lo > 1:
        mid = (lo + hi) // 2
        v, _ = run(mid, two)
        if v is Decision.REGRESSION:
            hi = mid
        elif v is Decision.NO_CHANGE:
            lo = mid
        else:
            res.range = (commits[lo] if lo >= 0 else good, commits[hi])
            break
    else:
        if first is Decision.REGRESSION:
            res.first_bad = commits[hi]
    res.elapsed_s = time.monotonic() - t0
    return res


def _word(v: Decision, is_bad: bool) -> str:
    """A step's verdict as the search reads it (BAD's own step: as the gate words it)."""
    if is_bad:
        return v.value
    return {Decision.REGRESSION: "bad", Decision.NO_CHANGE: "good"}.get(v, v.value)


def _trial_line(name: str, p, d: Decision, counts: bool) -> str:
    interval = f" {p.ratio:.3f} [{p.ci_low:.3f}, {p.ci_high:.3f}]" if p.ci_low is not None else ""
    return f"{name}{interval} {d.value}" + ("" if counts else " (not counted: it did not regress on BAD)")


def ab_step(root: Path, study: str, budget_s: float, stack: contextlib.ExitStack,
            progress: Callable[[str], None]) -> Measure:
    """The real step: `vitbench ab` of GOOD against a commit, each from its own checkout (GOOD's made once and
    kept for the whole bisection), in its own environment, for at most `budget_s` seconds."""
    bases: dict[str, Path] = {}

    def step(good: str, sha: str, rule: Rule) -> Measured:
        t_start = time.monotonic()
        if good not in bases:
            bases[good] = stack.enter_context(checkout(root, good))
        hint = ("each commit runs its own copy of --study: give a study file every commit of the range has, or "
                "an absolute path")
        with checkout(root, sha) as base:
            sides = (commit_side("baseline", "GOOD", root, good, bases[good], study, hint),
                     commit_side("current", "step", root, sha, base, study, hint))
            env = (sides[0].environment if sides[0].environment == sides[1].environment else
                   f"baseline: {sides[0].environment}; current: {sides[1].environment}")
            res = measure(sides, env, f"{study}, each side's own copy", rule=rule, budget_s=budget_s,
                          t_start=t_start, progress=lambda s: progress(f"  {s}"))
        pairs = res.rounds
        return Measured(pairs.ratios(), pairs.failed_keys(), pairs.names(),
                        f"{res.pairs} pairs, {res.elapsed_s:.0f} s")

    return step


def run_bisect(good: str, bad: str, *, repo: str | Path = ".", study: str = DEFAULT_STUDY, rule: Rule = Rule(),
               budget_s: float = DEFAULT_BUDGET_S, step: Measure | None = None,
               progress: Callable[[str], None] = lambda s: None) -> BisectResult:
    """Bisect GOOD..BAD in `repo` (module docstring); `budget_s`: each step's `ab` budget; `step`: a stand-in
    for the `ab` step (tests). ConfigError (exit 2) for bad input, before anything is measured."""
    check_budget(budget_s)
    root = repo_root(repo)
    g, b = (_resolve(root, name, ref) for name, ref in (("GOOD", good), ("BAD", bad)))
    if not Path(study).is_absolute():
        for name, sha in (("GOOD", g), ("BAD", b)):
            if subprocess.run(["git", "-C", str(root), "cat-file", "-e", f"{sha}:{study}"],
                              capture_output=True).returncode:
                raise ConfigError(f"--study {clip(study, 200)}: not in {name}'s tree ({short_sha(sha)}); each "
                                  "commit runs its own copy: give a study file the whole range has, or an "
                                  "absolute path")
    elif not Path(study).is_file():
        raise ConfigError(f"--study {clip(study, 200)}: no such file")
    commits = commits_between(root, g, b)
    with contextlib.ExitStack() as stack:
        measure_step = step or ab_step(root, study, budget_s, stack, progress)
        return search(g, commits, measure_step, rule, lambda c: _git(root, "log", "-1", "--format=%s", c)[:80],
                      progress)
