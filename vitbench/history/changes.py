"""Change points of one series (log values, one per commit): where, how large, how sure, which commits.

Found by binary segmentation (Scott and Knott 1974; Vostrikova 1981) on a piecewise-constant mean (cost "l2"),
as the `ruptures` library implements it (Truong, Oudre and Vayatis 2020, "Selective review of offline change
point detection methods", Signal Processing 167; here in `binseg`, the same split gains, so that a segment may
be one point at either end of the series: see ENDS), with the penalty of the Schwarz information criterion for a
change in mean, PENALTY_PER_LOG_N x sigma^2 x log n (Yao 1988, "Estimating the number of change-points via
Schwarz' criterion", Statist. Probab. Lett. 6:181), sigma the series' own noise, estimated robustly from its
successive differences (a step moves one difference, not their median absolute deviation). Chosen over PELT
(Killick, Fearnhead and Eckley 2012: the exact optimum of the same penalised cost) and E-divisive (Matteson and
James 2014) by benchmarks/bench_history.py on its development draw (docs/history.md, "Which method"): as many
steps found, no more false changes, a fourteenth of PELT's CPU time.

Each change gets
- its size: the ratio of the geometric means of the segments after and before it;
- its confidence: 1 - the p-value of a permutation test of the two segments beside it, whose statistic is the
  largest split gain over every position (so the search for the best position is paid for: Antoch and Huskova
  2001, "Permutation tests in change point analysis", Statist. Probab. Lett. 53:37);
- its commit range: the positions whose split gain is within CHI2_1_95 x sigma^2 of the best, the profile
  likelihood set for the position (Hinkley 1970, "Inference about the change-point in a sequence of random
  variables", Biometrika 57:1; approximate: a change point is not a regular parameter), from the last commit
  before the first such position to the first commit of the last.

ENDS. A segment needs MIN_SIZE points, except at either end of the series, where one point is a segment: a step
at the newest commit has one point after it until the next commit is appended (and a step at the oldest, one
before it). With two points there too, binary segmentation put such a step one commit early (the newest two points
a segment, the older of them at full speed), sized by their mean, and no commit range it gave could hold the step
(x0.833 at 97 % for a step to x0.70, exit 1 naming two commits that ran at full speed). Inside the series one
point apart from both sides is one odd run, not a step, and stays no segment. Apache Otava (E-divisive, after
Hunter: Fleming et al. 2023) lets a segment be one point anywhere and judges a change by a t-test, the noise
pooled from both sides; here the confidence stays the permutation test, over the positions the search takes. For
a one-point segment that is a statement of rank: the newest of m points is the most extreme when nothing changed
with probability 1/m, so a change with one point after it reaches at best about 1 - 1/m, 1 - 2/m in a segment that
is the whole series (either end may hold the one point): 82 % at m = 11, 94 % at m = 40. So it is listed at once,
at the right commits and size, and reaches 95 % only in a segment of more than 20 commits (40 where it is the
whole series), or once the next commits are as slow. The noise that accounts for is whatever the series itself
has shown (an odd run anywhere in it lowers the rank), not a normal model fitted to the other points.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

METHOD = "binseg"  # chosen by benchmarks/bench_history.py (docs/history.md, "Which method")
PENALTY_PER_LOG_N = 2.0  # Schwarz (Yao 1988): 2 sigma^2 log n for a change in a Gaussian mean
MIN_SIZE = 2  # points a segment needs at least, but at either end of the series (one: ENDS, above)
CHI2_1_95 = 3.841  # the 95 % quantile of chi-square with one degree of freedom (the profile likelihood set)
PERMUTATIONS = 999  # the permutation test's resamples: p resolved to 0.001
MAD_TO_SD = 1.4826  # sd = 1.4826 x MAD for a normal sample (1 / Phi^-1(3/4))
SEED = 0  # the permutation test's generator: a series' confidence is the same every time it is read


@dataclass(frozen=True)
class Change:
    index: int  # the first point of the new segment
    size: float  # ratio after / before (geometric means of the segments beside it)
    confidence: float  # 1 - permutation p-value
    first: int  # the change lies after point first - 1 and at or before point `last` (profile likelihood set)
    last: int


def noise_sd(y: np.ndarray) -> float:
    """The series' noise sd, robust to its steps: the MAD of successive differences / sqrt 2 (a difference of
    two independent points has twice the variance), scaled to an sd. Where most successive differences are exactly
    0 (a largest batch, an allocator's deterministic peak) the MAD is 0, which would find no change at all (64
    six times, then 32 six times: none): there, the differences' plain sd / sqrt 2, an over-estimate that holds
    the steps too."""
    if len(y) < 3:
        return 0.0
    d = np.diff(y)
    mad = float(MAD_TO_SD * np.median(np.abs(d - np.median(d))) / math.sqrt(2))
    return mad if mad > 0 else float(np.std(d, ddof=1) / math.sqrt(2))


def _positions(m: int, head: bool, tail: bool) -> np.ndarray:
    """The split positions k of a segment of m points (k points before the split): MIN_SIZE .. m - MIN_SIZE, and 1
    where the segment is the series' head, m - 1 where it is its tail (ENDS)."""
    return np.arange(1 if head else MIN_SIZE, (m - 1 if tail else m - MIN_SIZE) + 1)


