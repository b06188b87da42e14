"""The A/B gate's decision: paired rounds, an interval on the mean log-ratio, and a sequential stopping rule.

One *pair* is a round of the baseline and a round of current measured on the same machine at once or back
to back (vitbench.compare.schedule; the side started first alternates between pairs, so that drift cancels over
pairs). A trial's value in a pair is the `--statistic` of its per-step img/s samples (vitbench.compare.ab's
Statistic: the 90th percentile by default, DEFAULT_STATISTIC; the best or the median step on request), the
geometric mean over the pair's legs; its pair ratio is current / baseline of those values. The rounds of a pair
share the machine's state, so the ratio divides most of the machine's noise out; the pairs are the independent
units, and a busy pair (others' load >= BUSY_CORES) is left out (vitbench.compare.ab.Pairs.ratios). The interval
is a Student-t interval on the mean log-ratio over pairs (a ratio's log is symmetric: 0.9 and 1/0.9 are as far
from 1), shown as ratios.

Per trial, with threshold t (higher-is-better metric):
  regression   the whole interval is below 1 - t  (confident: worse by more than t)
  no change    the whole interval is above 1 - t  (confident: not worse by more than t); improvement past 1 + t
  inconclusive the interval contains 1 - t        (not yet decidable: more pairs)
The sequential rule (`Rule.done`) looks after every pair from `min_pairs` on and stops at the first
regression, or when no trial is inconclusive; the budget ends it otherwise (inconclusive). A trial with fewer
than `min_pairs` pairs is inconclusive whatever its interval. Looking repeatedly
inflates the false-alarm rate of a fixed-n interval; the rates of this exact rule were measured by replaying real
rounds (benchmarks/bench_gate_power.py, docs/compare.md), and the defaults are the ones those numbers support.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from vitbench.compare.decide import DEFAULT_CONFIDENCE, DEFAULT_THRESHOLD, Decision, check_gate, decide
from vitbench.errors import ConfigError
from vitbench.stats import t_quantile

__all__ = ["DEFAULT_MIN_PAIRS", "Paired", "Rule", "TwoPoint", "between", "t_quantile", "verdict"]

# Defaults chosen from the measured power (docs/compare.md, "A/B gate: power").
DEFAULT_MIN_PAIRS = 4


@dataclass(frozen=True)
class Paired:
    """One trial's pair ratios (current / baseline) and their interval."""

    ratios: tuple[float, ...]
    ratio: float | None  # geometric mean of the pair ratios
    ci_low: float | None
    ci_high: float | None

    @classmethod
    def of(cls, ratios: Sequence[float], confidence: float) -> Paired:
        ratios = tuple(float(r) for r in ratios)
        if any(not (math.isfinite(r) and r > 0) for r in ratios):
            raise ValueError(f"pair ratios must be finite and positive, got {ratios}")
        n = len(ratios)
        if n == 0:
            return cls(ratios, None, None, None)
        logs = [math.log(r) for r in ratios]
        mean = sum(logs) / n
        if n == 1:
            return cls(ratios, math.exp(mean), None, None)
        sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
        half = t_quantile(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n)
        return cls(ratios, math.exp(mean), math.exp(mean - half), math.exp(mean + half))

    def decision(self, threshold: float) -> Decision:
        """The gates' one rule (decide.decide); fewer than two pairs is inconclusive (no interval)."""
        return decide(self.ci_low, self.ci_high, threshold, higher_is_better=True)


