"""The scaling-law forms, one registry: error E against compute C (docs/scaling-laws.md, "The laws").

- `power`       E = a C^-b                                   Kaplan et al. 2020; Alabdulmohsin et al. 2022, M1
- `offset`      E = e_inf + a C^-b                           Alabdulmohsin et al. 2022 ("Revisiting Neural
                                                             Scaling Laws in Language and Vision"), M2
- `saturating`  E = e_inf + a (C + c0)^-b                    Zhai et al. 2022 ("Scaling Vision Transformers")
- `m4`          (E - e_inf) / (e0 - E)^alpha = a C^-b        Alabdulmohsin et al. 2022, M4 (their c = -b)

b is always the exponent, a the scale, e_inf the floor no compute removes. M4 adds e0, the error at zero compute
(the random-guess plateau), and alpha, how sharply the curve leaves it (sigmoid-like in log C); it defines E only
implicitly, so E is solved for numerically (a safeguarded Newton iteration, vectorised over points and parameter
sets). The forms nest: power is offset with e_inf = 0, offset is saturating with c0 = 0 and M4 with alpha = 0;
a fit whose parameter sits at such a bound has collapsed into the simpler form (`Collapse`).

Each form works on an internal vector z in normalised compute x = C / scale (scale: the points' geometric mean),
log a in place of a; `to_user` turns z into the compute column's units. Every method takes z of shape (..., p)
and x of shape (n,) and returns (..., n) arrays: one call evaluates many starts or bootstrap replicates at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import numpy as np

B_MAX = 5.0  # exponent bound: published vision/language exponents are ~0.05-0.7 (Zhai 2022; Kaplan 2020)
ALPHA_MAX = 10.0  # M4's alpha: beyond ~10 the exit from the plateau is a step; a fit there is flagged (Collapse)
LOG_A = (math.log(1e-30), math.log(1e30))  # bounds on log(a) in normalised compute units
# The compute values a fit takes: a's user-unit value a' s^b (s the compute's geometric mean, b up to B_MAX) must
# be a finite double (~1e+-308) for every a within LOG_A: |log10 s| at most (308 - 30) / B_MAX, some 55 decades.
COMPUTE_LIMIT = 10.0 ** ((math.log10(np.finfo(float).max) - LOG_A[1] / math.log(10)) / B_MAX)
E0_HEADROOM = 1.5  # M4's e0 lies in [largest error, max(1, 1.5 x largest error)] (M4Form.bounds)
_U_MAX = 60.0  # M4 solves for s = (E - e_inf) / (e0 - e_inf) no closer than e^-60 (~1e-26) to 0 or 1


class FormName(str, Enum):
    POWER = "power"
    OFFSET = "offset"
    SATURATING = "saturating"
    M4 = "m4"


class Side(str, Enum):
    LOW = "low"
    HIGH = "high"


@dataclass(frozen=True)
class Collapse:
    """Parameter `param` at its `side` bound: what the fit has become, in words."""

    param: str
    side: Side
    meaning: str


@dataclass(frozen=True)
class Form:
    name: FormName
    params: tuple[str, ...]  # user names, in the order of the internal vector (a is log a there)
    formula: str
    source: str
    collapses: tuple[Collapse, ...]

    @property
    def n_params(self) -> int:
        return len(self.params)

    # -- to be provided by each kind of form ------------------------------------------------------------------
    def log_predict(self, z: np.ndarray, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def jac(self, z: np.ndarray, x: np.ndarray) -> np.ndarray:
        """d log E / d z, shape (..., n, p)."""
        raise NotImplementedError

    def bounds(self, y: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def starts(self, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """A grid of starting points (k, p) from the data's ranges."""
        raise NotImplementedError

    # -- shared ----------------------------------------------------------------------------------------------
    def to_user(self, z: np.ndarray, scale: float) -> np.ndarray:
        """Internal z (..., p) -> user-unit values (..., p) in `params` order: a = exp(log a) scale^b
        (a (C/s)^-b = a s^b C^-b), c0 = c0 scale; the other parameters do not depend on the compute unit."""
        z = np.asarray(z, dtype=float)
        out = z.copy()
        b = z[..., self.params.index("b")]
        out[..., self.params.index("a")] = np.exp(z[..., self.params.index("a")] + b * math.log(scale))
        if "c0" in self.params:
            out[..., self.params.index("c0")] = z[..., self.params.index("c0")] * scale
        return out

    def from_user(self, values: dict[str, float], scale: float) -> np.ndarray:
        z = np.array([values[k] for k in self.params], dtype=float)
        b = values["b"]
        z[self.params.index("a")] = math.log(values["a"]) - b * math.log(scale)
        if "c0" in self.params:
            z[self.params.index("c0")] = values["c0"] / scale
        return z

    def predict(self, values: dict[str, float], compute) -> np.ndarray:
        """E(C) for user-unit `values` (a dict over `params`)."""
        c = np.asarray(compute, dtype=float)
        return np.exp(self.log_predict(self.from_user(values, 1.0), c))


