"""`vitbench ab REF`: a baseline git ref and the working tree measured in the same job, interleaved, each side
by its own code in its own environment (vitbench.compare.sides), decided on paired ratios
(vitbench.compare.paired).

A pair is what the schedule runs (vitbench.compare.schedule): under `turns` (the default) two legs at once, one on
each half of the CPUs, in each of which both sides take turns window by window on the same CPU; under `together`
two legs, both sides at once, each pinned to its own half of the CPUs and the halves swapped in the second leg, so
that neither the moment nor the core favours a side; the side started first alternates from pair to pair, so that
drift cancels over pairs. A side's value in a pair is the geometric mean over its legs of its statistic (the best,
the 90th-percentile or the median step) in each leg: the ratio of two sides' values is then the geometric mean of
the legs' ratios, in which a core's own speed cancels (docs/compare.md, "Cores that differ").
"""

from __future__ import annotations

import contextlib
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from vitbench.choices import Choice
from vitbench.compare.comparison import Comparison, env_differences, load_records
from vitbench.compare.calibrations import metric_samples
from vitbench.compare.decide import Decision, Row
from vitbench.compare.match import DEFAULT_IGNORE, Trial, group, labels, why_unmatched
from vitbench.compare.paired import Rule, verdict
from vitbench.compare.schedule import DEFAULT_SCHEDULE, Schedule, legs_of
from vitbench.compare.sides import (LOCK, Running, Side, _environment, _git, checkout, commit_side,  # noqa: F401
                                    repo_root, resolve_ref, study_in)
from vitbench.cpus import TreeMeter
from vitbench.env import short_sha
from vitbench.errors import ConfigError
from vitbench.measure.extra_work import ENV as EXTRA_WORK_ENV
from vitbench.measure.load import BUSY_CORES, OTHER_LOAD, busy
from vitbench.measure.timing import quantile
from vitbench.numfmt import percent
from vitbench.paths import make_dir
from vitbench.record import Record, Status, finite_number
from vitbench.store import SIDES_FILE  # in --results DIR: each side's commit and description

DEFAULT_STUDY = "studies/ci.yaml"
DEFAULT_BUDGET_S = 480.0  # fits .ci/run's speed check in ~10 min on a 2-core machine (docs/compare.md)
METRIC = "img_per_s"  # the gate decides on throughput (the bench task's declared headline metric)
# in --results DIR: per pair, the cores other processes used beside the gate's (TreeMeter), as the gate read them:
# `history append` leaves out the pairs the gate left out (under `turns` a row's own meter cannot see that load)
PAIRS_FILE = "pairs.json"


def pair_loads(root: Path) -> dict[str, float | None]:
    """PAIRS_FILE's load per pair directory name ({} where the file is absent or unreadable: the rows' own)."""
    try:
        data = json.loads((root / PAIRS_FILE).read_text())
    except (OSError, ValueError, RecursionError):  # RecursionError: nested past json's depth (an edited file)
        return {}
    # a load is what TreeMeter reads, a number >= 0; anything else is no reading (the rows decide, as in the gate)
    return {str(k): (v if finite_number(v) and v >= 0 else None) for k, v in data.items()} \
        if isinstance(data, dict) else {}


class Statistic(Choice):
    """A trial's value in one round, from its per-step img/s samples."""

    BEST = "best"  # the fastest step: other load only ever makes a step slower (timeit's rule)
    P90 = "p90"  # the 90th percentile of the steps' img/s: the fast end, as `best`, but not one lucky step's
    MEDIAN = "median"  # the typical step: robust to the odd slow step, not to a neighbour busy half the round

    def of(self, xs: list[float]) -> float:
        if self is Statistic.BEST:
            return max(xs)
        if self is Statistic.P90:
            return quantile(sorted(xs), 0.9)
        return statistics.median(xs)


# p90: 10 quiet A/A runs with trials in step (70 pairs) read again: the pair noise within a run at or below the
# best step's on every trial; between runs R-Micro infer's 3-6x lower (a slow spell over most of a short trial
# leaves a side one lone fast step), the others' within 0.008 of it (docs/compare.md, "Which step statistic")
DEFAULT_STATISTIC = Statistic.P90


