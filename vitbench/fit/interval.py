"""Prediction intervals that are prediction intervals, and how often they held on the backtest.

A prediction of one future measurement at compute C, `reach` r = log10(C / largest measured) decades out, misses
for three reasons, independent to first order, so their variances (of the log error) add:

- the parameters: the fit's bootstrap spread at C (the weighted mixture of the forms' replicates about the
  combined law's prediction, so forms that disagree widen it; vitbench.fit.backtest.mixture_log_var);
- the noise of one observation: the combined law's in-sample RMSE of log residuals, `noise`, stretched by
  sqrt(n / (n - p)) for the p parameters of its richest form (the degrees of freedom the residuals lost);
- the law itself: a law that is not the truth drifts from the curve as it extrapolates. Its error is measured by
  the backtest (fits on the smaller budgets against the points they never saw; the combined law's misses there,
  vitbench.fit.combine) and modelled as growing linearly
  in reach, a drift of k per decade (Alabdulmohsin et al. 2022 report extrapolation error growing with the reach;
  linear growth in log error is what a wrong exponent gives). Beyond the backtest's reach the line is extended:
  an assumption, said.

Counting the evidence. A cut-off's held-out points are not independent samples of the law's error: they are one
fit's extrapolation, and they miss together (a wrong exponent, a curve's slow wobble, a late bend move them all one
way). Treating them as independent, a normal quantile over the pooled points stated 95 % and held 75 % of the
published curves' held-out points (issue 33). So each cut-off gives ONE sample of the drift: d_c, the
least-squares slope through the origin of its misses against reach (its points' mean miss per decade), and
k^2 = mean(d_c^2) over the cut-offs: an estimate of a variance (the drift's mean is 0 by symmetry: a law is as
likely to overshoot as undershoot) with n_c degrees of freedom, not one per point, where n_c counts the cut-offs'
independent tails: cut-offs whose held-out windows overlap share their misses, so n_c is the decades the windows
cover together over one window's (`independent_tails`: the choice's three cut-offs, a quarter reach apart, count
1; the two spread ones (vitbench.fit.backtest, "Spread") a reach apart, 1 each; 3 in all).

The interval is mid -+ t sd in log space, sd^2 = param_var + noise^2 + (k r)^2, t Student's quantile of the level
with the Welch-Satterthwaite degrees of freedom (Satterthwaite 1946: nu = V^2 / sum(v_i^2 / nu_i)) of the two
estimated terms, V = noise^2 + (k r)^2, the noise term carrying the final fit's n - p, the law term n_c (the
bootstrap term is left out of the count: fewer degrees of freedom, a slightly wider interval). Where the law term
dominates, t is t(n_c): 3.18 for n_c = 3 at 95 %, not 1.96.
Bounds. Every form is a decreasing law, so the error at a compute C is at most the error at any smaller compute:
an interval is never wider than that allows. Its top at C is at most the top of the interval of one new
measurement at a measured budget at or below C (reach 0 there: the parameters and the noise, no law term), the
smallest such (vitbench.fit.combine.upper_cap): a decreasing law's value at C is at most its value there, and the
measurement's noise is the same. Not the lowest error observed below C: that value is itself one noisy draw, the
lowest of several, so on a flat curve a new measurement lies above it most of the time. Its bottom is at least
the laws' floor (e_inf; 0 for the power law or without bootstrap replicates to bound it by), at the lower end of
its bootstrap interval, times the noise's lower quantile (combine.floor_bound). Neither bound moves past the
prediction itself (the combined law decreases, so it lies below every such top). The backtest's coverage bounds its
intervals the same way: at most the interval at the cut-off, the last budget its fit saw (no replicates there:
no floor).
Its coverage is measured on the backtest: each cut-off's held-out points against intervals from that cut-off's
noise and a k fitted on the other cut-offs only, with the other cut-offs' independent tails as its degrees of
freedom (leave-one-cut-off-out, so no point judges an interval built from it); with a single cut-off, k and its
degrees of freedom come from that cut-off itself (`held_out` False: in-sample). The parameter term is left out
there (the backtest's fits have no bootstrap); the backtest's misses include the parameter error of its smaller
fits, so k carries it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class LawError:
    """sd of a log prediction's miss: sqrt(param_var + noise^2 + (slope * reach)^2), and the Student quantile that
    makes it an interval (module docstring, "Counting the evidence")."""

    noise: float  # sd of one observation's log, dof-corrected
    slope: float  # k: the law's own error per decade of reach
    ci: float
    coverage: float | None = None  # share of backtest points inside their `ci` interval
    n_checked: int = 0  # backtest points the coverage counts
    held_out: bool = True  # coverage from leave-one-cut-off-out intervals (False: one cut-off, in-sample)
    ceiling: float | None = None  # the largest value the error can take (1 for a fraction), None: unbounded
    law_dof: float = math.inf  # independent samples behind `slope`: the backtest's cut-offs
    noise_dof: float = math.inf  # behind `noise`: the final fit's n - p

    @property
    def z(self) -> float:
        return float(stats.norm.ppf(0.5 + self.ci / 2))

    def sd(self, reach, param_var=0.0) -> np.ndarray:
        r = np.maximum(np.asarray(reach, dtype=float), 0.0)
        return np.sqrt(np.asarray(param_var, dtype=float) + self.noise**2 + (self.slope * r) ** 2)

    def quantile(self, reach) -> np.ndarray:
        """Student's quantile of `ci` at the Welch-Satterthwaite degrees of freedom of noise^2 + (k r)^2 (the
        bootstrap term left out of the count: module docstring)."""
        r = np.maximum(np.asarray(reach, dtype=float), 0.0)
        return student(self.ci, satterthwaite([self.noise**2, (self.slope * r) ** 2],
                                              [self.noise_dof, self.law_dof]))

    def band(self, log_mid, reach, param_var=0.0, cap=None, floor: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) of E, the `ci` prediction interval about exp(log_mid), within what a decreasing law allows
        (module docstring, "Bounds"): high at most `cap` (per point; vitbench.fit.combine.upper_cap), low at least
        `floor` (combine.floor_bound); neither moves past the prediction itself."""
        half = self.quantile(reach) * self.sd(reach, param_var)
        mid = np.exp(log_mid)
        lo, hi = np.exp(log_mid - half), np.exp(log_mid + half)
        if self.ceiling is not None:  # a fraction's interval stops at 1 (its prediction never exceeds it)
            hi = np.minimum(hi, self.ceiling)
        if cap is not None:
            hi = np.minimum(hi, cap)
        return np.minimum(np.maximum(lo, floor), mid), np.maximum(hi, mid)

    def to_dict(self) -> dict:
        return {"noise_log": self.noise, "law_error_per_decade": self.slope, "ci": self.ci,
                "law_error_dof": self.law_dof if math.isfinite(self.law_dof) else None,
                "noise_dof": self.noise_dof if math.isfinite(self.noise_dof) else None,
                "backtest_coverage": self.coverage, "backtest_points_checked": self.n_checked,
                "coverage_held_out": self.held_out}

    def coverage_text(self) -> str | None:
        if self.coverage is None:
            return None
        how = "" if self.held_out else " (one cut-off: in-sample, optimistic)"
        points = f"{self.n_checked} backtest point{'s' if self.n_checked != 1 else ''}"
        tails = (f"; the law's error from {self.law_dof:.2g} independent backtest window"
                 f"{'s' if abs(self.law_dof - 1) > 1e-9 else ''}" if math.isfinite(self.law_dof) else "")
        return f"{self.ci:.0%} intervals held {self.coverage:.0%} of {points}{how}{tails}"


