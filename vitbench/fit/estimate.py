"""Fitting one form to one set of (compute, error) points: robust estimate, bootstrap CIs, degenerate fits said.

Estimate. Residuals are taken in log space, r_i = log E_hat(C_i) - log E_i, so a point at 2 % error weighs as
much as one at 40 % (errors span orders of magnitude along a scaling curve) and the fit is scale-free; the loss
on them is Huber's (vitbench.fit.solve). Compute is divided by its geometric mean (well-conditioned whatever the
unit), the parameters are bounded (vitbench.fit.forms), and the fit starts from a grid of starting points: the
_REFINE with the lowest loss are refined together (batched Levenberg-Marquardt), the best one polished by scipy's
least_squares. Curves of more than _SUBSAMPLE points choose their starts on an even subsample.

Confidence intervals. Residual (model-based) bootstrap (Davison & Hinkley 1997, "Bootstrap Methods and their
Application", ch. 6): the compute budgets are a design, not a sample, so the points stay where they are and the
centred log residuals, inflated by sqrt(n / (n - p)), are resampled onto the fitted curve; all replicates are
refitted at once, warm-started from the estimate (above _ONE_STEP points: one Gauss-Newton step from it, the
linearised bootstrap, as accurate there and 50x cheaper). Percentile intervals (Efron & Tibshirani 1993, Eq.
13.5), each side stretched by t(n - p) / z (few points: the resampled residuals know nothing of the n - p
degrees of freedom their spread came from; measured 95 % coverage ~0.75 at n = 6 without, ~0.92 with). A
percentile interval can miss its own estimate (few replicates, a skewed or biased bootstrap: `--bootstrap 2` gave
a = 0.5265 with [0.5303, 0.5799]); its side is then taken to the estimate before the stretch, which a stretch
away from the estimate needs (it would push that side further off).
A form needs as many distinct compute budgets as parameters to be fitted, more points than parameters for a CI.

Degenerate fits. A parameter at a bound is named with what the fit has become (forms.Collapse): an offset law
whose e_inf sits at 0 is the power law, an M4 whose alpha is 0 the offset law, an exponent at B_MAX means none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
from scipy import stats

from vitbench.fit import solve
from vitbench.fit.forms import FORMS, Collapse, Form, FormName, Side
from vitbench.fit.spec import CI, N_BOOT

_REFINE = 8  # starts refined by the optimiser: the ones with the lowest loss on the grid
_SUBSAMPLE = 4096  # points the start search uses at most
_ONE_STEP = 20_000  # points above which a bootstrap replicate is one Gauss-Newton step (linearised bootstrap)
_BOOT_ITER = 50  # LM iterations of a replicate, warm-started from the estimate (converged ones stop in ~5)
_AT_BOUND = 1e-6  # share of a parameter's range within which it counts as at its bound
_CHUNK = 4_000_000  # (replicates x points x parameters) evaluated at once: bounds the bootstrap's memory


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
class CurveFit:
    """One form fitted to one group's points (user units: the compute column's, the error's)."""

    form: Form
    status: FitStatus
    message: str | None = None
    n_points: int = 0
    params: dict[str, ParamEstimate] = field(default_factory=dict)
    rmse_log: float | None = None  # in-sample RMSE of log(predicted / observed)
    degenerate: list[Collapse] = field(default_factory=list)  # parameters at a bound (forms.Collapse)
    ci: float = CI
    widen: float = 1.0  # small-sample stretch of every interval: t(n - p) / z (module docstring)
    z: np.ndarray | None = None  # internal estimate (normalised compute, log a)
    scale: float = 1.0  # compute normalisation
    z_reps: np.ndarray | None = None  # (n_ok, p) internal bootstrap replicates
    user_bounds: tuple[np.ndarray, np.ndarray] | None = None  # each parameter's range, user units

    @property
    def ok(self) -> bool:
        return self.status == FitStatus.OK

    @property
    def exponent_at_bound(self) -> bool:
        """b ended at its upper bound: the points fix no exponent (flat within the noise, or one step down)."""
        return any(c.param == "b" and c.side == Side.HIGH for c in self.degenerate)

    @property
    def n_replicates(self) -> int:
        return 0 if self.z_reps is None else len(self.z_reps)

    def values(self) -> dict[str, float]:
        return {k: v.value for k, v in self.params.items()}

    def log_predict(self, compute) -> np.ndarray:
        return self.form.log_predict(self.z, np.asarray(compute, dtype=float) / self.scale)

    def predict(self, compute) -> np.ndarray:
        return np.exp(self.log_predict(compute))

    def log_draws(self, compute, stretched: bool = True) -> np.ndarray:
        """(R, m) log predictions of the bootstrap replicates, stretched by `widen` about the estimate (unless
        `stretched` is False: as drawn); the estimate alone (1, m) without replicates."""
        mid = self.log_predict(compute)[None, :]
        if self.n_replicates < 2:
            return mid
        x = np.asarray(compute, dtype=float) / self.scale
        with np.errstate(all="ignore"):
            reps = self.form.log_predict(self.z_reps, x)
        reps = np.where(np.isfinite(reps), reps, mid)
        return mid + (self.widen if stretched else 1.0) * (reps - mid)

    def band(self, compute) -> tuple[np.ndarray, np.ndarray] | None:
        """Pointwise `ci` band of the fitted curve over the bootstrap replicates (None without replicates)."""
        if self.n_replicates < 2:
            return None
        alpha = (1 - self.ci) / 2
        lo, hi = np.quantile(self.log_draws(compute), [alpha, 1 - alpha], axis=0)
        return np.exp(lo), np.exp(hi)

    def user_replicates(self, name: str) -> np.ndarray | None:
        """Bootstrap replicates of parameter `name` in user units, stretched by `widen` about the estimate."""
        if self.n_replicates < 2 or name not in self.form.params:
            return None
        i = self.form.params.index(name)
        reps = self.form.to_user(self.z_reps, self.scale)[:, i]
        v = self.params[name].value
        out = v + self.widen * (reps - v)
        return out if self.user_bounds is None else np.clip(out, self.user_bounds[0][i], self.user_bounds[1][i])

    def to_dict(self) -> dict:
        return {"form": self.form.name.value, "formula": self.form.formula, "status": self.status.value,
                "message": self.message, "n_points": self.n_points, "exponent_at_bound": self.exponent_at_bound,
                "degenerate": [c.meaning for c in self.degenerate],
                "params": {k: v.to_dict() for k, v in self.params.items()}, "rmse_log": self.rmse_log,
                "bootstrap_replicates": self.n_replicates}


