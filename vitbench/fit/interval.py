"""Prediction intervals that are prediction intervals, and how often they held on the backtest.

A prediction of one future measurement at compute C, `reach` r = log10(C / largest measured) decades out, misses
for three reasons, independent to first order, so their variances (of the log error) add:

- the parameters: the fit's bootstrap spread at C (the weighted mixture of the forms' replicates about the
  chosen law's prediction, so forms that disagree widen it; vitbench.fit.backtest.mixture_log_var);
- the noise of one observation: the chosen law's in-sample RMSE of log residuals, `noise`, stretched by
  sqrt(n / (n - p)) for the p parameters fitted (the degrees of freedom the residuals lost);
- the law itself: a law that is not the truth drifts from the curve as it extrapolates. Its error is measured by
  the backtest (fits on the smaller budgets against the points they never saw) and modelled as growing linearly
  in reach: var = noise^2 + (k r)^2, k^2 fitted by least squares on the backtest's squared misses minus the noise
  (Alabdulmohsin et al. 2022 report extrapolation error growing with the reach; linear growth in log error is
  what a wrong exponent gives). Beyond the backtest's reach the line is extended: an assumption, said.

The interval is mid -+ z sd in log space, z the normal quantile of the level. Its coverage is measured on the
backtest: each cut-off's held-out points against intervals from that cut-off's noise and a k fitted on the other
cut-offs only (leave-one-cut-off-out, so no point judges an interval built from it); with a single cut-off, k comes
from that cut-off itself (`held_out` False: in-sample, optimistic). The parameter term is left out there (the
backtest's fits have no bootstrap); the backtest's misses include the parameter error of its smaller fits, so k
carries it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class LawError:
    """sd of a log prediction's miss: sqrt(param_var + noise^2 + (slope * reach)^2) (module docstring)."""

    noise: float  # sd of one observation's log, dof-corrected
    slope: float  # k: the law's own error per decade of reach
    ci: float
    coverage: float | None = None  # share of backtest points inside their `ci` interval
    n_checked: int = 0  # backtest points the coverage counts
    held_out: bool = True  # coverage from leave-one-cut-off-out intervals (False: one cut-off, in-sample)
    ceiling: float | None = None  # the largest value the error can take (1 for a fraction), None: unbounded

    @property
    def z(self) -> float:
        return float(stats.norm.ppf(0.5 + self.ci / 2))

    def sd(self, reach, param_var=0.0) -> np.ndarray:
        r = np.maximum(np.asarray(reach, dtype=float), 0.0)
        return np.sqrt(np.asarray(param_var, dtype=float) + self.noise**2 + (self.slope * r) ** 2)

    def band(self, log_mid, reach, param_var=0.0) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) of E, the `ci` prediction interval about exp(log_mid)."""
        half = self.z * self.sd(reach, param_var)
        lo, hi = np.exp(log_mid - half), np.exp(log_mid + half)
        if self.ceiling is not None:  # a fraction's interval stops at 1 (its prediction never exceeds it)
            hi = np.maximum(np.minimum(hi, self.ceiling), np.exp(log_mid))
        return lo, hi

    def to_dict(self) -> dict:
        return {"noise_log": self.noise, "law_error_per_decade": self.slope, "ci": self.ci,
                "backtest_coverage": self.coverage, "backtest_points_checked": self.n_checked,
                "coverage_held_out": self.held_out}

    def coverage_text(self) -> str | None:
        if self.coverage is None:
            return None
        how = "" if self.held_out else " (one cut-off: in-sample, optimistic)"
        points = f"{self.n_checked} backtest point{'s' if self.n_checked != 1 else ''}"
        return f"{self.ci:.0%} intervals held {self.coverage:.0%} of {points}{how}"


def dof_noise(rmse_log: float, n: int, p: int) -> float:
    """In-sample RMSE of log residuals stretched by sqrt(n / (n - p)) (0 residual dof: returned as is)."""
    return float(rmse_log * math.sqrt(n / (n - p))) if n > p else float(rmse_log)


def _slope(reach: np.ndarray, err: np.ndarray, noise: np.ndarray) -> float:
    """k >= 0 from err^2 ~ noise^2 + k^2 reach^2 by least squares in k^2."""
    r2 = reach**2
    den = float(np.sum(r2**2))
    if den <= 0:
        return 0.0
    return math.sqrt(max(0.0, float(np.sum(r2 * (err**2 - noise**2))) / den))


def law_error(cutoff: np.ndarray, reach: np.ndarray, err: np.ndarray, cut_noise: dict[float, float],
              noise: float, ci: float) -> LawError:
    """The law's error model from its backtest points (per point: its cut-off, reach, log error; per cut-off: the
    noise of that fit) and the final fit's `noise`; coverage leave-one-cut-off-out (module docstring)."""
    cutoff, reach, err = (np.asarray(a, dtype=float) for a in (cutoff, reach, err))
    if err.size == 0:
        return LawError(noise, 0.0, ci)
    pnoise = np.array([cut_noise.get(float(c), noise) for c in cutoff])
    k = _slope(reach, err, pnoise)
    cuts = np.unique(cutoff)
    z = float(stats.norm.ppf(0.5 + ci / 2))
    inside = np.zeros(err.size, dtype=bool)
    for c in cuts:
        m = cutoff == c
        k_other = _slope(reach[~m], err[~m], pnoise[~m]) if len(cuts) > 1 else k
        inside[m] = np.abs(err[m]) <= z * np.sqrt(pnoise[m] ** 2 + (k_other * reach[m]) ** 2)
    return LawError(noise, k, ci, float(inside.mean()), int(err.size), len(cuts) > 1)
