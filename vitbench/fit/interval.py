"""Prediction intervals that are prediction intervals, and how often they held on the backtest.

A prediction of one future measurement at compute C, `reach` r = log10(C / largest measured) decades out, misses
for three reasons, independent to first order, so their variances (of the log error) add:

- the parameters: the fit's bootstrap spread at C (each weighted form's replicates about its own estimate, the
  weighted mean of their variances; vitbench.fit.backtest.param_log_var). How far the forms disagree is the law's
  error, which the third term measures: counted in both, it was counted twice; and the third term's measure holds
  the parameter error too ("Parameters" below);
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

The interval is mid -+ t sd in log space, sd^2 = noise^2 + max(param_var, (k r)^2), t Student's quantile of the
level with the Welch-Satterthwaite degrees of freedom (Satterthwaite 1946: nu = V^2 / sum(v_i^2 / nu_i)) of the
sum, the noise term carrying the final fit's n - p, the law term n_c, the bootstrap term counted exact (its
replicates are many). Where the law term dominates, t is t(n_c): 3.18 for n_c = 3 at 95 %, not 1.96.
Parameters. A backtest fit's misses are its law's drift and its own parameter error together (a fit on fewer
budgets than the final fit's): k r measures the final fit's extrapolation error, parameters included, and the
bootstrap spread measures its parameter part, on the assumption that the law is right. Added, the parameter error
counted twice (95 % intervals held 97.6-99.0 % of the learner curves' held-out points, docs/scaling-laws.md, issue
49); dropped where k was measured (the second round), the intervals were too narrow where the law is a form and k,
from a few smaller fits' short windows, came out below the final fit's own parameter error (87.7-89.1 % on the
synthetic sets). So the larger of the two estimates of the same error: max(param_var, (k r)^2), with that term's
degrees of freedom (the bootstrap's exact, the law term's n_c). Without a backtest (k = 0) it is the parameter
term; at reach 0 (the bounds' tops) the parameter term, as before.
Prior. One group's law drift rests on its few windows (one, on a curve short for its reach: t(1) = 12.7 at
95 %), while the other groups of the same fit (the other models, tasks or runs of a study) measured how such
curves drift. With two or more groups (`--prior groups`, the choice's prior too), a group's k^2 is blended with
the median of the groups' own k^2 (robust: a few curves that drift far would set a mean) as a conjugate prior
worth PRIOR_WINDOWS times its own windows: k^2 = (3 n_c k0^2 + n_c k_own^2) / (4 n_c), with 4 n_c degrees of
freedom. One group alone is its own evidence and keeps its own k and t.
Span. The backtest's fits saw fewer budgets than the final fit (a cut-off 3 reaches before the last budget, a
third of the curve on a short one), and a fit's drift per decade of reach falls with the decades it saw: taken
as they are, the drift samples made the 95 % intervals hold 99-100 % of held-out points on every set of curves
measured (docs/scaling-laws.md), too wide to use. So each sample is taken to the final fit's span, x (decades its
fit saw / decades the final fit saw)^SPAN_POWER, before k is formed; the backtest's own coverage takes the other
cut-offs' samples to the span of the cut-off it judges.

Bounds. Every form is a decreasing law, so the error at a compute C is at most the error at any smaller compute:
an interval is never wider than that allows. Its top at C is never above its top at a smaller compute: the running
minimum of the tops from the smallest budget up to C (vitbench.fit.combine.upper_cap), so at most the top of the
interval of one new measurement at the measured budgets below (reach 0 there: the parameters and the noise, no
law term): a decreasing law's value at C is at most its value there, and the measurement's noise is the same. Not
the lowest error observed below C: that value is itself one noisy draw, the
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

PRIOR_WINDOWS = 3.0  # the groups' prior on a group's law drift counts as 3x its own windows: the share of the
# choice's prior (vitbench.fit.backtest.PRIOR_SHARE, 3/4), so both priors weigh the other groups alike
SPAN_POWER = 1.0  # a drift sample of a fit that saw S_c decades counts as (S_c / S)^SPAN_POWER of it for a fit
# that saw S (module docstring, "Span"): between 0 (a law's wrong shape drifts alike whatever it saw) and 1.5 (a
# fitted exponent's error, ~ S^-1.5 over budgets evenly spaced in log); measured 0.96 on synthetic curves with
# correlated noise and late bends, 1.48 with iid noise and the true law a form (the median drift against the
# decades seen, benchmarks/bench_fit.py families seeds 30000 and 0; docs/scaling-laws.md, issue 49)


@dataclass(frozen=True)
class LawError:
    """sd of a log prediction's miss: sqrt(noise^2 + max(param_var, (slope * reach)^2)), and the Student quantile
    that makes it an interval (module docstring, "Counting the evidence", "Parameters")."""

    noise: float  # sd of one observation's log, dof-corrected
    slope: float  # k: the law's own error per decade of reach
    ci: float
    coverage: float | None = None  # share of backtest points inside their `ci` interval
    n_checked: int = 0  # backtest points the coverage counts
    held_out: bool = True  # coverage from leave-one-cut-off-out intervals (False: one cut-off, in-sample)
    ceiling: float | None = None  # the largest value the error can take (1 for a fraction), None: unbounded
    law_dof: float = math.inf  # independent samples behind `slope`: the backtest's cut-offs (and the prior's)
    noise_dof: float = math.inf  # behind `noise`: the final fit's n - p
    own_slope: float | None = None  # k from this group's backtest alone, where a prior was blended in
    own_dof: float | None = None  # its independent windows, where a prior was blended in
    prior_slope: float | None = None  # the groups' prior k (module docstring, "Prior"); None: none

    @property
    def z(self) -> float:
        return float(stats.norm.ppf(0.5 + self.ci / 2))

    def terms(self, reach, param_var=0.0) -> tuple[np.ndarray, np.ndarray]:
        """Per point, (the bootstrap term where it is the larger, else 0; the law term (k r)^2 where it is, else
        0): max(param_var, (k r)^2) split by which estimate it took (module docstring, "Parameters")."""
        r = np.maximum(np.asarray(reach, dtype=float), 0.0)
        pv, law = np.broadcast_arrays(np.asarray(param_var, dtype=float), (self.slope * r) ** 2)
        boot = pv > law
        return np.where(boot, pv, 0.0), np.where(boot, 0.0, law)

    def sd(self, reach, param_var=0.0) -> np.ndarray:
        boot, law = self.terms(reach, param_var)
        return np.sqrt(self.noise**2 + boot + law)

    def quantile(self, reach, param_var=0.0) -> np.ndarray:
        """Student's quantile of `ci` at the Welch-Satterthwaite degrees of freedom of noise^2 + max(param_var,
        (k r)^2), the bootstrap term counted exact (its replicates are many; module docstring)."""
        boot, law = self.terms(reach, param_var)
        v = [boot, self.noise**2, law]
        return student(self.ci, satterthwaite(v, [math.inf, self.noise_dof, self.law_dof]))

    def band(self, log_mid, reach, param_var=0.0, cap=None, floor: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) of E, the `ci` prediction interval about exp(log_mid), within what a decreasing law allows
        (module docstring, "Bounds"): high at most `cap` (per point; vitbench.fit.combine.upper_cap), low at least
        `floor` (combine.floor_bound); neither moves past the prediction itself."""
        half = self.quantile(reach, param_var) * self.sd(reach, param_var)
        mid = np.exp(log_mid)
        lo, hi = np.exp(log_mid - half), np.exp(log_mid + half)
        if self.ceiling is not None:  # a fraction's interval stops at 1 (its prediction never exceeds it)
            hi = np.minimum(hi, self.ceiling)
        if cap is not None:
            hi = np.minimum(hi, cap)
        return np.minimum(np.maximum(lo, floor), mid), np.maximum(hi, mid)

    def to_dict(self) -> dict:
        return {"noise_log": self.noise, "law_error_per_decade": self.slope, "ci": self.ci,
                "law_error_per_decade_own": self.own_slope, "law_error_per_decade_prior": self.prior_slope,
                "law_error_own_dof": self.own_dof,
                "law_error_dof": self.law_dof if math.isfinite(self.law_dof) else None,
                "noise_dof": self.noise_dof if math.isfinite(self.noise_dof) else None,
                "backtest_coverage": self.coverage, "backtest_points_checked": self.n_checked,
                "coverage_held_out": self.held_out}

    def coverage_text(self) -> str | None:
        if self.coverage is None:
            return None
        how = "" if self.held_out else " (one cut-off: in-sample, optimistic)"
        points = f"{self.n_checked} backtest point{'s' if self.n_checked != 1 else ''}"
        own = self.own_dof if self.own_dof is not None else self.law_dof
        plural = "s" if abs(own - 1) > 1e-9 else ""
        tails = (f"; the law's error from {own:.2g} independent backtest window{plural}"
                 + (" and the other groups' (a prior)" if self.own_dof is not None else "")
                 if math.isfinite(own) else "")
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