def _clean(compute, error) -> tuple[np.ndarray, np.ndarray]:
    c, e = np.asarray(compute, dtype=float), np.asarray(error, dtype=float)
    if c.shape != e.shape or c.ndim != 1:
        raise ValueError(f"compute and error must be 1-D of one length, got {c.shape} and {e.shape}")
    if not (np.all(np.isfinite(c)) and np.all(c > 0) and np.all(np.isfinite(e)) and np.all(e > 0)):
        raise ValueError("compute and error must be finite and > 0 (a log-space fit)")
    order = np.argsort(c, kind="stable")
    return c[order], e[order]


def too_few(form: Form, n_distinct: int, what: str = "this group") -> str:
    return (f"the {form.name.value} law has {form.n_params} parameters ({', '.join(form.params)}); {what} has "
            f"{n_distinct} distinct compute value{'s' if n_distinct != 1 else ''} (need at least {form.n_params})")


def _estimate(form: Form, x: np.ndarray, log_y: np.ndarray, lower, upper) -> np.ndarray | None:
    """Multi-start estimate of z (internal units) on normalised points."""
    sub = np.arange(len(x)) if len(x) <= _SUBSAMPLE else np.linspace(0, len(x) - 1, _SUBSAMPLE).astype(int)
    xs, ys = x[sub], log_y[sub]
    starts = np.clip(form.starts(np.exp(ys), xs), lower, upper)
    if not len(starts):
        return None
    costs = solve.loss(form, starts, xs, ys)
    starts = starts[np.argsort(costs)[:_REFINE]]
    z, cost = solve.lm(form, starts, xs, ys, lower, upper)
    if not np.isfinite(cost).any():
        return None
    best = z[int(np.argmin(cost))]
    polished = solve.polish(form, best, xs, ys, lower, upper)
    if polished is not None:
        pair = solve.loss(form, np.stack([polished, best]), xs, ys)
        best = polished if pair[0] < pair[1] else best
    if len(sub) < len(x):  # refine on every point from the subsample's answer
        best = solve.lm(form, best[None], x, log_y, lower, upper, _BOOT_ITER)[0][0]
    return best