def round_values(path: Path) -> tuple[dict[str, tuple[Trial, list[float]]], list[Record]]:
    """One round's trials: match key -> (trial, per-step img/s samples of its ok record; [] if not ok)."""
    from vitbench.compare.comparison import metrics
    from vitbench.tidy import select

    metric = metrics()[METRIC]
    records = load_records(path)
    out = {}
    for key, trial in group(select(records), DEFAULT_IGNORE).items():
        out[key] = (trial, [x for r in trial.ok for x in (metric_samples(r, metric) or ())])
    return out, records


def side_value(statistic: Statistic, legs: list[list[float]]) -> float | None:
    """A side's value in one pair: the geometric mean over its legs of `statistic` of each leg's steps (so the
    ratio of two sides' values is the geometric mean of the legs' ratios); None where a leg was not ok."""
    if not legs or not all(legs):
        return None
    return math.exp(statistics.fmean(math.log(statistic.of(xs)) for xs in legs))


@dataclass
class Pairs:
    """The rounds so far, reduced to what the decision needs."""

    statistic: Statistic = DEFAULT_STATISTIC
    own_load: float = DEFAULT_SCHEDULE.own_load  # cores of the gate's own in every row's other_load_cores
    order: list[str] = field(default_factory=list)  # "baseline first" / "current first", per pair
    seconds: list[float] = field(default_factory=list)
    filled: list[float] = field(default_factory=list)  # seconds a filler held a finished side's core (together)
    # key -> per pair (baseline, current), each a list over the pair's legs of per-step img/s samples
    samples: dict[str, list[tuple[list[list[float]], list[list[float]]]]] = field(default_factory=dict)
    trials: dict[str, tuple] = field(default_factory=dict)  # key -> (baseline Trial, current Trial)
    records: tuple[list[Record], list[Record]] = field(default_factory=lambda: ([], []))
    # per pair, the cores other processes used beside the gate's: measured around the pair by the gate
    # (vitbench.cpus.TreeMeter), or for a pair read back from its directories the median over its ok rows of
    # other_load_cores less own_load; None where nothing recorded it
    others: list[float | None] = field(default_factory=list)

    def add(self, b_pair: Path, c_pair: Path, others: float | None = None) -> None:
        """One pair: each side's pair directory, its legs inside (vitbench.compare.schedule.legs_of); `others`:
        the cores other processes used while the gate ran it (vitbench.cpus.TreeMeter), else the rows' own
        reading less the schedule's own load."""
        sides, loads = [], []
        for pair, recs in ((b_pair, self.records[0]), (c_pair, self.records[1])):
            legs = [round_values(leg) for leg in legs_of(pair)]
            for _, leg_records in legs:
                recs.extend(leg_records)
                loads += [r.metrics.get(OTHER_LOAD) for r in leg_records if r.status is Status.OK]
            sides.append([values for values, _ in legs])
        known = [x for x in loads if finite_number(x)]
        if others is None:
            others = statistics.median(known) - self.own_load if known else None
        self.others.append(others)
        # every trial gets an entry for every pair, so that its n-th entry is the n-th pair's (busy(), others): a
        # trial absent from a pair (no row on either side) had its later pairs read with an earlier pair's load,
        # a busy pair's ratio decided on as a quiet one's; absent, a side's legs hold no samples (not ok)
        for key in set(self.samples) | {k for legs in sides for values in legs for k in values}:
            b, c = ([values.get(key, (None, []))[1] for values in legs] for legs in sides)
            self.samples.setdefault(key, [([], [])] * (len(self.others) - 1)).append((b, c))
            bt, ct = (next((values[key][0] for values in legs if key in values), None) for legs in sides)
            old = self.trials.get(key, (None, None))
            self.trials[key] = (old[0] or bt, old[1] or ct)

    def values(self, key: str) -> list[tuple[float | None, float | None]]:
        """(baseline, current) value of each pair (None where a side was not ok in a leg)."""
        return [(side_value(self.statistic, b), side_value(self.statistic, c)) for b, c in self.samples[key]]

    def busy(self) -> list[bool]:
        """Per pair, whether other processes shared the machine: they used BUSY_CORES or more beyond the gate's
        own, or no row said (as `compare` assumes of a row without it)."""
        return [busy(x, missing=True) for x in self.others]

    def ratios(self) -> dict[str, list[float]]:
        """Per matched trial, current / baseline of every quiet pair where both sides were ok. A busy pair is left
        out of every decision: on a shared machine the pairs of one run are not independent draws (five A/A runs
        at load 6-11: one trial's ratios 0.55 0.40 0.58 0.58, a false regression; docs/compare.md, "A busy
        host"), so a run on a busy host ends inconclusive, saying why, instead of deciding on them."""
        busy = self.busy()
        return {k: [c / b for (b, c), x in zip(self.values(k), busy) if b and c and not x]
                for k in self.samples if self.matched(k)}

    def matched(self, key: str) -> bool:
        b, c = self.trials[key]
        return b is not None and c is not None

    def names(self) -> dict[str, str]:
        """Each matched trial's key -> its label in the table (model, task, and what tells them apart)."""
        keys = [k for k in self.trials if self.matched(k)]
        return dict(zip(keys, labels([self.trials[k][0].config for k in keys])))

    def failed(self, key: str) -> bool:
        """Ok on the baseline side in some pair where current was not."""
        return any(b and not c for b, c in self.values(key))

    def failed_keys(self) -> frozenset[str]:
        """The matched trials that `failed`: a decision's FAILED (vitbench.compare.paired.Rule.decisions)."""
        return frozenset(k for k in self.trials if self.matched(k) and self.failed(k))

    def steps(self, key: str, pairs: Collection[int] | None = None) -> tuple[int, int]:
        """The timed steps behind each side's values, over every leg of the pairs numbered `pairs` (0-based;
        None: every pair)."""
        chosen = [pair for n, pair in enumerate(self.samples[key]) if pairs is None or n in pairs]
        return tuple(sum(len(xs) for pair in chosen for xs in pair[i]) for i in (0, 1))


