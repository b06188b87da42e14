"""Judge each form by how it extrapolates at the user's reach, choose one, and make intervals that know the choice.

Backtest. A scaling law is used to predict budgets beyond the measured ones, `reach` decades of compute past the
largest (Alabdulmohsin et al. 2022 judge estimators by exactly this: fit on the smaller budgets, RMSE of the log
prediction on the larger ones). So each form is fitted on the budgets up to a cut-off and predicts every point
from the cut-off to `reach` decades beyond it; the fit never sees those points. Every prediction is kept with its
reach (log10 of its compute over the cut-off's), so the error is reported against reach. Every form is scored on
the same cut-offs; a cut-off keeps more budgets than the largest form has parameters.

Cut-offs. The first is the largest that still leaves a full `reach` of points beyond it; its predictions are the
error at the reach (FormBacktest.rmse_log). The next LATER sit CUTOFF_STEP x reach later each (3/4 and 1/2 of the
reach before the end) and predict the rest of the curve, a shorter reach; any further ones (`--cutoffs`) sit
CUTOFF_STEP x reach earlier than the first. Why later ones: the backtest judged a law by fits that saw the curve
only up to a reach before its end, while the law the user extrapolates with sees all of it, and a richer law
gains most from that last part (where a curve bends toward its floor the final fit has the bend, the backtest's
fits had not): with all cut-offs at or before the full-reach one, the choice was biased toward the simpler laws
(on synthetic curves whose truth is M4 it chose saturating or offset where M4 extrapolated best; on 72 published
curves it chose the power law for 35, issue 33). Where the curve is too short for a full reach, the first cut-off
is the smallest fittable set and the reach achieved is said.

Choice. Cut-offs predict different reaches, so each cut-off's error is taken per decade: its mean square log
error over its mean square reach (the law's error grows about linearly with reach, vitbench.fit.interval). Each
cut-off's counts RECENCY x the one below it (the latest sees most of what the final fit sees), and each parameter
beyond the fewest divides the score by RICHER (a prior toward the richer, nesting forms: a richer form whose extra
parameter is not needed collapses onto the simpler one, at a bound, and predicts what it predicts).
score = per_decade_score x RICHER^-(p - p_min). Each form's weight is score^-WEIGHT_POWER, normalised (the square
of Bates & Granger's inverse error variance: vitbench.fit.combine says why), and predictions combine the forms by
these weights (vitbench.fit.combine); the lowest score, the largest weight, is the chosen form (the table's `*`,
`best_form`), the next the runner-up. Where the curve is too short for a full reach, the backtest measured the
forms at a share of the reach asked (achieved / reach) and says less about the reach the user extrapolates to:
the power is WEIGHT_POWER x that share (Backtest.weight_power; at no reach measured the weights are equal). On
ColPret's pre-training curves judged a decade out (a fitted part of 1-2 decades: a median share of 0.72), the full
power put the combination 13 % above the best single law (0.1076 against 0.0948), and the scaled one 5 % below it
(0.0904); on LCDB 1.1's curves, which it was not developed on, a decade out 0.0596 -> 0.0576 (the best single law
0.0539); on curves with a full reach nothing changes (docs/scaling-laws-evidence.md, issue 33's fifth round).
Prior. One curve's backtest rests on a few overlapping cut-offs: between forms that score alike its ranking is
noise, while the forms' scores over the other curves of the same fit (the other models, tasks or runs of a study)
measure how such curves extrapolate. With more than one group scored (vitbench.fit.groups, `--prior groups`, the
default) a form's score is therefore own^(1 - PRIOR_SHARE) x prior^PRIOR_SHARE, prior its geometric mean over the
groups (prior_scores), and the weights are that score^-weight_power: per pair of forms the log ratio of the
weights is 1/4 the group's own and 3/4 the groups'. One group alone is its own prior, so nothing changes for it.
Developed on the development sets (ColPret, the published vision and language curves, LCDB's test half, six
synthetic sets), from the same fits: every share from 0.7 to 1 put the combined law's median at most 0.2 % above
the best single law's on all six real sets, 3/4 at 0.35-0.99 of it, against 0.94-1.07 without a prior; 3/4 sits
inside that range, away from its edge (0.65: 1.01 on the language curves, 13 curves). On the synthetic sets,
draws of five different laws pooled, it was 0.83-1.13 against 0.77-1.05 (docs/scaling-laws-evidence.md, issue 33's
sixth round).
The score was tuned for choosing one form on 200 synthetic curves of five families (benchmarks/bench_fit.py
families, seeds 0-39; every setting of cut-offs at 1, 3/4 and 1/2 of the reach, RECENCY 1-3 and RICHER 1-1.5 was
at or below M4's median there); the combination uses it unchanged (docs/scaling-laws-evidence.md, "Measured on
...", says on which curves it was compared and judged).
Spread. The choice's cut-offs sit a quarter reach apart, so their held-out tails overlap and their errors are
nearly one sample of the law's drift: an error model built on them alone is optimistic (on the published curves
the backtest said 95-99 % coverage where 68-80 % held, issue 33). The forms with a weight are therefore also
fitted at SPREAD cut-offs, 2 and 3 reaches before the last budget, each predicting a reach ahead (tails that do
not overlap the others'), used only for the prediction interval's error model (vitbench.fit.interval): more, and
more nearly independent, samples of the drift, from fits that saw less.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from vitbench.fit.estimate import CurveFit, FitStatus, fit_curve
from vitbench.fit.forms import Form, FormName
from vitbench.fit.interval import dof_noise
from vitbench.fit.spec import N_CUTOFFS

CUTOFF_STEP = 0.25  # of the reach, between neighbouring cut-offs (module docstring, "Cut-offs")
LATER = 2  # cut-offs after the full-reach one (3/4 and 1/2 of the reach before the end), predicting the rest
RECENCY = 2.0  # weight of a cut-off's error per decade relative to the next lower one's (docstring, "Choice")
RICHER = 1.25  # the backtest score is divided by this per parameter beyond the fewest (module docstring)
WEIGHT_POWER = 4.0  # a form's weight is score^-WEIGHT_POWER (vitbench.fit.combine: measured, 2 was too flat)
PRIOR_SHARE = 0.75  # of a form's score (in logs) taken from its score over the fit's groups (docstring, "Prior")
SPREAD = (2.0, 3.0)  # reaches before the last budget: weighted forms' extra cut-offs, intervals only ("Spread")
MAX_POINTS = 4096  # a curve with more points is backtested on an even subsample of this many (said in the JSON)
MAX_LISTED = 500  # predictions listed one by one in the JSON at most (the summaries cover all)
DEFAULT_REACH_SHARE = 1 / 3  # without --predict or --reach: predict the last third of the measured decades


@dataclass(frozen=True)
class Prediction:
    """One point of a backtest: a fit on the budgets up to `cutoff` predicting the point at `compute`."""

    cutoff: float  # the largest compute the fit saw
    compute: float
    observed: float
    predicted: float
    full: bool  # its cut-off left a full reach ahead

    def to_dict(self) -> dict:
        return {"cutoff": self.cutoff, "compute": self.compute,
                "reach_decades": float(math.log10(self.compute / self.cutoff)), "observed": self.observed,
                "predicted": self.predicted, "full_reach": self.full}


@dataclass
class FormBacktest:
    form: Form
    status: FitStatus = FitStatus.OK
    message: str | None = None
    points: list[Prediction] = field(default_factory=list)  # in the order predicted: by cut-off, then compute
    fits: dict[float, dict[str, float]] = field(default_factory=dict)  # cut-off -> parameters (user units)
    noise: dict[float, float] = field(default_factory=dict)  # cut-off -> that fit's dof-corrected RMSE of log

    def _column(self, of: Callable[[Prediction], float]) -> np.ndarray:
        return np.array([of(p) for p in self.points], dtype=float)

    @property
    def cutoff(self) -> np.ndarray:
        """Per prediction: the largest compute its fit saw."""
        return self._column(lambda p: p.cutoff)

    @property
    def reach(self) -> np.ndarray:
        return np.log10(self._column(lambda p: p.compute) / self.cutoff)

    @property
    def log_err(self) -> np.ndarray:
        return np.log(self._column(lambda p: p.predicted)) - np.log(self._column(lambda p: p.observed))

    @property
    def at_reach(self) -> np.ndarray:
        """Which predictions measure the error at the reach: those of the cut-offs that left a full reach of
        budgets ahead (all of them where no cut-off did); the later cut-offs' shorter predictions serve the choice
        and the intervals' growth with reach."""
        full = np.array([p.full for p in self.points], dtype=bool)
        return full if full.any() else np.ones(len(self.points), dtype=bool)

    @property
    def rmse_log(self) -> float | None:
        """RMSE of log(predicted / observed) at the reach (Alabdulmohsin et al. 2022's metric; `at_reach`)."""
        return float(np.sqrt(np.mean(self.log_err[self.at_reach] ** 2))) if self.points else None

    @property
    def abs_err_mean(self) -> float | None:
        """Mean |predicted - observed| at the reach, in the error's units (0.03 = 3 points of accuracy)."""
        if not self.points:
            return None
        miss = self._column(lambda p: p.predicted) - self._column(lambda p: p.observed)
        return float(np.mean(np.abs(miss)[self.at_reach]))

    def by_reach(self, reach: float, bins: int = 3) -> list[dict]:
        """RMSE of log predictions in `bins` equal bins of reach over (0, reach] decades."""
        out, r, err = [], self.reach, self.log_err
        edges = np.linspace(0, reach, bins + 1)
        for lo, hi in zip(edges[:-1], edges[1:]):
            m = (r > lo) & (r <= hi * (1 + 1e-9))
            out.append({"reach_decades": [float(lo), float(hi)], "n": int(m.sum()),
                        "rmse_log": float(np.sqrt(np.mean(err[m] ** 2))) if m.any() else None})
        return out

    def to_dict(self, reach: float) -> dict:
        return {"form": self.form.name.value, "status": self.status.value, "message": self.message,
                "rmse_log": self.rmse_log, "abs_err_mean": self.abs_err_mean, "n_predictions": len(self.points),
                "n_at_reach": int(self.at_reach.sum()) if self.points else 0,
                "by_reach": self.by_reach(reach),
                "points": [p.to_dict() for p in self.points[:MAX_LISTED]],
                "fits": [{"cutoff": k, "params": v} for k, v in self.fits.items()]}