def _snap(z: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """A value within _AT_BOUND of its range from a bound is the bound (e_inf = 0, not 1e-22)."""
    span = upper - lower
    return np.where(z - lower < _AT_BOUND * span, lower, np.where(upper - z < _AT_BOUND * span, upper, z))


def _bootstrap(form: Form, z: np.ndarray, x: np.ndarray, log_y: np.ndarray, lower, upper, n_boot: int,
               rng: np.random.Generator) -> np.ndarray:
    n, p = len(x), len(z)
    fitted = form.log_predict(z, x)
    resid = fitted - log_y
    centred = (resid - resid.mean()) * math.sqrt(n / (n - p))
    out = []
    rows = max(1, _CHUNK // (n * p))
    if n > _ONE_STEP:  # the linearised bootstrap: one (Huber-weighted) Gauss-Newton step from the estimate
        jac = form.jac(z, x)
        ar = np.abs(resid)
        w = np.where(ar <= solve.HUBER_DELTA, 1.0, solve.HUBER_DELTA / np.maximum(ar, 1e-300))
        gram = jac.T @ (jac * w[:, None])
    for start in range(0, n_boot, rows):
        m = min(rows, n_boot - start)
        targets = fitted + centred[rng.integers(0, n, size=(m, n))]
        if n > _ONE_STEP:
            rhs = (jac * w[:, None]).T @ (targets - fitted).T  # (p, m): -J^T W r with r = fitted - targets
            step = np.linalg.lstsq(gram, rhs, rcond=None)[0].T
            out.append(np.clip(z + step, lower, upper))
        else:
            zs, cost = solve.lm(form, np.repeat(z[None], m, axis=0), x, targets, lower, upper, _BOOT_ITER)
            out.append(zs[np.isfinite(cost)])
    return np.concatenate(out) if out else np.empty((0, p))


def fit_curve(compute, error, form: FormName | Form = FormName.SATURATING, *, bootstrap: int = N_BOOT,
              ci: float = CI, seed: int = 0) -> CurveFit:
    """Fit `form` to positive (compute, error) points; bootstrap CIs with `bootstrap` replicates (0: none).

    Too few distinct compute budgets for the form is a CurveFit with status TOO_FEW_POINTS and a message,
    not an exception.
    """
    form = form if isinstance(form, Form) else FORMS[FormName(form)]
    c, e = _clean(compute, error)
    n, p = len(c), form.n_params
    out = CurveFit(form, FitStatus.OK, n_points=n, ci=ci)
    distinct = len(np.unique(c))
    if distinct < p:
        out.status, out.message = FitStatus.TOO_FEW_POINTS, too_few(form, distinct)
        return out
    out.scale = float(np.exp(np.mean(np.log(c))))  # geometric mean
    x, log_y = c / out.scale, np.log(e)
    lower, upper = form.bounds(e, x)
    z = _estimate(form, x, log_y, lower, upper)
    if z is None:
        out.status, out.message = FitStatus.FAILED, "the optimiser found no finite solution from any start"
        return out
    z = _snap(z, lower, upper)
    out.z = z
    values = form.to_user(z, out.scale)
    resid = form.log_predict(z, x) - log_y
    out.rmse_log = float(np.sqrt(np.mean(resid**2)))
    out.params = {k: ParamEstimate(float(values[i])) for i, k in enumerate(form.params)}
    for col in form.collapses:
        i = form.params.index(col.param)
        if (col.side == Side.LOW and z[i] <= lower[i]) or (col.side == Side.HIGH and z[i] >= upper[i]):
            out.degenerate.append(col)
    notes = [c.meaning for c in out.degenerate]
    if n <= p:
        notes.append(f"{n} points for {p} parameters: no residual left to resample, no confidence interval")
    out.message = "; ".join(notes) or None
    if n <= p or bootstrap <= 0:
        return out
    reps = _bootstrap(form, z, x, log_y, lower, upper, bootstrap, np.random.default_rng(seed))
    if len(reps) < 2:
        return out
    out.z_reps = reps
    out.widen = float(stats.t.ppf(0.5 + ci / 2, n - p) / stats.norm.ppf(0.5 + ci / 2))
    user_lo, user_hi = form.to_user(lower, out.scale), form.to_user(upper, out.scale)
    out.user_bounds = (user_lo, user_hi)
    for i, k in enumerate(form.params):
        v = out.params[k].value
        lo, hi = np.quantile(form.to_user(reps, out.scale)[:, i], [(1 - ci) / 2, (1 + ci) / 2])
        lo, hi = min(lo, v), max(hi, v)  # an interval that misses its estimate: reach it (module docstring)
        if k == "a":  # positive, spans decades: stretch on the log scale
            lo, hi = v * (lo / v) ** out.widen, v * (hi / v) ** out.widen
        else:
            lo = max(v - out.widen * (v - lo), user_lo[i])
            hi = min(v + out.widen * (hi - v), user_hi[i])
        out.params[k] = ParamEstimate(v, float(lo), float(hi))
    return out
