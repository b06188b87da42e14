"""Fitting one scaling law to one set of (compute, error) points: robust estimate, bootstrap CIs, held-out check.

Estimate. Residuals are taken in log space, r_i = log E_hat(C_i) - log E_i, so a point at 2 % error weighs as
much as one at 40 % (errors span orders of magnitude along a scaling curve) and the fit is scale-free.
The loss on them is Huber's (quadratic up to HUBER_DELTA, linear beyond), as Hoffmann et al. 2022
(Chinchilla, Sec. 3.3) do for loss-vs-compute fits, so one failed run does not drag the curve. Compute is
divided by its geometric mean before fitting (well-conditioned whatever the unit: FLOPs or exaFLOPs), the
parameters are bounded (b in [0, B_MAX], e_inf in [0, max E], c0 in [0, max C]), and the fit is run from a
grid of starting points (exponents, floors, offsets); the lowest loss wins (scipy `least_squares`, 'trf').

Confidence intervals. Residual (model-based) bootstrap (Davison & Hinkley 1997, "Bootstrap Methods and their
Application", ch. 6): the compute budgets are a design, not a sample, so the points stay where they are and
the centred log residuals, inflated by sqrt(n / (n - p)) for the p fitted parameters (their variance is
shrunk by the fit), are resampled onto the fitted curve; each replicate is refitted from the estimate, and
the percentile interval (Efron & Tibshirani 1993, Eq. 13.5) of each parameter is its CI. The same replicates
give the curve's pointwise band. With few points those intervals are too narrow (the resampled residuals
know nothing of the n - p degrees of freedom their spread was estimated from; measured 95 % coverage: ~0.75
at n = 6, ~0.88 at n = 12, docs/scaling-laws.md), so each side of an interval is stretched away from the
estimate by t(n - p) / z at the interval's level, the factor that turns a normal interval into Student's in
linear regression (a, and the band, on the log scale; clipped to the parameter bounds); measured coverage
then ~0.9-0.95. A form needs at least as many distinct compute budgets as parameters to be
fitted at all, and more points than parameters for a CI (with n = p it interpolates: no residual to resample).

Held-out check. Fit on the smaller budgets only and predict the largest ones, which the fit never saw
(Alabdulmohsin et al. 2022 argue for judging a scaling law by this extrapolation error, not by its
in-sample fit): reports the predictions, their mean absolute error (error units) and relative error.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
from scipy import stats
from scipy.optimize import least_squares

from vitbench.fit.forms import FORMS, PARAMS, Form, FormName
from vitbench.stats import percentile_interval

HUBER_DELTA = 0.1  # log-residual (~10 % relative error) where the loss turns linear; see the module docstring
B_MAX = 5.0  # exponent bound: published vision/language exponents are ~0.05-0.7 (Zhai 2022; Kaplan 2020)
N_BOOT = 1000  # bootstrap replicates: >= 1000 for percentile intervals (Efron & Tibshirani 1993, ch. 13)
HOLDOUT_FRACTION = 0.25  # share of the distinct compute budgets (the largest ones) kept out of the fit
_LOG_A = (math.log(1e-30), math.log(1e30))  # bounds on log(a) in normalised compute units
_STARTS_B = (0.05, 0.2, 0.5, 1.0, 2.0)
_STARTS_FLOOR = (0.0, 0.5, 0.9)  # x min(E)
_STARTS_C0 = (0.0, 1.0, 10.0)  # x min(C) (normalised)
_REFINE = 8  # starts refined by the optimiser: the ones with the lowest loss on the grid


class FitStatus(str, Enum):
    OK = "ok"
    TOO_FEW_POINTS = "too_few_points"
    FAILED = "failed"


@dataclass
class ParamEstimate:
    value: float
    ci_low: float | None = None
    ci_high: float | None = None

    def to_dict(self) -> dict:
        return {"value": self.value, "ci_low": self.ci_low, "ci_high": self.ci_high}


@dataclass
class HeldOut:
    """Fit on the budgets below `cutoff`, predictions at the held-out budgets (>= cutoff)."""

    status: FitStatus
    message: str | None = None
    cutoff: float | None = None  # smallest held-out compute
    n_fit: int = 0
    compute: list[float] = field(default_factory=list)  # held-out points
    observed: list[float] = field(default_factory=list)
    predicted: list[float] = field(default_factory=list)
    params: dict[str, float] = field(default_factory=dict)  # of the fit on the smaller budgets

    @property
    def abs_err_mean(self) -> float | None:
        """Mean |predicted - observed| over held-out points, in the error's units (0.03 = 3 points of %)."""
        if not self.observed:
            return None
        return float(np.mean(np.abs(np.subtract(self.predicted, self.observed))))

    @property
    def rel_err_mean(self) -> float | None:
        """Mean |predicted - observed| / observed over held-out points."""
        if not self.observed:
            return None
        return float(np.mean(np.abs(np.subtract(self.predicted, self.observed)) / np.asarray(self.observed)))

    def to_dict(self) -> dict:
        return {"status": self.status.value, "message": self.message, "cutoff_compute": self.cutoff,
                "n_fit": self.n_fit, "n_heldout": len(self.observed), "abs_err_mean": self.abs_err_mean,
                "rel_err_mean": self.rel_err_mean,
                "points": [{"compute": c, "observed": o, "predicted": p}
                           for c, o, p in zip(self.compute, self.observed, self.predicted)],
                "params": self.params}