def sides_shown(vals: list[tuple[float | None, float | None]], busy: list[bool]
                ) -> tuple[float | None, float | None, list[int], str]:
    """(baseline, current, the pairs they are over, what they are) as the table shows a trial's sides, from its
    pair values (Pairs.values) and each pair's Pairs.busy: over the pairs its ratio is over (quiet, both sides
    ok), each the geometric mean of the side's pair values, so that current / baseline is the ratio column; where
    no such pair exists, over the busy pairs where both were ok, said to be in no decision; else none. Never a
    mean over quiet and busy pairs together: the columns had averaged every pair, busy ones included, and did not
    divide to the ratio beside them."""
    both = [n for n, ((b, c), x) in enumerate(zip(vals, busy)) if b and c]
    quiet = [n for n in both if not busy[n]]
    used = quiet or both
    if not used:
        return None, None, [], ""
    b, c = (math.exp(statistics.fmean(math.log(vals[n][i]) for n in used)) for i in (0, 1))
    many = f"geometric mean of {len(used)}" if len(used) > 1 else "1"
    if not quiet:
        return b, c, used, f"{many} busy pair{'s' * (len(used) > 1)}, in no decision"
    n_busy = sum(x for _, x in zip(vals, busy))
    not_ok = len(vals) - len(quiet) - n_busy  # quiet pairs where a side was not ok
    left = [f"{n_busy} busy left out" if n_busy else "",
            f"{not_ok} with a side not ok left out" if not_ok else ""]
    return b, c, used, "; ".join(filter(None, [f"{many} quiet pair{'s' * (len(used) > 1)}", *left]))


def rows(pairs: Pairs, rule: Rule) -> list[Row]:
    """One Row per matched trial: the paired ratio, its interval and the decision (failed beats all)."""
    from vitbench.compare.comparison import metrics

    md = metrics()[METRIC]
    names = pairs.names()
    decided = rule.decisions(pairs.ratios(), pairs.failed_keys())
    out, busy = [], pairs.busy()
    for k in names:
        p, d = decided[k]
        vals = pairs.values(k)
        base, cur, shown, what = sides_shown(vals, busy)
        note = "pairs " + " ".join(f"{r:.3f}" for r in p.ratios) if p.ratios else "no pair to decide on"
        lost = [sum(1 for v in side if not v) for side in zip(*vals)] if vals else [0, 0]
        if d is not Decision.FAILED and any(lost):  # not ok on REF (or on both sides): no ratio, and no FAILED
            note = (f"not ok in {lost[0]} of {len(vals)} pair(s) on the baseline, in {lost[1]} on current (the "
                    "rounds' rows say why, kept with --results DIR); " + note)
        if d is Decision.FAILED:
            note = f"current not ok in {sum(1 for b, c in vals if b and not c)} round(s); " + note
        elif d is Decision.INCONCLUSIVE and len(p.ratios) < rule.min_pairs:
            n_busy = sum(busy)
            note = (f"{len(p.ratios)} of the {rule.min_pairs} pairs a decision needs (--min-pairs)"
                    + (f", {n_busy} busy pair(s) left out" if n_busy else "") + "; " + note)
        elif d is Decision.INCONCLUSIVE:
            note = f"interval contains {1 - rule.threshold:.2f}: more pairs needed; " + note
        out.append(Row(names[k], md.name, md.unit, md.higher_is_better, d,
                       baseline=base, current=cur, ratio=p.ratio, ci_low=p.ci_low, ci_high=p.ci_high,
                       repeats=(len(shown), len(shown)), samples=pairs.steps(k, shown), note=note,
                       shown_as=(what, what),
                       method=f"paired: {len(p.ratios)} round pairs, {pairs.statistic.value} step"))
    return out


