"""Robust least squares for many problems at once: a batched, bound-constrained Levenberg-Marquardt.

One call fits k parameter vectors (starting points, or bootstrap replicates with their own targets) of one form
to the same compute points, every step a handful of numpy operations on (k, n, p) arrays instead of k calls of
scipy's least_squares (whose per-call overhead made a 10-point curve with 1000 replicates take 9.5 s).

The loss is Huber's on log residuals (quadratic up to `delta`, linear beyond: Hoffmann et al. 2022, Sec. 3.3),
minimised by iteratively reweighted Gauss-Newton steps (Huber 1981, "Robust Statistics", Sec. 7.8) with
Marquardt's damping (Marquardt 1963): the step solves (H + lam diag(H)) dz = -g with H = J^T W J, g = J^T W r.
Bounds: a parameter at a bound whose gradient points out of the box is held there for the step (a projected
Newton step, Bertsekas 1982), and every step is clipped into the box. A step is kept only if it lowers the loss.
`polish` then runs scipy's trust-region reflective solver from the best result (exact bounds handling).
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy.optimize import least_squares

from vitbench.fit.forms import Form

HUBER_DELTA = 0.1  # log residual (~10 % relative error) where the loss turns linear (docs/scaling-laws.md)
MAX_ITER = 200  # LM iterations: a converged fit stops after ~10-30; a flat curve's drift stops here
_TOL = 1e-10  # relative loss decrease below which a problem counts as converged


def huber(r: np.ndarray, delta: float = HUBER_DELTA) -> np.ndarray:
    """Huber loss of each residual, summed over the last axis (scipy's rho with f_scale = delta, times delta^2)."""
    a = np.abs(r)
    return np.sum(np.where(a <= delta, 0.5 * a**2, delta * (a - 0.5 * delta)), axis=-1)


Distinct = tuple[np.ndarray, np.ndarray | None]  # distinct(x): worked out once per fit, not once per iteration


def distinct(x: np.ndarray) -> Distinct:
    """(the distinct values of the compute points `x`, each point's index among them; None where every point is
    distinct): a form is evaluated once per distinct compute and gathered, the same maths per point (numpy's
    vectorised exp and log may round a point's last bit otherwise by its position: fits move by ~1e-10). A group
    of 5,431 rows (seeds and repeats) holds 131 computes: 40x fewer evaluations (found by a scale review)."""
    xu, inv = np.unique(x, return_inverse=True)
    return (x, None) if len(xu) == len(x) else (xu, inv.reshape(-1))


def _predict(form: Form, z: np.ndarray, xd: Distinct) -> np.ndarray:
    xu, inv = xd
    out = form.log_predict(z, xu)
    return out if inv is None else out[..., inv]


def _jac(form: Form, z: np.ndarray, xd: Distinct) -> np.ndarray:
    xu, inv = xd
    out = form.jac(z, xu)
    return out if inv is None else out[..., inv, :]


def loss(form: Form, z: np.ndarray, x: np.ndarray, log_y: np.ndarray, xd: Distinct | None = None) -> np.ndarray:
    """The Huber loss of each row of z; `xd`: distinct(x) where the caller has it."""
    with np.errstate(all="ignore"):
        out = huber(_predict(form, z, distinct(x) if xd is None else xd) - log_y)
    return np.where(np.isfinite(out), out, np.inf)


def lm(form: Form, z0: np.ndarray, x: np.ndarray, log_y: np.ndarray, lower: np.ndarray, upper: np.ndarray,
       max_iter: int = MAX_ITER) -> tuple[np.ndarray, np.ndarray]:
    """Minimise the Huber loss of log E(z; x) - log_y for each row of z0 (k, p); log_y is (n,) or (k, n).
    Returns (z, loss) of shapes (k, p) and (k,)."""
    z = np.clip(np.array(z0, dtype=float), lower, upper)
    k, p = z.shape
    lam = np.full(k, 1e-3)
    xd = distinct(x)
    cur = loss(form, z, x, log_y, xd)
    active = np.isfinite(cur)
    eye = np.eye(p)
    for _ in range(max_iter):
        idx = np.flatnonzero(active)
        if idx.size == 0:
            break
        zi = z[idx]
        ly = log_y if log_y.ndim == 1 else log_y[idx]
        with np.errstate(all="ignore"):
            r = _predict(form, zi, xd) - ly
            jac = _jac(form, zi, xd)
        ar = np.abs(r)
        w = np.where(ar <= HUBER_DELTA, 1.0, HUBER_DELTA / np.maximum(ar, 1e-300))
        jw = jac * w[..., None]
        h = np.einsum("knp,knq->kpq", jw, jac)
        g = np.einsum("knp,kn->kp", jw, r)
        # held at a bound: the gradient pushes out of the box
        fixed = ((zi <= lower + 1e-12) & (g > 0)) | ((zi >= upper - 1e-12) & (g < 0))
        free = ~fixed
        diag = np.einsum("kpp->kp", h)
        damp = lam[idx, None] * np.maximum(diag, 1e-12) + 1e-12
        a = h * (free[:, :, None] & free[:, None, :]) + eye * np.where(free, damp, 1.0)[:, None, :]
        rhs = np.where(free, -g, 0.0)
        ok = np.isfinite(a).all(axis=(1, 2)) & np.isfinite(rhs).all(axis=1)
        step = np.zeros_like(rhs)
        if ok.any():
            try:
                step[ok] = np.linalg.solve(a[ok], rhs[ok][..., None])[..., 0]
            except np.linalg.LinAlgError:
                step[ok] = np.stack([np.linalg.lstsq(m, v, rcond=None)[0] for m, v in zip(a[ok], rhs[ok])])
        trial = np.clip(zi + step, lower, upper)
        new = loss(form, trial, x, ly, xd)
        better = (new < cur[idx]) & ok
        gain = np.where(better, cur[idx] - new, 0.0)
        z[idx[better]] = trial[better]
        cur[idx[better]] = new[better]
        lam[idx] = np.where(better, np.maximum(lam[idx] / 3, 1e-9), lam[idx] * 4)
        small_gain = better & (gain <= _TOL * (cur[idx] + 1e-12))
        stuck = ~better & (lam[idx] > 1e10)
        active[idx[small_gain | stuck | ~ok]] = False
    return z, cur


def polish(form: Form, z0: np.ndarray, x: np.ndarray, log_y: np.ndarray, lower: np.ndarray,
           upper: np.ndarray) -> np.ndarray | None:
    """scipy least_squares (trf, Huber, analytic Jacobian) from z0; None if it finds no finite solution."""
    span = upper - lower
    z0 = np.clip(z0, lower + 1e-10 * span, upper - 1e-10 * span)
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            res = least_squares(lambda z: form.log_predict(z, x) - log_y, z0, jac=lambda z: form.jac(z, x),
                                bounds=(lower, upper), loss="huber", f_scale=HUBER_DELTA, method="trf",
                                max_nfev=MAX_ITER)
    except (ValueError, FloatingPointError, np.linalg.LinAlgError):
        return None
    return res.x if np.isfinite(res.cost) else None