@dataclass
class CurveFit:
    """One form fitted to one group's points (user units: the compute column's, the error's)."""

    form: Form
    status: FitStatus
    message: str | None = None
    n_points: int = 0
    params: dict[str, ParamEstimate] = field(default_factory=dict)
    rmse_log: float | None = None  # in-sample RMSE of log(predicted / observed)
    replicates: np.ndarray | None = None  # (n_ok, len(PARAMS)) bootstrap parameters, user units
    ci: float = 0.95
    widen: float = 1.0  # small-sample stretch of every interval: t(n - p) / z (module docstring)
    heldout: HeldOut | None = None

    @property
    def ok(self) -> bool:
        return self.status == FitStatus.OK

    @property
    def exponent_at_bound(self) -> bool:
        """b ended at B_MAX: the points fix no exponent (flat within the noise, or one step down)."""
        return "b" in self.params and self.params["b"].value >= B_MAX * (1 - 1e-6)

    def values(self) -> dict[str, float]:
        return {k: v.value for k, v in self.params.items()}

    def predict(self, compute) -> np.ndarray:
        return self.form.predict(self.values(), compute)

    def band(self, compute) -> tuple[np.ndarray, np.ndarray] | None:
        """Pointwise `ci` band of the fitted curve over the bootstrap replicates (None without replicates)."""
        if self.replicates is None or len(self.replicates) < 2:
            return None
        curves = np.stack([self.form.predict(dict(zip(PARAMS, r)), compute) for r in self.replicates])
        alpha = (1 - self.ci) / 2
        lo, hi = np.quantile(curves, [alpha, 1 - alpha], axis=0)
        mid = self.predict(compute)
        return mid * (lo / mid) ** self.widen, mid * (hi / mid) ** self.widen

    def to_dict(self) -> dict:
        return {"form": self.form.name.value, "formula": self.form.formula, "status": self.status.value,
                "message": self.message, "n_points": self.n_points, "exponent_at_bound": self.exponent_at_bound,
                "params": {k: v.to_dict() for k, v in self.params.items()}, "rmse_log": self.rmse_log,
                "bootstrap_replicates": 0 if self.replicates is None else len(self.replicates),
                "heldout": self.heldout.to_dict() if self.heldout else None}


# ---------------------------------------------------------------------------------------------------------
# Internals: the parameter vector is (log a, b, e_inf, c0) with compute normalised by `scale`.
# ---------------------------------------------------------------------------------------------------------
_INTERNAL = ("a", "b", "e_inf", "c0")  # position of each user parameter in the internal vector


def _model(z: np.ndarray, x: np.ndarray) -> np.ndarray:
    log_a, b, e_inf, c0 = z
    return e_inf + np.exp(log_a - b * np.log(x + c0))


