"""float64 and statistical bounds: bookkeeping arithmetic in float64 (means, sums, ratios: `f64`), LAPACK's SVD,
sampling error of the compare tests' estimators, and how close a stopped scaling-law fit is to its data's
parameters (issue 30: every tolerance derived from a stated bound). The fp32 / bf16 rounding bounds of two programs
computing the same model: tests/tolerances_fp.py.
"""

from __future__ import annotations

import numpy as np

EPS64 = float(np.finfo(np.float64).eps)  # 2**-52 = 2.2e-16


def gamma(n: int, eps: float = EPS64) -> float:
    """Relative error of a float result after n roundings, each at most eps / 2 of its value (Higham, eq. 2.4):
    n * eps covers Higham's gamma_n = n u / (1 - n u), u = eps / 2 (lemma 3.1), twice over. A chain of n
    operations, or a sum of n + 1 terms of one sign (eq. 4.4; terms of both signs: relative to sum |terms|)."""
    return n * eps


def svd_perturbation(x, roundings: int) -> float:
    """||E||_2 of the matrix whose exact SVD a float64 SVD of the m x n matrix `x` returns, `x` itself computed
    with `roundings` roundings per entry: the entries' errors (Frobenius norm: sqrt(m n) gamma(roundings) max|x|)
    plus LAPACK's backward error p(m, n) eps ||x||_2 (LAPACK Users' Guide, 3rd ed., sec. 4.9: p a modestly growing
    function of m and n; m n taken here, a bound on the ones it names). Wedin's theorem then moves a singular
    subspace by sin(theta) <= ||E|| / gap, and a singular value by at most ||E|| (Weyl)."""
    a = np.asarray(x, np.float64)
    m, n = a.shape
    return (m * n) ** 0.5 * gamma(roundings) * float(np.abs(a).max()) + m * n * EPS64 * float(np.linalg.norm(a, 2))


def f64(expected, roundings: int, scale: float | None = None):
    """pytest.approx for bookkeeping arithmetic in float64 (means, sums, ratios, unit conversions): each of the two
    computations compared rounds at most `roundings` times along its chain (a decimal literal such as 0.89 counts
    one: it is read as the nearest double), on terms of magnitude at most `scale`, so the two differ by at most
    2 * roundings * EPS64 * scale (Higham's gamma_n on either side, x 2 for both). `scale` defaults to the largest
    |expected|, right where no term exceeds the result (sums of positive terms, products, quotients); where terms
    cancel (a difference of two means, an interquartile range) pass the terms' size. A wrong formula is off by
    orders more than this ~1e-15 relative."""
    import pytest

    size = float(np.abs(np.asarray(expected, dtype=np.float64)).max()) if scale is None else scale
    return pytest.approx(expected, rel=0, abs=2 * gamma(roundings) * size)


def f64_std(values):
    """pytest.approx for the sample standard deviation (ddof 1) of `values`, computed by another float64 program
    (pandas' or statistics' against numpy's): each deviation x - mean is off by the mean's n roundings plus its own
    one, absolutely, of max |x| (gamma_{n+1}); sqrt(sum d^2 / (n - 1)) moves by at most sqrt(n / (n - 1)) <= 1.5
    times that; the squares, the sum, the division and the square root add n + 3 roundings relative to the std,
    which is at most 1.5 x 2 max |x|. Both programs: x 2 (inside f64)."""
    x = np.asarray(values, dtype=np.float64)
    n = len(x)
    return f64(float(np.std(x, ddof=1)), roundings=int(np.ceil(1.5 * (n + 1) + 3 * (n + 3))),
               scale=float(np.abs(x).max()))


# Statistical checks (the compare tests' synthetic step times, tests/test_compare.steps: n steps lognormal(0, cv),
# a fraction p of them x U(1.2, 2)): how far an estimate of a ratio falls from the truth by sampling alone. A check
# allows Z_STAT standard deviations: a correct estimator fails it with probability < 1e-6 (normal tail), a wrong
# one (a ratio inverted, a slowdown not applied, the mean of a spiky sample) is off by several times that.
Z_STAT = 5.0