@dataclass
class Backtest:
    reach: float  # decades asked for
    achieved: float = 0.0  # the longest reach of any prediction made
    cutoffs: list[float] = field(default_factory=list)
    forms: list[FormBacktest] = field(default_factory=list)
    message: str | None = None
    subsample: int | None = None  # the points used, where the curve had more than MAX_POINTS
    spread: list[FormBacktest] = field(default_factory=list)  # the weighted forms at the SPREAD cut-offs: the
    # intervals' error model only
    # the points the fits drew from (the curve, or its even subsample): spread_backtest fits the same ones
    compute: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False, compare=False)
    error: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False, compare=False)

    @property
    def weight_power(self) -> float:
        """The power of the forms' weights, score^-weight_power: WEIGHT_POWER where the backtest reached the reach
        asked, scaled down by the share it reached where the curve was too short (module docstring, "Choice")."""
        share = min(1.0, self.achieved / self.reach) if self.reach > 0 else 1.0
        return WEIGHT_POWER * share

    def get(self, form: Form) -> FormBacktest | None:
        return next((f for f in self.forms if f.form.name == form.name), None)

    def to_dict(self) -> dict:
        return {"reach_decades": self.reach, "achieved_reach_decades": self.achieved,
                "weight_power": self.weight_power, "cutoffs": self.cutoffs,
                "message": self.message, "subsample": self.subsample,
                "forms": [f.to_dict(self.reach) for f in self.forms],
                "spread": [b.to_dict(self.reach) for b in self.spread]}


