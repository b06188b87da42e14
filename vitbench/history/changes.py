"""Change points of one series (log values, one per commit): where, how large, how sure, which commits.

Found by binary segmentation (Scott and Knott 1974; Vostrikova 1981) on a piecewise-constant mean (cost "l2"),
as the `ruptures` library implements it (Truong, Oudre and Vayatis 2020, "Selective review of offline change
point detection methods", Signal Processing 167), with the penalty of the Schwarz information criterion for a
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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

METHOD = "binseg"  # chosen by benchmarks/bench_history.py (docs/history.md, "Which method")
PENALTY_PER_LOG_N = 2.0  # Schwarz (Yao 1988): 2 sigma^2 log n for a change in a Gaussian mean
MIN_SIZE = 2  # points a segment needs at least (ruptures' l2 cost needs 2 for a variance)
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
    two independent points has twice the variance), scaled to an sd."""
    if len(y) < 3:
        return 0.0
    d = np.diff(y)
    return float(MAD_TO_SD * np.median(np.abs(d - np.median(d))) / math.sqrt(2))


def _gains(seg: np.ndarray) -> np.ndarray:
    """Split gain at every position k of `seg` (rows: samples): k (m - k) / m (mean before - mean after)^2, the
    drop of the l2 cost from splitting there; positions MIN_SIZE .. m - MIN_SIZE."""
    seg = np.atleast_2d(seg)
    m = seg.shape[1]
    k = np.arange(MIN_SIZE, m - MIN_SIZE + 1)
    c = np.cumsum(seg, axis=1)
    before = c[:, k - 1] / k
    after = (c[:, -1:] - c[:, k - 1]) / (m - k)
    return k * (m - k) / m * (before - after) ** 2


def _confidence(seg: np.ndarray, rng: np.random.Generator) -> float:
    observed = _gains(seg)[0].max()
    perms = np.array([rng.permutation(seg) for _ in range(PERMUTATIONS)])
    exceed = int((_gains(perms).max(axis=1) >= observed - 1e-12 * abs(observed)).sum())
    return 1.0 - (exceed + 1) / (PERMUTATIONS + 1)


def breakpoints(y: np.ndarray, sigma: float, method: str = METHOD,
                penalty_per_log_n: float = PENALTY_PER_LOG_N) -> list[int]:
    """The segment starts (indices > 0) found by `method` ('pelt' or 'binseg', ruptures, cost l2)."""
    import ruptures as rpt

    n = len(y)
    if n < 2 * MIN_SIZE or sigma <= 0:
        return []
    algo = {"pelt": rpt.Pelt, "binseg": rpt.Binseg}[method](model="l2", min_size=MIN_SIZE, jump=1)
    ends = algo.fit(y.reshape(-1, 1)).predict(pen=penalty_per_log_n * sigma ** 2 * math.log(n))
    return [e for e in ends if e < n]


def changes(values, sigma: float | None = None, method: str = METHOD,
            penalty_per_log_n: float = PENALTY_PER_LOG_N) -> list[Change]:
    """The change points of `values` (positive numbers, one per commit, in commit order), on their logarithm."""
    y = np.log(np.asarray(values, dtype=float))
    s = noise_sd(y) if sigma is None else sigma
    cuts = breakpoints(y, s, method, penalty_per_log_n)
    bounds = [0, *cuts, len(y)]
    rng = np.random.default_rng(SEED)
    out = []
    for i, cut in enumerate(cuts):
        lo, hi = bounds[i], bounds[i + 2]
        seg = y[lo:hi]
        gains = _gains(seg)[0]
        near = np.nonzero(gains >= gains.max() - CHI2_1_95 * s ** 2)[0] + MIN_SIZE + lo
        size = math.exp(float(y[cut:hi].mean() - y[lo:cut].mean()))
        out.append(Change(cut, size, _confidence(seg, rng), int(near.min()), int(near.max())))
    return out