def quantile_sd(cv: float, n: int, q: float, spike_p: float = 0.0) -> float:
    """Relative standard deviation of the q-quantile of such n step times: the sample quantile's asymptotic sd
    sqrt(q (1 - q) / n) / f(x_q), f(x_q) = phi(z_q) / cv the density of log-times there (Kendall's Advanced Theory
    of Statistics, vol. 1, 10.10); plus the spikes: K ~ Binomial(n, p) of them, all from below x_q (a x1.2 spike is
    6 cv up: always above it), leave (n - K) steps of which q n lie below it: the quantile moves up q K / n
    quantiles, (cv / phi(z_q)) q K / n in log-time (the two added, not in quadrature: an overstatement; at n = 50,
    cv 0.03, p 0.03: 0.0062 against 0.0054 simulated for the median, 0.0077 against 0.0070 for q = 0.1)."""
    from statistics import NormalDist

    z = NormalDist()
    density = np.exp(-z.inv_cdf(q) ** 2 / 2) / np.sqrt(2 * np.pi)
    return cv / density * (np.sqrt(q * (1 - q) / n) + q * np.sqrt(n * spike_p * (1 - spike_p)) / n)


def median_sd(cv: float, n: int, spike_p: float = 0.0) -> float:
    """Relative standard deviation of the median of such n steps (quantile_sd at q = 1/2)."""
    return quantile_sd(cv, n, 0.5, spike_p)


def min_sd(cv: float, n: int) -> float:
    """Relative standard deviation of the fastest of n such steps (spikes only slow a step): cv times the sd of
    the minimum of n standard normal log-times, integrated from its density n phi(x) (1 - Phi(x))^(n - 1)
    (David & Nagaraja, Order Statistics, eq. 2.1.4; 0.464 at n = 50)."""
    from math import erf

    x = np.linspace(-8.0, 8.0, 16001)
    upper = 1 - 0.5 * (1 + np.vectorize(erf)(x / np.sqrt(2)))
    f = n * np.exp(-x * x / 2) / np.sqrt(2 * np.pi) * upper ** (n - 1)
    dx = x[1] - x[0]
    mean = (x * f).sum() * dx
    return float(cv * np.sqrt(((x - mean) ** 2 * f).sum() * dx))


# --- scaling-law fits (vitbench.fit): how close a stopped fit is to the parameters of its data ---
FIT_ROUNDINGS = 32  # roundings of one log residual: the test's law (add, power, multiply, add, log: ~6) and the
# form's log_predict (normalise x, log, multiply, subtract, exp, add, log; M4's Newton solve stopped at its own
# rounding floor: ~10 more), each on terms of size fit_residual_floor's `size`; 32 covers both, twice over
SCIPY_FTOL = 1e-8  # scipy.optimize.least_squares' default ftol, which vitbench.fit.solve.polish leaves as it is


def _fit_jac(form, values: dict, compute):
    """(internal z, x, J = d log E / d z at z, scale) of `form` at user-unit `values` on `compute`, as fit_curve
    normalises them (x = C / geometric mean)."""
    c = np.asarray(compute, dtype=np.float64)
    scale = float(np.exp(np.mean(np.log(c))))
    z = form.from_user(values, scale)
    return z, c / scale, form.jac(z, c / scale), scale


def fit_residual_floor(form, values: dict, compute) -> float:
    """Largest |log residual| of the exact parameters on noise-free points: rounding only, FIT_ROUNDINGS of it on
    terms of at most `size` (the log of the error, log a, b log x)."""
    z, x, _, _ = _fit_jac(form, values, compute)
    size = 1.0 + float(np.abs(form.log_predict(z, x)).max()) + float(np.abs(z).max()) * max(
        1.0, float(np.abs(np.log(x)).max()))
    return gamma(FIT_ROUNDINGS) * size


def _to_user_error(form, z, dz: float, scale: float) -> dict:
    """Bound on |user value - truth| of each parameter when ||z - z_true||_2 <= dz: a = exp(log a + b log s) moves
    by (1 + |log s|) dz relative (x 2 for exp's curvature at dz << 1), c0 = z s by dz s, the others by dz."""
    user = form.to_user(z, scale)
    out = {}
    for i, k in enumerate(form.params):
        out[k] = (2 * (1 + abs(np.log(scale))) * dz * abs(user[i]) if k == "a"
                  else dz * scale if k == "c0" else dz)
    return out