def _gains(seg: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Split gain at each position k of `seg` (rows: samples): k (m - k) / m (mean before - mean after)^2, the
    drop of the l2 cost from splitting there."""
    seg = np.atleast_2d(seg)
    m = seg.shape[1]
    c = np.cumsum(seg, axis=1)
    before = c[:, k - 1] / k
    after = (c[:, -1:] - c[:, k - 1]) / (m - k)
    return k * (m - k) / m * (before - after) ** 2


def _confidence(seg: np.ndarray, k: np.ndarray, rng: np.random.Generator) -> float:
    observed = _gains(seg, k)[0].max()
    perms = np.array([rng.permutation(seg) for _ in range(PERMUTATIONS)])
    exceed = int((_gains(perms, k).max(axis=1) >= observed - 1e-12 * abs(observed)).sum())
    return 1.0 - (exceed + 1) / (PERMUTATIONS + 1)


def binseg(y: np.ndarray, pen: float) -> list[int]:
    """Binary segmentation with the l2 cost, as ruptures.Binseg(model="l2", jump=1).predict(pen=pen) (the split
    of largest gain over every segment, while that gain exceeds `pen`), segments of one point at the series'
    ends only (ENDS): the segment starts found."""
    n, cuts = len(y), []
    while True:
        best = (0.0, 0)
        for lo, hi in zip([0, *cuts], [*cuts, n]):
            k = _positions(hi - lo, lo == 0, hi == n)
            if len(k):
                g = _gains(y[lo:hi], k)[0]
                if g.max() > best[0]:
                    best = (float(g.max()), lo + int(k[g.argmax()]))
        if not best[0] > pen:  # a NaN penalty ends the search too
            return cuts
        cuts = sorted([*cuts, best[1]])


def breakpoints(y: np.ndarray, sigma: float, method: str = METHOD,
                penalty_per_log_n: float = PENALTY_PER_LOG_N) -> list[int]:
    """The segment starts (indices > 0) found by `method` ('binseg': `binseg`, or 'pelt': ruptures' PELT, cost l2,
    segments of MIN_SIZE, as benchmarks/bench_history.py compared it)."""
    n = len(y)
    if method not in ("binseg", "pelt"):
        raise ValueError(f"method {method!r}: 'binseg' or 'pelt'")
    if n < 2 * MIN_SIZE or sigma <= 0:
        return []
    pen = penalty_per_log_n * sigma ** 2 * math.log(n)
    if method == "binseg":
        return binseg(y, pen)
    import ruptures as rpt

    ends = rpt.Pelt(model="l2", min_size=MIN_SIZE, jump=1).fit(y.reshape(-1, 1)).predict(pen=pen)
    return [e for e in ends if e < n]


def changes(values, sigma: float | None = None, method: str = METHOD,
            penalty_per_log_n: float = PENALTY_PER_LOG_N) -> list[Change]:
    """The change points of `values` (positive numbers, one per commit, in commit order), on their logarithm."""
    with np.errstate(all="ignore"):
        y = np.log(np.asarray(values, dtype=float))
    if not np.isfinite(y).all():  # a NaN gain never exceeds the penalty nor falls below it: binseg never ended
        raise ValueError("change points need positive finite values (the store refuses any other)")
    s = noise_sd(y) if sigma is None else sigma
    cuts = breakpoints(y, s, method, penalty_per_log_n)
    bounds = [0, *cuts, len(y)]
    rng = np.random.default_rng(SEED)
    out = []
    for i, cut in enumerate(cuts):
        lo, hi = bounds[i], bounds[i + 2]
        seg, k = y[lo:hi], _positions(hi - lo, lo == 0, hi == len(y))
        gains = _gains(seg, k)[0]
        near = k[gains >= gains.max() - CHI2_1_95 * s ** 2] + lo
        size = math.exp(float(y[cut:hi].mean() - y[lo:cut].mean()))
        out.append(Change(cut, size, _confidence(seg, k, rng), int(near.min()), int(near.max())))
    return out