def _cutoffs(budgets: np.ndarray, reach: float, min_fit: int, n_cutoffs: int) -> list[int]:
    """Indices j (fit on budgets[: j + 1]), ascending; module docstring, "Cut-offs"."""
    allowed = np.arange(min_fit - 1, len(budgets) - 1)
    if allowed.size == 0:
        return []
    steps = [1.0 - CUTOFF_STEP * i for i in range(1, LATER + 1)]  # the later ones: 3/4 and 1/2 of the reach
    steps = [1.0, *steps, *(1.0 + CUTOFF_STEP * i for i in range(1, n_cutoffs))][:n_cutoffs]
    out: list[int] = []
    for s in steps:
        ok = allowed[budgets[allowed] * 10 ** (s * reach) <= budgets[-1] * (1 + 1e-9)]
        j = int(ok[-1]) if ok.size else (int(allowed[0]) if s == 1.0 else None)  # short: the longest reach
        if j is not None and j not in out:
            out.append(j)
    return sorted(out)


def _predict_from(fb: FormBacktest, c: np.ndarray, e: np.ndarray, cut: float, reach: float, top: float) -> bool:
    """Fit fb.form on the points up to `cut` and add its predictions of those up to `reach` decades past it (`top`:
    the largest budget); False (fb's status says why) if the fit failed."""
    seen = c <= cut
    ahead = ~seen & (c <= cut * 10**reach * (1 + 1e-9))
    small = fit_curve(c[seen], e[seen], fb.form, bootstrap=0)
    if not small.ok:
        fb.status, fb.message = small.status, small.message
        return False
    fb.fits[cut] = small.values()
    fb.noise[cut] = dof_noise(small.rmse_log, small.n_points, fb.form.n_params)
    full = bool(cut * 10**reach <= top * (1 + 1e-9))
    fb.points += [Prediction(cut, x, o, p, full) for x, o, p in
                  zip(c[ahead].tolist(), e[ahead].tolist(), small.predict(c[ahead]).tolist())]
    return True