@dataclass
class ABResult:
    comparison: Comparison
    verdict: Decision
    pairs: int
    elapsed_s: float
    stopped: str
    rounds: Pairs | None = None  # the pairs behind it (bisect reads each trial's ratios by key)

    @property
    def exit_code(self) -> int:
        return self.comparison.exit_code


def run_ab(ref: str, *, repo: str | Path = ".", study: str = DEFAULT_STUDY, baseline_study: str | None = None,
           rule: Rule = Rule(), budget_s: float = DEFAULT_BUDGET_S, results: str | Path | None = None,
           extra_work: float | None = None, allow_same: bool = False, schedule: Schedule = DEFAULT_SCHEDULE,
           statistic: Statistic = DEFAULT_STATISTIC,
           progress: Callable[[str], None] = lambda s: None) -> ABResult:
    """Measure REF (baseline) against the working tree (current) in interleaved round pairs until `rule` stops
    or `budget_s` is spent. `results`: keep the rounds there (default: a temporary directory, removed).
    `extra_work`: test only, current's steps get that fraction of extra work (vitbench.measure.extra_work).
    Raises ConfigError for bad input (exit 2)."""
    t_start = time.monotonic()
    check_budget(budget_s)
    root = repo_root(repo)
    sha = resolve_ref(root, ref)
    head = _git(root, "rev-parse", "HEAD")
    dirty = bool(_git(root, "status", "--porcelain", "--untracked-files=no"))
    if sha == head and not dirty and not extra_work and not allow_same:
        raise ConfigError(f"REF {ref!r} is {short_sha(sha)}, the checked-out commit itself, with no uncommitted "
                          "change: this would compare a commit with itself (for an A/A noise check, --allow-same)")
    cur_study = study_in(root, study, f"the working tree {root}")
    if not cur_study.is_file():
        raise ConfigError(f"--study {study}: no such file in the working tree {root}")
    # the user's path as typed, from where they typed it: each side's sweep runs in its own tree (a relative
    # --results went into the baseline's temporary checkout, removed with it, and the current side's rounds into
    # the repository)
    out_root = Path(results).expanduser().absolute() if results is not None else None
    if out_root is not None and out_root.exists() and any(out_root.iterdir()):
        raise ConfigError(f"--results {out_root}: exists and is not empty (rounds are never mixed with others)")
    with checkout(root, sha) as base:
        baseline = commit_side("baseline", ref, root, sha, base, baseline_study or study,
                               "give its own study file with --baseline-study PATH (relative to REF's tree, or "
                               "absolute)")
        changes = " + uncommitted changes" if dirty else ""
        current = Side("current", f"working tree {root} at {short_sha(head)}{changes}",
                       root, cur_study, sys.executable, "this interpreter",
                       {EXTRA_WORK_ENV: f"{extra_work:g}"} if extra_work else {},
                       commit=head + ("-dirty" if dirty else ""))
        return measure((baseline, current), baseline.environment,
                       study_line(baseline_study or study, study), rule=rule,
                       budget_s=budget_s, t_start=t_start, results=out_root, schedule=schedule,
                       statistic=statistic, progress=progress, extra_work=extra_work)


