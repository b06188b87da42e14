"""The law a fit extrapolates with: every fitted form's prediction, combined in log space by its backtest weight.

Why combine instead of choosing. Choosing the one form with the lowest backtest score throws away what the other
forms know, and the backtest that ranks them rests on a few cut-offs whose held-out windows overlap: between two
forms that score alike, a pick is a coin toss, and a wrong pick on a curve that bends is a large miss. Per curve,
the combination's error is lower than the chosen form's on every set of curves measured (geometric mean over
curves; docs/scaling-laws-evidence.md, issue 33), and its large misses are fewer.

Weights. Bates & Granger (1969, "The combination of forecasts") combine forecasts with weights inversely
proportional to their error variance, their covariance left out (estimated covariances cost more than they gain
on short records, as a backtest's is). A form's error variance at the reach is its backtest score squared
(vitbench.fit.backtest.per_decade_score, with its prior toward the richer forms), so their weight is score^-2. It
is too flat here: a backtest's reach is short, and a wrong law drifts further than it shows there (on textbook
curves of one law, a wrong form whose backtest score was 2-3x the right one's missed by 10-25x on the decade
beyond, and its score^-2 weight of 0.1-0.2 made the combination's error up to 4.4x the right law's; geometric mean
over 24 curves 1.20x). The weight is therefore score^-WEIGHT_POWER with WEIGHT_POWER = 4 (backtest.py), measured
against 2, 3, 6, 8 and the choice alone on 7 sets of curves (docs/scaling-laws-evidence.md): 1.05x the right law on
those textbook curves (at most 1.5x), and per curve a lower error than the choice alone on all 7 sets. The
combination is Sum_f w_f log E_f(C): a weighted geometric mean of the forms' predictions (the log is where the
errors are measured, and where the laws are linear in their exponents).

What it is judged by. The combination's own backtest error at each cut-off is the same weighted sum of the forms'
misses at that cut-off's points (a log prediction minus a log observation, the weights summing to 1), so the
prediction intervals (vitbench.fit.interval) are built from the combination's misses, not the chosen form's. The
noise of one observation is the combination's in-sample RMSE of log residuals, stretched for the largest form's
parameters (the combination has no more freedom than its richest member); a backtest fit's noise is taken as the
weighted sum of its forms' (an upper bound on the combination's RMSE, by Minkowski's inequality).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vitbench.fit.backtest import param_log_var
from vitbench.fit.estimate import CurveFit
from vitbench.fit.interval import LawError, dof_noise, law_error, student

CAP_BUDGETS = 64  # measured budgets the upper bound is taken over at most (evenly chosen, the largest always),
# and points of its grid past the largest: each costs a bootstrap prediction per replicate and form, and the bound
# at any of them is a valid one


@dataclass(frozen=True)
class Combined:
    """Forms fitted to one curve and their weights (summing to 1, each > 0): the law predictions are made with."""

    fits: tuple[CurveFit, ...]
    weights: tuple[float, ...]

    @classmethod
    def of(cls, fits: list[CurveFit], weights: dict[str, float]) -> Combined | None:
        """The fitted forms with a positive weight in `weights` (form name -> weight), renormalised; None: none."""
        used = [(f, weights[f.form.name.value]) for f in fits if f.ok and weights.get(f.form.name.value, 0.0) > 0]
        if not used:
            return None
        total = sum(w for _, w in used)
        return cls(tuple(f for f, _ in used), tuple(w / total for _, w in used))

    def log_predict(self, compute) -> np.ndarray:
        return sum(w * f.log_predict(compute) for f, w in zip(self.fits, self.weights))

    def predict(self, compute) -> np.ndarray:
        return np.exp(self.log_predict(compute))

    @property
    def n_params(self) -> int:
        """The richest member's: the combination has no more freedom than it (module docstring)."""
        return max(f.form.n_params for f in self.fits)

    @property
    def named_weights(self) -> dict[str, float]:
        """Form name -> weight, largest first: what a prediction says it was made with."""
        return {f.form.name.value: w for w, f in sorted(zip(self.weights, self.fits), key=lambda wf: -wf[0])}

    @property
    def label(self) -> str:
        """E.g. "m4 0.71 + saturating 0.22 + offset 0.07": the forms by weight, largest first, to 2 decimals;
        those that round to 0.00 are counted, not named (the JSON's `weights` has every one)."""
        ranked = self.named_weights
        shown = [f"{name} {w:.2f}" for name, w in ranked.items() if w >= 0.005]
        rest = len(ranked) - len(shown)
        return " + ".join(shown) + (f" (+ {rest} below 0.005)" if rest else "")

    def rmse_log(self, compute: np.ndarray, error: np.ndarray) -> float:
        """In-sample RMSE of log(combined prediction / observed) over the fitted points."""
        return float(np.sqrt(np.mean((self.log_predict(compute) - np.log(error)) ** 2)))


@dataclass(frozen=True)
class Misses:
    """The combination's backtest: per point its cut-off, reach (decades), log miss and fall (the log of the
    combination's prediction at the cut-off over its prediction at the point: >= 0, the law decreases); per
    cut-off that fit's noise; and which points measure the error at the full reach (FormBacktest.at_reach)."""

    cutoff: np.ndarray
    reach: np.ndarray
    err: np.ndarray
    full: np.ndarray
    noise: dict[float, float]
    fall: np.ndarray | None = None

    def among(self, cutoffs) -> Misses:
        """The misses of the fits at `cutoffs` only (e.g. the choice's, without the spread ones)."""
        cuts = np.asarray(cutoffs, dtype=float)
        keep, named = np.isin(self.cutoff, cuts), set(cuts.tolist())
        return Misses(self.cutoff[keep], self.reach[keep], self.err[keep], self.full[keep],
                      {c: n for c, n in self.noise.items() if c in named},
                      None if self.fall is None else self.fall[keep])

    @property
    def rmse_log(self) -> float | None:
        """The combination's RMSE of log at the reach (as FormBacktest.rmse_log)."""
        if not self.err.size:
            return None
        at = self.full if self.full.any() else np.ones(self.err.size, dtype=bool)
        return float(np.sqrt(np.mean(self.err[at] ** 2)))