def student(ci: float, dof) -> np.ndarray:
    """Student's two-sided `ci` quantile at `dof` (inf: the normal's)."""
    dof = np.asarray(dof, dtype=float)
    return np.where(np.isfinite(dof), stats.t.ppf(0.5 + ci / 2, np.where(np.isfinite(dof), dof, 1.0)),
                    stats.norm.ppf(0.5 + ci / 2))


def satterthwaite(variances: list, dofs: list[float]) -> np.ndarray:
    """Welch-Satterthwaite degrees of freedom of a sum of independent variance estimates (Satterthwaite 1946):
    (sum v)^2 / sum(v^2 / nu); inf where every term is exact or the sum is 0."""
    v = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in variances))
    den = sum(x**2 / d for x, d in zip(v, dofs) if math.isfinite(d) and d > 0)
    total = sum(v)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.asarray(den) > 0, total**2 / np.where(np.asarray(den) > 0, den, 1.0), np.inf)


def dof_noise(rmse_log: float, n: int, p: int) -> float:
    """In-sample RMSE of log residuals stretched by sqrt(n / (n - p)) (0 residual dof: returned as is)."""
    return float(rmse_log * math.sqrt(n / (n - p))) if n > p else float(rmse_log)


def drifts(cutoff: np.ndarray, reach: np.ndarray, err: np.ndarray) -> np.ndarray:
    """One sample of the law's drift per cut-off: the least-squares slope through the origin of its misses against
    reach, sum(r e) / sum(r^2) (module docstring, "Counting the evidence")."""
    out = []
    for c in np.unique(cutoff):
        m = cutoff == c
        den = float(np.sum(reach[m] ** 2))
        if den > 0:
            out.append(float(np.sum(reach[m] * err[m])) / den)
    return np.array(out)