def _subsample(c: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, int | None]:
    """An even subsample of MAX_POINTS in compute order where the curve has more: the backtest's fits are many."""
    if len(c) <= MAX_POINTS:
        return c, e, None
    keep = np.sort(np.argsort(c, kind="stable")[np.linspace(0, len(c) - 1, MAX_POINTS).astype(int)])
    return c[keep], e[keep], MAX_POINTS


def run_backtest(compute: np.ndarray, error: np.ndarray, forms: list[Form], reach: float,
                 n_cutoffs: int = N_CUTOFFS) -> Backtest:
    """Fit every form on the budgets up to each cut-off and predict the points up to `reach` decades past it."""
    out = Backtest(reach=float(reach))
    c, e, out.subsample = _subsample(np.asarray(compute, float), np.asarray(error, float))
    out.compute, out.error = c, e
    budgets = np.unique(c)
    candidates = sorted(forms, key=lambda f: f.n_params)
    idx: list[int] = []
    while candidates:
        idx = _cutoffs(budgets, reach, candidates[-1].n_params + 1, n_cutoffs)
        if idx:
            break
        dropped = candidates.pop()
        out.forms.append(FormBacktest(dropped, FitStatus.TOO_FEW_POINTS,
                                      f"{len(budgets)} distinct budgets: too few to fit the {dropped.name.value} "
                                      f"law ({dropped.n_params} parameters) on a part and predict the rest"))
    if not idx:
        out.message = f"{len(budgets)} distinct budgets: too few for any backtest"
        return out
    out.cutoffs = [float(budgets[j]) for j in idx]
    for form in candidates:
        fb = FormBacktest(form)
        for j in idx:
            if not _predict_from(fb, c, e, float(budgets[j]), reach, float(budgets[-1])):
                break
        out.forms.append(fb)
    out.forms.sort(key=lambda f: [g.name for g in forms].index(f.form.name))
    reaches = [float(f.reach.max()) for f in out.forms if f.points]
    out.achieved = max(reaches, default=0.0)
    if out.achieved < reach * (1 - 1e-6):
        out.message = (f"the measured range allows a backtest reach of {out.achieved:.2g} decades of the "
                       f"{reach:.2g} asked: errors further out are not measured")
    return out