def misses(law: Combined, parts: dict[str, list]) -> Misses:
    """The combination's misses at the backtest points every member predicted: `parts` maps a form name to its
    FormBacktests (the choice's cut-offs, the spread ones); a point one member lacks (a cut-off too short for its
    parameters) is left out, never filled from the others (that would be a different combination)."""
    table: list[dict[tuple[float, float], tuple[float, float, bool, float]]] = []
    noise: list[dict[float, float]] = []
    for f in law.fits:
        rows, cut_noise = {}, {}
        for b in parts.get(f.form.name.value, []):
            # the fit's prediction at its own cut-off (unknown without its parameters: the fall is unbounded)
            at_cut = {c: float(np.log(b.form.predict(v, np.array([c]))[0])) for c, v in b.fits.items()}
            for p, e in zip(b.points, b.log_err):
                rows[(p.cutoff, p.compute)] = (float(e), math.log10(p.compute / p.cutoff), p.full,
                                               at_cut.get(p.cutoff, math.inf) - math.log(p.predicted))
            cut_noise.update(b.noise)
        table.append(rows)
        noise.append(cut_noise)
    keys = sorted(set.intersection(*(set(t) for t in table))) if table else []

    def mix(i: int) -> np.ndarray:  # the weighted sum of the members' column i: the combination's, in logs
        return np.array([sum(w * t[k][i] for w, t in zip(law.weights, table)) for k in keys], dtype=float)

    cuts = {k[0] for k in keys}
    return Misses(np.array([k[0] for k in keys], dtype=float),
                  np.array([table[0][k][1] for k in keys], dtype=float), mix(0),
                  np.array([table[0][k][2] for k in keys], dtype=bool),
                  {c: sum(w * n.get(c, 0.0) for w, n in zip(law.weights, noise)) for c in cuts},
                  np.maximum(mix(3), 0.0))


def combined_law_error(law: Combined, m: Misses, compute: np.ndarray, error: np.ndarray, ci: float,
                       prior: float | None = None) -> LawError:
    """The combination's error model for its prediction intervals (vitbench.fit.interval) from its misses `m` at
    the backtest's cut-offs and the spread ones, its in-sample noise on the fitted points (`compute`, `error`) and
    their backtest coverage (module docstring, "What it is judged by"); `prior`: the groups' prior k^2 on its drift
    (interval.prior_k2; None: its own)."""
    n, p = len(compute), law.n_params
    noise = dof_noise(law.rmse_log(compute, error), n, p)
    dof = float(n - p) if n > p else math.inf
    if not m.err.size:
        return LawError(noise, 0.0, ci, noise_dof=dof)
    return law_error(m.cutoff, m.reach, m.err, m.noise, noise, ci, dof, m.fall,
                     (float(np.min(compute)), float(np.max(compute))), prior)


def upper_cap(law: Combined, le: LawError, budgets: np.ndarray, compute, with_params: bool) -> np.ndarray:
    """Per compute value, the highest top a decreasing law allows its interval there: the lowest top of the
    interval at any compute from the smallest budget up to it, the running minimum of the tops over the measured
    budgets (up to CAP_BUDGETS of them; reach 0 there: the parameters and the noise, no law term), a grid of
    CAP_BUDGETS past the largest and the values asked (vitbench.fit.interval, "Bounds"). `with_params`: the
    parameter term from the forms' bootstrap replicates (where they have some)."""
    b = np.unique(np.asarray(budgets, dtype=float))
    if b.size > CAP_BUDGETS:
        b = b[np.unique(np.linspace(0, b.size - 1, CAP_BUDGETS).round().astype(int))]
    xs = np.asarray(compute, dtype=float)
    far = max(float(xs.max()), float(b[-1]))
    at = np.unique(np.concatenate([b, xs, np.geomspace(b[-1], far, CAP_BUDGETS) if far > b[-1] else []]))
    mid = law.log_predict(at)
    var = param_log_var(list(law.fits), law.named_weights, at) if with_params else np.zeros(at.size)
    _, hi = le.band(mid, np.log10(at / b[-1]), var)
    return np.minimum.accumulate(hi)[np.searchsorted(at, xs)]


def floor_bound(law: Combined, le: LawError) -> float:
    """The lowest value a new measurement can take under the combination's floors (vitbench.fit.interval,
    "Bounds"): the weighted geometric mean of each form's floor e_inf at the lower end of its bootstrap interval,
    times the noise's lower quantile; 0 where a form has no floor (power) or no replicates to bound it by."""
    log_floor = 0.0
    for f, w in zip(law.fits, law.weights):
        reps = f.user_replicates("e_inf")
        low = float(np.quantile(reps, (1 - le.ci) / 2)) if reps is not None else 0.0
        if low <= 0:
            return 0.0
        log_floor += w * math.log(low)
    return math.exp(log_floor - float(student(le.ci, le.noise_dof)) * le.noise)