def independent_tails(cutoff: np.ndarray, reach: np.ndarray) -> float:
    """How many independent samples of the drift the cut-offs hold: the decades of compute their held-out windows
    ([cut-off, its furthest prediction]) cover together, over the longest window. Windows that overlap share their
    points' misses (the choice's cut-offs, a quarter reach apart, count about 1 together); disjoint ones count 1
    each (module docstring, "Counting the evidence")."""
    windows = sorted((math.log10(c), math.log10(c) + float(reach[cutoff == c].max())) for c in np.unique(cutoff))
    longest = max(hi - lo for lo, hi in windows)
    if longest <= 0:
        return float(len(windows))
    covered, end = 0.0, -math.inf
    for lo, hi in windows:
        covered += max(0.0, hi - max(lo, end))
        end = max(end, hi)
    return covered / longest


def law_error(cutoff: np.ndarray, reach: np.ndarray, err: np.ndarray, cut_noise: dict[float, float],
              noise: float, ci: float, noise_dof: float = math.inf, fall: np.ndarray | None = None) -> LawError:
    """The law's error model from its backtest points (per point: its cut-off, reach, log error and `fall`, the
    log of its fit's prediction at the cut-off over the one at the point; per cut-off: the noise of that fit) and
    the final fit's `noise` (with its `noise_dof`); coverage leave-one-cut-off-out, of intervals bounded as the
    predictions' are (module docstring, "Bounds": at most the interval at the cut-off, the last budget that fit
    saw; without `fall`, unbounded)."""
    cutoff, reach, err = (np.asarray(a, dtype=float) for a in (cutoff, reach, err))
    fall = np.full(err.size, np.inf) if fall is None else np.asarray(fall, dtype=float)
    d = drifts(cutoff, reach, err)
    if d.size == 0:
        return LawError(noise, 0.0, ci, noise_dof=noise_dof)
    k = math.sqrt(float(np.mean(d**2)))
    cuts = np.unique(cutoff)
    pnoise = np.array([cut_noise.get(float(c), noise) for c in cutoff])
    inside = np.zeros(err.size, dtype=bool)
    for c in cuts:
        m = cutoff == c
        if len(cuts) > 1:
            rest = drifts(cutoff[~m], reach[~m], err[~m])
            k_o, n_o = math.sqrt(float(np.mean(rest**2))), independent_tails(cutoff[~m], reach[~m])
        else:
            k_o, n_o = k, independent_tails(cutoff, reach)
        law_v, noise_v = (k_o * reach[m]) ** 2, pnoise[m] ** 2
        half = student(ci, satterthwaite([noise_v, law_v], [noise_dof, n_o])) * np.sqrt(noise_v + law_v)
        up = np.minimum(half, fall[m] + student(ci, noise_dof) * pnoise[m])  # at most the cut-off's interval
        inside[m] = (err[m] <= half) & (-err[m] <= up)
    return LawError(noise, k, ci, float(inside.mean()), int(err.size), len(cuts) > 1,
                    law_dof=independent_tails(cutoff, reach),
                    noise_dof=noise_dof)


FULL_WINDOWS = 3  # independent backtest windows on a long curve: the choice's cut-offs (1) and the two spread
# ones (vitbench.fit.backtest.SPREAD, 2 and 3 reaches before the last budget); fewer get a note with the remedy


def windows_note(le: LawError, budgets: np.ndarray, n_params: int, reach: float) -> str | None:
    """A note with its remedy where the law term of the intervals rests on fewer than FULL_WINDOWS independent
    backtest windows (wide: Student's t of so few) or on none (no backtest: the law's own error unmeasured); None
    otherwise. The remedy: the reach at which the spread cut-off 3 reaches back still leaves the richest weighted
    form (`n_params`) more budgets than parameters, and how many more decades of budgets the asked `reach`
    needs."""
    if math.isfinite(le.law_dof) and le.law_dof >= FULL_WINDOWS - 1e-9:
        return None
    b = np.unique(np.asarray(budgets, dtype=float))
    span = math.log10(b[-1] / b[n_params]) if b.size > n_params else 0.0  # decades past the smallest fittable set
    fixes = []
    if span / FULL_WINDOWS >= 0.01:
        most = span / FULL_WINDOWS
        fixes.append(f"predict at most {most:.2g} decades past the largest budget (compute <= "
                     f"{b[-1] * 10**most:.3g}; --reach {most:.2g})")
    fixes.append(f"measure budgets over {max(FULL_WINDOWS * reach - span, 0.01):.2g} more decades of compute")
    remedy = f"for {FULL_WINDOWS} windows, " + " or ".join(fixes)
    if not math.isfinite(le.law_dof):
        return (f"no backtest: the law's own error at this reach is not measured and the {le.ci:.0%} prediction "
                f"intervals hold only the parameters and the noise (too narrow); {remedy}")
    n = le.law_dof
    t = float(student(le.ci, n))
    return (f"the {le.ci:.0%} prediction intervals' law term rests on {n:.2g} independent backtest window"
            f"{'s' if abs(n - 1) > 1e-9 else ''}: Student's t is {t:.3g} instead of {le.z:.3g}, so they are "
            f"wide; {remedy}")