def study_line(baseline: str | Path, current: str | Path) -> str:
    """The context's `study` line: a relative path is read in each side's tree (its own copy), an absolute one is
    one file whichever side runs it (sides.study_in). It said "each side's own copy" of an absolute path too."""
    def whose(path: str | Path, side: str) -> str:
        return "a file outside the trees" if Path(path).is_absolute() else f"{side}'s own copy"
    if str(baseline) == str(current) and Path(current).is_absolute():
        return f"{current} (one file outside the trees: both sides run it)"
    if not Path(baseline).is_absolute() and not Path(current).is_absolute():
        return f"baseline {baseline}, current {current} (each side's own copy)"
    return (f"baseline {baseline} ({whose(baseline, 'REF')}), "
            f"current {current} ({whose(current, 'the working tree')})")


def check_budget(budget_s: float) -> None:
    """ConfigError unless `budget_s` is a positive, finite number of seconds (--budget-s)."""
    if not (budget_s > 0) or budget_s != budget_s or budget_s == float("inf"):
        raise ConfigError(f"--budget-s must be a positive number of seconds, got {budget_s}")



def measure(sides: tuple[Side, Side], environment: str, study_line: str, *, rule: Rule, budget_s: float,
            t_start: float, results: Path | None = None, schedule: Schedule = DEFAULT_SCHEDULE,
            statistic: Statistic = DEFAULT_STATISTIC, progress: Callable[[str], None] = lambda s: None,
            extra_work: float | None = None) -> ABResult:
    """The A/B of two prepared sides (baseline, current): round pairs until `rule` stops or `budget_s` (counted
    from `t_start`, time.monotonic) is spent, into `results` (default: a temporary directory, removed), and the
    Comparison with its context lines (`environment`, `study_line`: how each side got them)."""
    schedule, fallback = schedule.for_sides(sides)
    if fallback:
        progress(fallback)
    with contextlib.ExitStack() as stack:
        out_root = results
        if out_root is None:
            out_root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="vitbench-ab-rounds-")))
        if results is not None:  # which commit each side ran (a side from `git archive` records none itself)
            make_dir((out_root / SIDES_FILE).parent, "--results")
            (out_root / SIDES_FILE).write_text(json.dumps({s.name: {"commit": s.commit, "describe": s.describe}
                                                           for s in sides}, indent=1) + "\n")
        pairs, stopped = _loop(sides, rule, budget_s, t_start, out_root, schedule, statistic, progress)
    elapsed = time.monotonic() - t_start
    table = rows(pairs, rule)
    if not table:
        raise ConfigError(_unmatched(pairs))
    v = verdict([r.decision for k, r in zip(pairs.names(), table) if rule.counts(k)])
    b_recs, c_recs = pairs.records
    context = [("baseline", sides[0].describe), ("current", sides[1].describe), ("environment", environment),
               ("study", study_line),
               ("rounds", f"{len(pairs.order)} pairs, {schedule.describe()} (the side started first alternated: "
                          f"{pairs.order.count('baseline first')} baseline first); a pair's value: each side's "
                          f"{pairs.statistic.value} step in each leg; {elapsed:.0f} s in all, budget {budget_s:.0f} s" +
                          (f"; a filler held the core of the side that ended first for "
                           f"{statistics.median(pairs.filled):.1f} s a pair (median)"
                           if schedule is not Schedule.ALTERNATE and any(pairs.filled) else "")),
               ("rule", f"paired t-interval ({percent(rule.confidence)}) on the mean log-ratio; threshold "
                        f"{percent(rule.threshold)}; at least {rule.min_pairs} pairs" +
                        (f", at most {rule.max_pairs}" if rule.max_pairs else "")),
               *([("schedule", fallback)] if fallback else []),
               ("host", _host_line(pairs)),
               ("stopped", stopped)]
    if extra_work:
        context.append(("self-test", f"current's steps carry {extra_work:.0%} extra work (${EXTRA_WORK_ENV})"))
    unmatched = [(pairs.trials[k][0] or pairs.trials[k][1]) for k in pairs.trials if not pairs.matched(k)]
    cmp = Comparison(rows=table, unmatched_baseline=[], unmatched_current=[],
                     # each side's commit is the context's (`git archive`'s side records none: an A/A listed
                     # git_sha None against the current's as a difference of the environments)
                     env_diff=[d for d in env_differences(b_recs, c_recs) if d[0] != "git_sha"],
                     threshold=rule.threshold,
                     confidence=rule.confidence, normalized=False, metrics=(METRIC,),
                     warnings=[f"not compared (on one side only): {t.config.get('model')} {t.config.get('task')}"
                               for t in unmatched], context=context)
    return ABResult(cmp, v, len(pairs.order), elapsed, stopped, pairs)