class _Problem:
    """Points in normalised units and the free/fixed split of one form."""

    def __init__(self, form: Form, compute: np.ndarray, error: np.ndarray):
        self.form = form
        self.scale = float(np.exp(np.mean(np.log(compute))))  # geometric mean
        self.x = compute / self.scale
        self.y = error
        self.log_y = np.log(error)
        self.free = np.array([_INTERNAL[i] in form.free for i in range(4)])
        self.lower = np.array([_LOG_A[0], 0.0, 0.0, 0.0])[self.free]
        self.upper = np.array([_LOG_A[1], B_MAX, float(error.max()), float(self.x.max())])[self.free]

    def full(self, zf: np.ndarray) -> np.ndarray:
        z = np.zeros(4)
        z[self.free] = zf
        return z

    def residuals(self, zf: np.ndarray, log_y: np.ndarray) -> np.ndarray:
        pred = _model(self.full(zf), self.x)
        return np.log(np.maximum(pred, 1e-300)) - log_y

    def jacobian(self, zf: np.ndarray, log_y: np.ndarray) -> np.ndarray:
        """d residual / d free parameters (analytic: ~2x faster than finite differences, and exact)."""
        log_a, b, e_inf, c0 = self.full(zf)
        log_xc = np.log(self.x + c0)
        t = np.exp(log_a - b * log_xc)
        m = np.maximum(e_inf + t, 1e-300)
        cols = (t / m, -log_xc * t / m, 1.0 / m, -b * t / ((self.x + c0) * m))
        return np.stack(cols, axis=1)[:, self.free]

    def starts(self) -> list[np.ndarray]:
        y_min, x_min = float(self.y.min()), float(self.x.min())
        floors = [f * y_min for f in _STARTS_FLOOR] if "e_inf" in self.form.free else [0.0]
        offsets = [o * x_min for o in _STARTS_C0] if "c0" in self.form.free else [0.0]
        out = []
        for b in _STARTS_B:
            for e_inf in floors:
                for c0 in offsets:
                    # log a from the other three: the mean log of (E - e_inf) * (x + c0)^b
                    log_a = float(np.mean(np.log(np.maximum(self.y - e_inf, 1e-12)) + b * np.log(self.x + c0)))
                    zf = np.array([log_a, b, e_inf, c0])[self.free]
                    out.append(np.clip(zf, self.lower + 1e-12, self.upper - 1e-12))
        return out

    def cost(self, zf: np.ndarray, log_y: np.ndarray) -> float:
        """The Huber loss least_squares minimises (scipy's rho with f_scale = HUBER_DELTA), up to a constant."""
        r = np.abs(self.residuals(zf, log_y))
        return float(np.sum(np.where(r <= HUBER_DELTA, 0.5 * r**2, HUBER_DELTA * (r - 0.5 * HUBER_DELTA))))

    def solve(self, starts: list[np.ndarray], log_y: np.ndarray) -> np.ndarray | None:
        """Refine the _REFINE best starting points (by their loss) with least_squares; the lowest loss wins."""
        if len(starts) > _REFINE:
            with np.errstate(all="ignore"):
                costs = [self.cost(z0, log_y) for z0 in starts]
            starts = [starts[i] for i in np.argsort(costs)[:_REFINE]]
        best, best_cost = None, np.inf
        for z0 in starts:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    res = least_squares(self.residuals, z0, jac=self.jacobian, args=(log_y,),
                                        bounds=(self.lower, self.upper),
                                        loss="huber", f_scale=HUBER_DELTA, method="trf", max_nfev=2000)
            except (ValueError, FloatingPointError):
                continue
            if np.isfinite(res.cost) and res.cost < best_cost:
                best, best_cost = res.x, res.cost
        return best

    def user(self, zf: np.ndarray) -> np.ndarray:
        """Internal free vector -> user-unit values in PARAMS order (e_inf, a, b, c0); a value within 1e-9 of
        its range from a bound is reported as the bound (e.g. e_inf = 0, not 1e-22)."""
        span = self.upper - self.lower
        zf = np.where(zf - self.lower < 1e-9 * span, self.lower, np.where(self.upper - zf < 1e-9 * span,
                                                                            self.upper, zf))
        log_a, b, e_inf, c0 = self.full(zf)
        a = math.exp(log_a + b * math.log(self.scale))  # a (x/s + c0)^-b = a s^b (x + c0 s)^-b
        return np.array([e_inf, a, b, c0 * self.scale])


def _distinct(compute: np.ndarray) -> int:
    return len(np.unique(compute))


def _clean(compute, error) -> tuple[np.ndarray, np.ndarray]:
    c, e = np.asarray(compute, dtype=float), np.asarray(error, dtype=float)
    if c.shape != e.shape or c.ndim != 1:
        raise ValueError(f"compute and error must be 1-D of one length, got {c.shape} and {e.shape}")
    if not (np.all(np.isfinite(c)) and np.all(c > 0) and np.all(np.isfinite(e)) and np.all(e > 0)):
        raise ValueError("compute and error must be finite and > 0 (a log-space fit)")
    order = np.argsort(c, kind="stable")
    return c[order], e[order]