def noiseless_fit_bound(form, values: dict, compute, extra: float = 0.0) -> dict:
    """|fitted - true| of each user-unit parameter of a fit to noise-free points of `form` at `values`. Their
    residuals at the truth are rounding (fit_residual_floor, rho), so the loss's minimum is that floor, and the
    solver reaches it: vitbench.fit.solve.lm is Gauss-Newton with Marquardt's damping (down to 1e-9), which on a
    zero-residual problem converges quadratically, so its stop (a kept step gaining < 1e-10 of the loss) and the
    polish's (scipy least_squares trf, ftol = xtol = gtol = 1e-8) come only once the residuals are rounding. A fit
    whose residuals are at most rho (rmse_log <= rho) is then, linearised (r = J dz), within ||dz||_2 <=
    sqrt(n) rho / sigma_min(J) of the truth in internal units (x 2: the truth's own residuals, and second order),
    carried to the user's units by _to_user_error. `extra`: any further rounding of the points' log errors (an
    error stored as 1 - accuracy: 2 EPS64 / min error)."""
    z, x, jac, scale = _fit_jac(form, values, compute)
    rho = fit_residual_floor(form, values, compute) + extra
    dz = 2 * 2 * np.sqrt(len(x)) * rho / float(np.linalg.svd(jac, compute_uv=False).min())
    return _to_user_error(form, z, dz, scale)


def stopped_fit_bound(form, values: dict, compute, rmse_log: float) -> dict:
    """|fitted - minimiser| of each user-unit parameter of a fit to noisy points (in-sample rmse_log) stopped by
    scipy least_squares' ftol rule (vitbench.fit.solve.polish; lm's own stop, 1e-10, is tighter): it stops when a
    step lowers the cost F = sum r^2 / 2 (Huber, quadratic below 0.1) by less than ftol F. Near the minimum a
    Gauss-Newton step removes the cost's excess 0.5 dz^T J^T J dz, so at the stop that excess is <= ftol F and
    ||dz|| <= sqrt(2 ftol F) / sigma_min(J) = sqrt(ftol n) rmse_log / sigma_min(J): the sqrt(ftol) law of a stopped
    least-squares fit. J at `values` (the fit's own estimate)."""
    z, x, jac, scale = _fit_jac(form, values, compute)
    dz = np.sqrt(SCIPY_FTOL * len(x)) * rmse_log / float(np.linalg.svd(jac, compute_uv=False).min())
    return _to_user_error(form, z, dz, scale)


def noiseless_prediction_bound(form, values: dict, seen, ahead) -> float:
    """|log predicted - log true| at the `ahead` budgets of a fit to noise-free points at `seen` (a backtest's
    cut-off): the parameters' ||dz|| (noiseless_fit_bound's, internal units) through the largest row norm of the
    Jacobian at `ahead` (r = J dz), plus the residual floor there."""
    z, x, jac, scale = _fit_jac(form, values, seen)
    rho = fit_residual_floor(form, values, seen)
    dz = 2 * 2 * np.sqrt(len(x)) * rho / float(np.linalg.svd(jac, compute_uv=False).min())
    far = form.jac(z, np.asarray(ahead, dtype=np.float64) / scale)
    return float(np.linalg.norm(far, axis=-1).max()) * dz + rho


def tails_f64(expected: float, cutoff, reach):
    """f64 for vitbench.fit.interval.independent_tails (covered decades over the longest window): per window a
    log10 (1 rounding), + reach (reach itself a log10 of a ratio: 2, and the add: 1), the covered piece's two
    subtractions and the running sum's add (3): 7 a window, on terms of at most S = max |log10 cut-off| + max
    reach;
    the division by the longest window L (>= its own 3 roundings' worth, relative) carries that error over L, and
    adds one rounding of the result."""
    cutoff, reach = np.asarray(cutoff, dtype=np.float64), np.asarray(reach, dtype=np.float64)
    size = float(np.abs(np.log10(cutoff)).max() + np.abs(reach).max())
    longest = min(float(reach[cutoff == c].max()) for c in np.unique(cutoff))  # a lower bound on L
    return f64(expected, roundings=7 * len(np.unique(cutoff)) + 1, scale=size * (1 + expected) / longest)