def drifts(cutoff: np.ndarray, reach: np.ndarray, err: np.ndarray, smallest: float | None = None,
           to: float | None = None) -> np.ndarray:
    """One sample of the law's drift per cut-off: the least-squares slope through the origin of its misses against
    reach, sum(r e) / sum(r^2) (module docstring, "Counting the evidence"); with `smallest` (the smallest budget
    the fits saw) and `to` (a fit's largest budget), each taken to the drift of a fit that saw up to `to`:
    x (decades its fit saw / decades up to `to`)^SPAN_POWER (module docstring, "Span")."""
    out = []
    for c in np.unique(cutoff):
        m = cutoff == c
        den = float(np.sum(reach[m] ** 2))
        if den > 0:
            d = float(np.sum(reach[m] * err[m])) / den
            if smallest is not None and to is not None and to > smallest:
                d *= (math.log10(c / smallest) / math.log10(to / smallest)) ** SPAN_POWER
            out.append(d)
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


def with_prior(k2: float, n: float, prior: float | None) -> tuple[float, float]:
    """(k^2, degrees of freedom) of a group's law drift, `k2` from its own `n` independent windows, blended with
    the groups' prior k^2 (`prior`, None: none) as a conjugate prior worth PRIOR_WINDOWS x n windows (module
    docstring, "Prior")."""
    if prior is None or not math.isfinite(n):
        return k2, n
    v = PRIOR_WINDOWS * n
    return (v * prior + n * k2) / (v + n), v + n