@dataclass(frozen=True)
class Rule:
    """The sequential rule: threshold, confidence, the pairs always measured, and the most pairs allowed."""

    threshold: float = DEFAULT_THRESHOLD
    confidence: float = DEFAULT_CONFIDENCE
    min_pairs: int = DEFAULT_MIN_PAIRS
    max_pairs: int | None = None  # None: only the time budget limits

    def __post_init__(self):
        check_gate(self.threshold, self.confidence, zero_threshold=False)
        if self.min_pairs < 2:
            raise ConfigError(f"--min-pairs must be >= 2 (an interval needs two pairs), got {self.min_pairs}")
        if self.max_pairs is not None and self.max_pairs < self.min_pairs:
            raise ConfigError(f"--max-pairs ({self.max_pairs}) must be >= --min-pairs ({self.min_pairs})")

    def decisions(self, per_trial: dict[str, Sequence[float]], failed: Collection[str] = frozenset()
                  ) -> dict[str, tuple[Paired, Decision]]:
        """Each trial's interval and decision; a trial in `failed` (not ok on current's side in some pair) is
        FAILED whatever its interval; fewer than `min_pairs` pairs (a budget that ended early) is inconclusive
        whatever its interval: the rule's rates were measured from `min_pairs` on, and three pairs at a busy
        host's noise gave an A/A "improvement" of 1.20 [1.06, 1.36] (docs/compare.md)."""
        out = {}
        for trial, ratios in per_trial.items():
            p = Paired.of(ratios, self.confidence)
            enough = len(p.ratios) >= self.min_pairs
            out[trial] = (p, Decision.FAILED if trial in failed else
                          self.decide(trial, p) if enough else Decision.INCONCLUSIVE)
        return out

    def decide(self, trial: str, p: Paired) -> Decision:
        """One trial's decision from enough pairs: against the threshold."""
        return p.decision(self.threshold)

    def done(self, per_trial: dict[str, Sequence[float]], pairs: int) -> bool:
        """Whether to stop after `pairs` pairs: at `max_pairs`, or from `min_pairs` on at the first regression
        or when no trial that counts (`counts`) is left inconclusive."""
        if self.max_pairs is not None and pairs >= self.max_pairs:
            return True
        if pairs < self.min_pairs:
            return False
        ds = [d for k, (_, d) in self.decisions(per_trial).items() if self.counts(k)]
        return Decision.REGRESSION in ds or Decision.INCONCLUSIVE not in ds

    def counts(self, trial: str) -> bool:
        """Whether `trial`'s decision bears on stopping and on the verdict (every trial's, for the gate)."""
        return True

    def replay(self, per_trial_pairs: Sequence[dict[str, float]]) -> tuple[Decision, int]:
        """The gate's verdict on a given sequence of pairs (each: trial -> ratio), as the live gate would reach
        it, and the pairs it used: for power measurements on recorded rounds."""
        acc: dict[str, list[float]] = {}
        n = 0
        for pair in per_trial_pairs:
            n += 1
            for trial, r in pair.items():
                acc.setdefault(trial, []).append(r)
            if self.done(acc, n):
                break
        return verdict([d for k, (_, d) in self.decisions(acc).items() if self.counts(k)]), n


@dataclass(frozen=True)
class TwoPoint(Rule):
    """Bisect's rule after its first step: GOOD against BAD measured each trial's slowdown `a` (the pair ratio's
    geometric mean); a commit between them is either as fast as GOOD (ratio 1) or as slow as BAD (ratio `a`), so
    each later step decides between these two measured points instead of against the threshold:

      bad (REGRESSION)   the interval excludes 1 from below (slower than GOOD) and does not lie wholly above `a`
      good (NO_CHANGE)   the interval lies wholly above `a` (faster than BAD) and does not exclude 1
      both excluded      the commit is neither: the speed changed in more than one commit; the nearer point in
                         log decides (below sqrt(a): bad) and the step's line shows the interval
      neither            inconclusive (more pairs)

    A commit as slow as BAD (a = 0.92, say) is decided as soon as its interval leaves 1, one as fast as GOOD as
    soon as it leaves 0.92, where the threshold rule needed a whole interval above 0.95 (a 7 % slowdown is
    decided "regression" only once its interval is under 0.95): on the R-Micro bisection of docs/compare.md that
    rule ended inconclusive at the budget with 0.937 [0.898, 0.977], which this one reads bad. The errors per look
    are the interval's one-sided 2.5 % (at 95 %); `a` is taken as measured (its own interval is not carried).
    Only the trials that regressed from GOOD to BAD (`against`) count; the others keep the threshold rule and are
    shown, but neither stop a step nor decide it."""

    against: tuple[tuple[str, float], ...] = ()  # (trial, BAD's ratio) for each trial that regressed

    def decide(self, trial: str, p: Paired) -> Decision:
        a = dict(self.against).get(trial)
        return super().decide(trial, p) if a is None else between(p, a)

    def counts(self, trial: str) -> bool:
        return trial in dict(self.against)


def between(p: Paired, a: float) -> Decision:
    """TwoPoint's decision for one trial's interval between GOOD (1) and BAD (`a` < 1)."""
    if p.ci_low is None or p.ci_high is None or p.ratio is None:
        return Decision.INCONCLUSIVE
    slower_than_good, faster_than_bad = p.ci_high < 1.0, p.ci_low > a
    if slower_than_good and faster_than_bad:
        return Decision.REGRESSION if p.ratio < math.sqrt(a) else Decision.NO_CHANGE
    if slower_than_good:
        return Decision.REGRESSION
    return Decision.NO_CHANGE if faster_than_bad else Decision.INCONCLUSIVE


def verdict(decisions: Sequence[Decision]) -> Decision:
    """The gate's one word: regression if any trial regressed or failed, else inconclusive if any is, else no
    change (improvements included)."""
    if any(d in (Decision.REGRESSION, Decision.FAILED) for d in decisions):
        return Decision.REGRESSION
    if any(d is Decision.INCONCLUSIVE for d in decisions):
        return Decision.INCONCLUSIVE
    return Decision.NO_CHANGE