def _too_few(form: Form, n_distinct: int, what: str = "this group") -> str:
    return (f"the {form.name.value} law has {form.n_params} parameters ({', '.join(form.free)}); {what} has "
            f"{n_distinct} distinct compute value{'s' if n_distinct != 1 else ''} (need at least {form.n_params})")


def fit_curve(compute, error, form: FormName | Form = FormName.SATURATING, *, bootstrap: int = N_BOOT,
              ci: float = 0.95, seed: int = 0) -> CurveFit:
    """Fit `form` to positive (compute, error) points; bootstrap CIs with `bootstrap` replicates (0: none).

    Too few distinct compute budgets for the form is a CurveFit with status TOO_FEW_POINTS and a message,
    not an exception.
    """
    form = form if isinstance(form, Form) else FORMS[FormName(form)]
    c, e = _clean(compute, error)
    n, p = len(c), form.n_params
    out = CurveFit(form, FitStatus.OK, n_points=n, ci=ci)
    if _distinct(c) < p:
        out.status, out.message = FitStatus.TOO_FEW_POINTS, _too_few(form, _distinct(c))
        return out
    prob = _Problem(form, c, e)
    z = prob.solve(prob.starts(), prob.log_y)
    if z is None:
        out.status, out.message = FitStatus.FAILED, "the optimiser found no finite solution from any start"
        return out
    values = prob.user(z)
    resid = prob.residuals(z, prob.log_y)
    out.rmse_log = float(np.sqrt(np.mean(resid**2)))
    out.params = {k: ParamEstimate(float(values[PARAMS.index(k)])) for k in form.free}
    notes = []
    if out.exponent_at_bound:
        notes.append(f"b at its bound {B_MAX:g}: the points do not determine an exponent (the error is flat "
                     "within the noise, or drops in one step); read e_inf, not b")
    if n <= p:
        notes.append(f"{n} points for {p} parameters: no residual left to resample, no confidence interval")
    out.message = "; ".join(notes) or None
    if n <= p:
        return out
    if bootstrap <= 0:
        return out
    rng = np.random.default_rng(seed)
    fitted = np.log(_model(prob.full(z), prob.x))
    centred = (resid - resid.mean()) * math.sqrt(n / (n - p))
    reps = []
    for _ in range(bootstrap):
        log_y_star = fitted + rng.choice(centred, size=n, replace=True)
        z_star = prob.solve([z], log_y_star)
        if z_star is not None:
            reps.append(prob.user(z_star))
    if len(reps) >= 2:
        out.replicates = np.array(reps)
        out.widen = float(stats.t.ppf(0.5 + ci / 2, n - p) / stats.norm.ppf(0.5 + ci / 2))
        bounds = {"e_inf": (0.0, float(e.max())), "b": (0.0, B_MAX), "c0": (0.0, float(c.max()))}
        for k in form.free:
            v = out.params[k].value
            lo, hi = percentile_interval(out.replicates[:, PARAMS.index(k)], ci)
            if k == "a":  # positive, spans decades: stretch on the log scale
                lo, hi = v * (lo / v) ** out.widen, v * (hi / v) ** out.widen
            else:
                lo = max(v - out.widen * (v - lo), bounds[k][0])
                hi = min(v + out.widen * (hi - v), bounds[k][1])
            out.params[k] = ParamEstimate(v, lo, hi)
    return out


def holdout_check(compute, error, form: FormName | Form = FormName.SATURATING, *,
                  fraction: float = HOLDOUT_FRACTION) -> HeldOut:
    """Fit `form` on all but the largest `fraction` of the distinct compute budgets (at least one held out)
    and predict the held-out points; the fit never sees them."""
    form = form if isinstance(form, Form) else FORMS[FormName(form)]
    c, e = _clean(compute, error)
    budgets = np.unique(c)
    k = max(1, math.ceil(fraction * len(budgets)))
    if len(budgets) - k < form.n_params:
        return HeldOut(FitStatus.TOO_FEW_POINTS, _too_few(form, len(budgets) - k, f"after holding out the "
                                                          f"largest {k} of {len(budgets)} budgets, the fit"))
    cutoff = float(budgets[-k])
    seen = c < cutoff
    small = fit_curve(c[seen], e[seen], form, bootstrap=0)
    if not small.ok:
        return HeldOut(small.status, small.message, cutoff, int(seen.sum()))
    return HeldOut(FitStatus.OK, None, cutoff, int(seen.sum()), c[~seen].tolist(), e[~seen].tolist(),
                   small.predict(c[~seen]).tolist(), small.values())