def prior_k2(own: list[tuple[float, float] | None]) -> float | None:
    """The groups' prior k^2: the median of the groups' own k^2 (those with a backtest); None with fewer than
    two (one curve is its own evidence)."""
    got = [k2 for k2, _ in (o for o in own if o is not None)]
    return float(np.median(got)) if len(got) >= 2 else None


def law_error(cutoff: np.ndarray, reach: np.ndarray, err: np.ndarray, cut_noise: dict[float, float],
              noise: float, ci: float, noise_dof: float = math.inf, fall: np.ndarray | None = None,
              span: tuple[float, float] | None = None, prior: float | None = None) -> LawError:
    """The law's error model from its backtest points (per point: its cut-off, reach, log error and `fall`, the
    log of its fit's prediction at the cut-off over the one at the point; per cut-off: the noise of that fit) and
    the final fit's `noise` (with its `noise_dof`); coverage leave-one-cut-off-out, of intervals bounded as the
    predictions' are (module docstring, "Bounds": at most the interval at the cut-off, the last budget that fit
    saw; without `fall`, unbounded). `span`: the final fit's smallest and largest budgets, to which each drift
    sample is taken (module docstring, "Span"; None: as measured). `prior`: the groups' prior k^2 (prior_k2),
    blended into every k here (with_prior)."""
    cutoff, reach, err = (np.asarray(a, dtype=float) for a in (cutoff, reach, err))
    fall = np.full(err.size, np.inf) if fall is None else np.asarray(fall, dtype=float)
    smallest, largest = span if span is not None else (None, None)
    d = drifts(cutoff, reach, err, smallest, largest)
    if d.size == 0:
        return LawError(noise, 0.0, ci, noise_dof=noise_dof)
    own2, own_n = float(np.mean(d**2)), independent_tails(cutoff, reach)
    k2, dof = with_prior(own2, own_n, prior)
    cuts = np.unique(cutoff)
    pnoise = np.array([cut_noise.get(float(c), noise) for c in cutoff])
    inside = np.zeros(err.size, dtype=bool)
    for c in cuts:
        m = cutoff == c
        if len(cuts) > 1:  # the other cut-offs' drifts, taken to this cut-off's fit
            rest = drifts(cutoff[~m], reach[~m], err[~m], smallest, float(c) if span is not None else None)
            k2_o, n_o = with_prior(float(np.mean(rest**2)), independent_tails(cutoff[~m], reach[~m]), prior)
        else:
            k2_o, n_o = with_prior(float(np.mean(drifts(cutoff, reach, err) ** 2)), own_n, prior)
        law_v, noise_v = k2_o * reach[m] ** 2, pnoise[m] ** 2
        half = student(ci, satterthwaite([noise_v, law_v], [noise_dof, n_o])) * np.sqrt(noise_v + law_v)
        up = np.minimum(half, fall[m] + student(ci, noise_dof) * pnoise[m])  # at most the cut-off's interval
        inside[m] = (err[m] <= half) & (-err[m] <= up)
    return LawError(noise, math.sqrt(k2), ci, float(inside.mean()), int(err.size), len(cuts) > 1,
                    law_dof=dof, noise_dof=noise_dof, own_slope=math.sqrt(own2) if prior is not None else None,
                    own_dof=own_n if prior is not None else None,
                    prior_slope=math.sqrt(prior) if prior is not None else None)