@dataclass(frozen=True)
class PowerFamily(Form):
    """e_inf + exp(log a - b log(x + c0)), with e_inf and c0 fixed at 0 where the form has no such parameter."""

    def _split(self, z):
        z = np.asarray(z, dtype=float)
        get = {k: z[..., i][..., None] for i, k in enumerate(self.params)}
        zero = np.zeros_like(get["b"])
        return get["a"], get["b"], get.get("e_inf", zero), get.get("c0", zero)

    def log_predict(self, z, x):
        log_a, b, e_inf, c0 = self._split(z)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            log_t = log_a - b * np.log(x + c0)
            return np.where(e_inf > 0, np.logaddexp(np.log(np.maximum(e_inf, 1e-300)), log_t), log_t)

    def jac(self, z, x):
        log_a, b, e_inf, c0 = self._split(z)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            log_xc = np.log(x + c0)
            log_t = log_a - b * log_xc
            log_m = np.where(e_inf > 0, np.logaddexp(np.log(np.maximum(e_inf, 1e-300)), log_t), log_t)
            tm = np.exp(log_t - log_m)  # t / m
            cols = {"a": tm, "b": -log_xc * tm, "e_inf": np.exp(-log_m), "c0": -b * tm / (x + c0)}
        return np.stack([np.broadcast_to(cols[k], np.broadcast_shapes(tm.shape)) for k in self.params], axis=-1)

    def bounds(self, y, x):
        lo = {"a": LOG_A[0], "b": 0.0, "e_inf": 0.0, "c0": 0.0}
        hi = {"a": LOG_A[1], "b": B_MAX, "e_inf": float(y.max()), "c0": float(x.max())}
        return np.array([lo[k] for k in self.params]), np.array([hi[k] for k in self.params])

    def starts(self, y, x):
        y_min, x_min = float(y.min()), float(x.min())
        floors = [f * y_min for f in (0.0, 0.5, 0.9)] if "e_inf" in self.params else [0.0]
        offsets = [o * x_min for o in (0.0, 1.0, 10.0)] if "c0" in self.params else [0.0]
        out = []
        for b in (0.05, 0.2, 0.5, 1.0, 2.0):
            for e_inf in floors:
                for c0 in offsets:  # log a from the other three: the mean log of (E - e_inf) (x + c0)^b
                    log_a = float(np.mean(np.log(np.maximum(y - e_inf, 1e-12)) + b * np.log(x + c0)))
                    v = {"a": log_a, "b": b, "e_inf": e_inf, "c0": c0}
                    out.append([v[k] for k in self.params])
        return np.array(out)