def _host_line(pairs: Pairs) -> str:
    """How busy the machine was beyond the gate's own processes, and which pairs the decision left out."""
    known = [x for x in pairs.others if x is not None]
    busy = sum(pairs.busy())
    load = f"other processes used a median {statistics.median(known):.2f} cores beside the gate's" if known \
        else "no row recorded the other load"
    return (f"{load}; {busy} of {len(pairs.others)} pairs busy (>= {BUSY_CORES:g} cores, or not recorded) and left "
            "out of every decision" if busy else f"{load}; every pair quiet (< {BUSY_CORES:g} cores)")


def _loop(sides: tuple[Side, Side], rule: Rule, budget_s: float, t_start: float, out_root: Path,
          schedule: Schedule, statistic: Statistic, progress: Callable[[str], None]) -> tuple[Pairs, str]:
    pairs = Pairs(statistic, own_load=schedule.own_load)
    loads: dict[str, float | None] = {}  # PAIRS_FILE
    n = 0
    while True:
        spent = time.monotonic() - t_start
        if pairs.seconds and spent + statistics.fmean(pairs.seconds) > budget_s:
            return pairs, (f"time budget: another pair (~{statistics.fmean(pairs.seconds):.0f} s) would pass "
                           f"--budget-s {budget_s:.0f} after {n} pairs")
        order = sides if n % 2 == 0 else sides[::-1]
        t0 = time.monotonic()
        paths = {side.name: out_root / side.name / f"pair{n + 1:02d}" for side in sides}
        with TreeMeter() as gate:  # others' load beside every process of the gate's (a row sees its own only)
            pairs.filled.append(schedule.run(order, paths))
        pairs.add(paths["baseline"], paths["current"], gate.other_cores)
        loads[paths["baseline"].name] = gate.other_cores
        tmp = out_root / f".{PAIRS_FILE}.tmp"
        tmp.write_text(json.dumps(loads, indent=1) + "\n")
        tmp.replace(out_root / PAIRS_FILE)
        pairs.order.append(f"{order[0].name} first")
        pairs.seconds.append(time.monotonic() - t0)
        n += 1
        if not any(pairs.matched(k) for k in pairs.trials):
            raise ConfigError(_unmatched(pairs))
        decided = rule.decisions(pairs.ratios())
        shown = "; ".join(
            f"{pairs.trials[k][0].config.get('model')} {pairs.trials[k][0].config.get('task')} "
            f"{p.ratio:.3f}" + (f" [{p.ci_low:.3f}, {p.ci_high:.3f}]" if p.ci_low else "") + f" {d.value}"
            for k, (p, d) in decided.items() if p.ratio)
        if pairs.busy()[-1]:  # its ratios are in no decision: the line ended at its colon, saying nothing
            shown = (f"{shown}; " if shown else "") + (f"busy (others' load >= {BUSY_CORES:g} cores, or not "
                                                       "recorded): this pair left out")
        progress(f"pair {n} ({order[0].name} first, {pairs.seconds[-1]:.0f} s): {shown}")
        if any(pairs.failed(k) for k in pairs.trials if pairs.matched(k)):
            return pairs, f"a trial ok on the baseline failed on current (pair {n})"
        if rule.done(pairs.ratios(), n):
            if rule.max_pairs is not None and n >= rule.max_pairs:
                return pairs, f"--max-pairs {rule.max_pairs} reached"
            return pairs, f"decided after {n} pairs"


def _unmatched(pairs: Pairs) -> str:
    b = {k: t[0] for k, t in pairs.trials.items() if t[0] is not None}
    c = {k: t[1] for k, t in pairs.trials.items() if t[1] is not None}
    if not b or not c:
        return f"no measurement records on the {'baseline' if not b else 'current'} side (see the sweep logs)"
    k0 = next(iter(b))
    return (f"no trial of current matches a trial of the baseline (the sides' study files or measurement methods "
            f"differ): first baseline trial {b[k0].config.get('model')} {b[k0].config.get('task')}: "
            f"{why_unmatched(b[k0], c)}")