FULL_WINDOWS = 3  # independent backtest windows on a long curve: the choice's cut-offs (1) and the two spread
# ones (vitbench.fit.backtest.SPREAD, 2 and 3 reaches before the last budget); fewer get a note with the remedy


def windows_note(le: LawError, budgets: np.ndarray, n_params: int, reach: float) -> str | None:
    """A note with its remedy where the law term of the intervals rests on fewer than FULL_WINDOWS independent
    backtest windows (wide: Student's t of so few) or on none (no backtest: the law's own error unmeasured); None
    otherwise. The remedy: the reach at which the spread cut-off 3 reaches back still leaves the richest weighted
    form (`n_params`) more budgets than parameters, and how many more decades of budgets the asked `reach`
    needs."""
    own = le.own_dof if le.own_dof is not None else le.law_dof
    if math.isfinite(own) and own >= FULL_WINDOWS - 1e-9:
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
    t = float(student(le.ci, le.law_dof))
    windows = f"{own:.2g} independent backtest window{'s' if abs(own - 1) > 1e-9 else ''}"
    if le.own_dof is not None:  # the groups' prior carries it
        return (f"this group's own backtest measured the law's error on {windows}: its {le.ci:.0%} prediction "
                f"intervals lean on the other groups' (Student's t {t:.3g} at {le.law_dof:.2g} degrees of "
                f"freedom); {remedy}")
    return (f"the {le.ci:.0%} prediction intervals' law term rests on {windows}: Student's t is {t:.3g} instead "
            f"of {le.z:.3g}, so they are wide; {remedy}")