def per_decade_score(b: FormBacktest) -> float | None:
    """The backtest's error per decade of reach: each cut-off's mean square log error over its mean square reach,
    weighted RECENCY x the next lower cut-off's, square-rooted (module docstring, "Choice")."""
    if not b.points:
        return None
    cut, err, reach = b.cutoff, b.log_err, b.reach
    levels = np.unique(cut)  # ascending
    w = RECENCY ** np.arange(len(levels), dtype=float)
    per = np.array([np.mean(err[cut == c] ** 2) / max(float(np.mean(reach[cut == c] ** 2)), 1e-12)
                    for c in levels])
    return float(np.sqrt(np.sum(w * per) / np.sum(w)))


def scores(backtest: Backtest, fits: list[CurveFit]) -> dict[FormName, float]:
    """Each form's backtest score, lower is better: per_decade_score x RICHER^-(p - p_min), over the forms fitted
    and backtested (module docstring, "Choice"); {} where none was."""
    ok = {f.form.name for f in fits if f.ok}
    scored = [(per_decade_score(b), b.form) for b in backtest.forms
              if b.rmse_log is not None and b.status == FitStatus.OK and b.form.name in ok]
    if not scored:
        return {}
    fewest = min(f.n_params for _, f in scored)
    return {f.name: max(s * RICHER ** -(f.n_params - fewest), 1e-12) for s, f in scored}


def prior_scores(per_group: list[dict[FormName, float]]) -> dict[FormName, float]:
    """The groups' prior (module docstring, "Prior"): per form, the geometric mean of its score over the groups
    that scored it; {} with fewer than two such groups (one curve is its own evidence)."""
    per_group = [s for s in per_group if s]
    if len(per_group) < 2:
        return {}
    names = sorted({n for s in per_group for n in s}, key=list(FormName).index)
    logs = {n: [math.log(s[n]) for s in per_group if n in s] for n in names}
    return {n: math.exp(math.fsum(v) / len(v)) for n, v in logs.items()}  # fsum: the groups' order cannot matter


def blended_scores(backtest: Backtest, fits: list[CurveFit], prior: dict[FormName, float] | None = None
                   ) -> dict[FormName, float]:
    """The score each form is chosen and weighted by: its own backtest score (`scores`) blended with the groups'
    `prior` where that has the form, own^(1 - PRIOR_SHARE) x prior^PRIOR_SHARE (module docstring, "Prior");
    {} where no form was backtested."""
    prior = prior or {}
    return {n: s ** (1 - PRIOR_SHARE) * prior[n] ** PRIOR_SHARE if n in prior else s
            for n, s in scores(backtest, fits).items()}


def choose(backtest: Backtest, fits: list[CurveFit], prior: dict[FormName, float] | None = None
           ) -> tuple[CurveFit | None, dict[str, float], CurveFit | None]:
    """(the chosen form, weights by form name (the combination's, vitbench.fit.combine), the runner-up); module
    docstring, "Choice" and "Prior" (`prior`: prior_scores over the fit's groups). Without a backtest: the fitted
    form with the fewest parameters, weight 1, no runner-up."""
    ok = {f.form.name: f for f in fits if f.ok}
    blend = blended_scores(backtest, fits, prior)
    if not blend:
        best = min(ok.values(), key=lambda f: f.form.n_params, default=None)
        return best, ({best.form.name.value: 1.0} if best else {}), None
    ranked = sorted(blend, key=lambda n: (blend[n], ok[n].form.n_params))
    w = np.array([blend[n] ** -backtest.weight_power for n in blend])  # module docstring, "Choice"
    w /= w.sum()
    second = ok[ranked[1]] if len(ranked) > 1 else None
    return ok[ranked[0]], {n.value: float(x) for n, x in zip(blend, w)}, second