def _solve_s(k: np.ndarray, alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(s, 1 - s, log(1 - s)) with log s - alpha log(1 - s) = k, for 1-D arrays k and alpha >= 0.

    Below s = 1/2 (k <= (alpha - 1) log 2) the unknown is l = log s, g(l) = l - alpha log(1 - e^l) - k; above, it's
    m = log(1 - s), G(m) = alpha m - log(1 - e^m) + k. Both are convex and increasing with slope >= 1 or >= alpha,
    and positive at -log 2, so Newton from -log 2 descends monotonically onto the root in a few steps, in the
    variable that keeps s, or 1 - s, to full precision. Roots beyond 1e-26 of 0 or 1 are clipped there."""
    half = -math.log(2.0)
    low = k <= (alpha - 1.0) * math.log(2.0)
    v = np.full(k.shape, half)
    idx = np.flatnonzero(np.isfinite(k))
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for _ in range(60):
            if idx.size == 0:
                break
            vi, ai, ki, lo = v[idx], alpha[idx], k[idx], low[idx]
            ev = np.exp(vi)
            l1 = np.log1p(-ev)  # log(1 - e^v)
            f = np.where(lo, vi - ai * l1 - ki, ai * vi - l1 + ki)
            r = ev / (1.0 - ev)
            slope = np.where(lo, 1.0 + ai * r, ai + r)
            nxt = np.maximum(vi - f / slope, -_U_MAX)
            nxt = np.where(np.isfinite(nxt), nxt, -_U_MAX)
            v[idx] = nxt
            idx = idx[np.abs(nxt - vi) > 1e-13 * (1 + np.abs(vi))]
        ev = np.exp(v)
        l1 = np.log1p(-ev)
    s = np.where(low, ev, -np.expm1(v))
    s1 = np.where(low, -np.expm1(v), ev)
    log_s1 = np.where(low, l1, v)
    return s, s1, log_s1


@dataclass(frozen=True)
class M4Form(Form):
    """Alabdulmohsin et al. 2022, M4: with D = e0 - e_inf and s = (E - e_inf) / D in (0, 1), the law reads
    log s - alpha log(1 - s) = log a - b log x - (1 - alpha) log D, whose left side rises monotonically from -inf
    to +inf on (0, 1): one root, found by _solve_s."""

    def _solve(self, z, x):
        z = np.asarray(z, dtype=float)
        log_a, b, e_inf, e0, alpha = (z[..., i][..., None] for i in range(5))
        d = np.maximum(e0 - e_inf, 1e-300)
        k = log_a - b * np.log(x) - (1.0 - alpha) * np.log(d)
        k, alpha_b = np.broadcast_arrays(k, np.maximum(alpha, 0.0))
        s, s1, log_s1 = (a.reshape(k.shape) for a in _solve_s(k.ravel(), alpha_b.ravel()))
        return s, s1, log_s1, e_inf, d, alpha

    def log_predict(self, z, x):
        s, _, _, e_inf, d, _ = self._solve(z, x)
        return np.log(np.maximum(e_inf + d * s, 1e-300))

    def jac(self, z, x):
        # implicit differentiation of F = log(E - e_inf) - alpha log(e0 - E) - log a + b log x = 0:
        # dE/dz = -F_z / F_E, with 1 / F_E = D s (1 - s) / ((1 - s) + alpha s)
        s, s1, log_s1, e_inf, d, alpha = self._solve(z, x)
        den = np.maximum(s1 + alpha * s, 1e-300)
        e = np.maximum(e_inf + d * s, 1e-300)
        g = d * s * s1 / den
        cols = (g, -np.log(x) * g, s1 / den, alpha * s / den, (np.log(d) + log_s1) * g)
        return np.stack([np.broadcast_to(c, s.shape) / e for c in cols], axis=-1)

    def bounds(self, y, x):
        # e0, the plateau at zero compute, from the data: at least the largest error measured; at most 1 (a
        # fraction's chance plateau) or E0_HEADROOM x the largest error, whichever is larger, so a loss > 1
        # (cross-entropy, perplexity) gets the same room; e0 at that bound is flagged (Collapse), not refused
        top = max(1.0, E0_HEADROOM * float(y.max()))
        return (np.array([LOG_A[0], 0.0, 0.0, float(y.max()), 0.0]),
                np.array([LOG_A[1], B_MAX, float(y.min()), top, ALPHA_MAX]))

    def starts(self, y, x):
        lo, hi = self.bounds(y, x)
        out = []
        with np.errstate(over="ignore", invalid="ignore"):  # an error near a float's top (1e308) overflows here
            for row in self._starts(y, x, lo, hi):
                if np.all(np.isfinite(row)):
                    out.append(row)
        return np.array(out).reshape(-1, len(lo))  # none finite: no start (the fit says the law could not fit)

    @staticmethod
    def _starts(y, x, lo, hi):
        out = []
        for b in (0.1, 0.4, 1.0):
            for alpha in (0.0, 0.5, 1.0, 3.0):
                for e_inf in (0.0, 0.5 * float(y.min()), 0.9 * float(y.min())):
                    for e0 in (lo[3] * 1.02 + 1e-9, 0.5 * (lo[3] + hi[3]), hi[3]):
                        e0 = min(e0, hi[3])
                        v = np.clip(y, e_inf + 1e-12, e0 - 1e-12)
                        log_a = float(np.mean(np.log(np.maximum(v - e_inf, 1e-12))
                                              - alpha * np.log(np.maximum(e0 - v, 1e-12)) + b * np.log(x)))
                        out.append([log_a, b, e_inf, e0, alpha])
        return out


_EXP_COLLAPSES = (Collapse("b", Side.HIGH, f"b at its bound {B_MAX:g}: the points do not determine an exponent "
                                           "(flat within the noise, or one step down)"),
                  Collapse("b", Side.LOW, "b = 0: no scaling, the error is flat"))
FORMS: dict[FormName, Form] = {f.name: f for f in (
    PowerFamily(FormName.POWER, ("a", "b"), "E = a*C^(-b)", "Kaplan et al. 2020; Alabdulmohsin et al. 2022, M1",
                _EXP_COLLAPSES),
    PowerFamily(FormName.OFFSET, ("e_inf", "a", "b"), "E = e_inf + a*C^(-b)", "Alabdulmohsin et al. 2022, M2",
                _EXP_COLLAPSES + (Collapse("e_inf", Side.LOW, "e_inf = 0: collapsed into the power law"),
                                  Collapse("e_inf", Side.HIGH, "e_inf at the largest error: a flat floor"))),
    PowerFamily(FormName.SATURATING, ("e_inf", "a", "b", "c0"), "E = e_inf + a*(C + c0)^(-b)",
                "Zhai et al. 2022, Scaling Vision Transformers, Sec. 3.1",
                _EXP_COLLAPSES + (Collapse("c0", Side.LOW, "c0 = 0: collapsed into the offset law"),
                                  Collapse("c0", Side.HIGH, "c0 at the largest compute: the bend is not measured"),
                                  Collapse("e_inf", Side.HIGH, "e_inf at the largest error: a flat floor"))),
    M4Form(FormName.M4, ("a", "b", "e_inf", "e0", "alpha"), "(E - e_inf)/(e0 - E)^alpha = a*C^(-b)",
           "Alabdulmohsin et al. 2022, Revisiting Neural Scaling Laws, M4",
           _EXP_COLLAPSES + (Collapse("alpha", Side.LOW, "alpha = 0: collapsed into the offset law"),
                             Collapse("alpha", Side.HIGH, f"alpha at its bound {ALPHA_MAX:g}: the curve leaves "
                                                          "its plateau in one step, no slope is measured"),
                             Collapse("e0", Side.HIGH,
                                      "e0 at its bound: the plateau at small compute is not measured"),
                             Collapse("e_inf", Side.HIGH, "e_inf at the smallest error: the floor is the data"))),
)}