def _weighted_quantiles(values: np.ndarray, weights: np.ndarray, qs) -> np.ndarray:
    """Quantiles of a weighted sample along axis 0: values (N, m), weights (N,) -> (len(qs), m)."""
    order = np.argsort(values, axis=0)
    v = np.take_along_axis(values, order, axis=0)
    cw = np.cumsum(weights[order], axis=0)
    cw /= cw[-1]
    return np.stack([v[np.argmax(cw >= q - 1e-12, axis=0), np.arange(v.shape[1])] for q in qs])


def param_log_var(fits: list[CurveFit], weights: dict[str, float], compute) -> np.ndarray:
    """The parameter term of a prediction interval: the weighted mean over the forms of each one's bootstrap
    variance of its log curve about its own estimate. Not about the combined prediction: how far the forms
    disagree is the law's error, which the law term measures on the combination's backtest misses
    (vitbench.fit.interval); counting it here too made the intervals hold 96-100 % where 95 % was asked
    (docs/scaling-laws.md, issue 49). The replicates as drawn, not stretched by t(n - p)/z as the parameters' CIs
    are: the interval's Student quantile counts the few points already."""
    total, acc = 0.0, np.zeros(len(np.atleast_1d(compute)))
    for f in fits:
        w = weights.get(f.form.name.value, 0.0)
        if f.ok and w > 0:
            acc += w * np.mean((f.log_draws(compute, stretched=False) - f.log_predict(compute)) ** 2, axis=0)
            total += w
    return acc / total if total > 0 else acc


def spread_backtest(form: Form, backtest: Backtest) -> FormBacktest:
    """`form` fitted at the SPREAD cut-offs (SPREAD x the reach before the last budget, each predicting a reach
    ahead) on the backtest's own points (its subsample, where it took one), for the law's error model only (module
    docstring, "Spread"); cut-offs that leave `form` no more budgets than parameters, or that the choice's cut-offs
    already hold, are skipped."""
    c, e = backtest.compute, backtest.error
    budgets, reach = np.unique(c), backtest.reach
    fb = FormBacktest(form)
    allowed = budgets[form.n_params:-1]  # fits on at least n_params + 1 budgets, something ahead
    for s in SPREAD:
        ok = allowed[allowed * 10 ** (s * reach) <= budgets[-1] * (1 + 1e-9)]
        if ok.size and float(ok[-1]) not in backtest.cutoffs and float(ok[-1]) not in fb.fits:
            _predict_from(fb, c, e, float(ok[-1]), reach, float(budgets[-1]))
    return fb


def mixture_param(fits: list[CurveFit], weights: dict[str, float], name: str, ci: float
                  ) -> tuple[float, float] | None:
    """`ci` interval of parameter `name` over the weighted mixture of the forms' bootstrap replicates."""
    draws, wts = [], []
    for f in fits:
        w = weights.get(f.form.name.value, 0.0)
        if not (f.ok and w > 0 and name in f.params):
            continue
        reps = f.user_replicates(name)
        reps = np.array([f.params[name].value]) if reps is None else reps
        draws.append(reps)
        wts.append(np.full(len(reps), w / len(reps)))
    if not draws:
        return None
    q = _weighted_quantiles(np.concatenate(draws)[:, None], np.concatenate(wts), [(1 - ci) / 2, (1 + ci) / 2])
    return float(q[0, 0]), float(q[1, 0])


def default_reach(compute: np.ndarray, predict: list[float] | None, reach: float | None) -> float:
    """Decades to judge extrapolation at: `reach`, else as far as the furthest --predict value, else a third of
    the measured decades (at least 0.1 decade)."""
    if reach is not None:
        return float(reach)
    top, span = float(np.max(compute)), float(np.log10(np.max(compute) / np.min(compute)))
    if predict:
        far = math.log10(max(predict) / top)
        if far > 0:
            return far
    return max(0.1, DEFAULT_REACH_SHARE * span)
