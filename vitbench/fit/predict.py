"""The last part of a group's fit: its predictions (the combined law and its interval at each --predict value,
vitbench.fit.interval), what bounds --predict, and what is said where a prediction cannot be made."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from vitbench.errors import ConfigError, shorten
from vitbench.fit.combine import combined_law_error
from vitbench.fit.interval import windows_note
from vitbench.fit.spec import MAX_REACH, FitSpec

if TYPE_CHECKING:
    from vitbench.fit.groups import GroupFit


@dataclass
class Prediction:
    compute: float
    reach: float  # decades past the largest measured compute (negative: inside the range)
    value: float  # the combined law's prediction (vitbench.fit.combine)
    ci_low: float | None  # the prediction interval (vitbench.fit.interval): parameters (the forms' weighted
    ci_high: float | None  # bootstrap mixture), one observation's noise, the law's error at this reach, within
    # what a decreasing law allows; None: no more budgets than parameters, nothing measures it (no_prediction)
    law: dict[str, float]  # the combined law it comes from: form name -> weight (Combined.named_weights)
    backtest_rmse_log: float | None  # the combined law's backtest error at the backtest's reach (one per group)

    def to_dict(self) -> dict:
        return {"compute": self.compute, "reach_decades": self.reach, "error": self.value, "ci_low": self.ci_low,
                "ci_high": self.ci_high, "law": self.law, "backtest_rmse_log": self.backtest_rmse_log}


def check_predict(compute: np.ndarray, predict: list[float] | None, title: str) -> None:
    """A ConfigError naming --predict for a value more than MAX_REACH decades from the group's measured budgets
    (no backtest, law or float reaches there: 10^(3 x 200) overflowed in the spread cut-offs)."""
    lo, hi = float(np.min(compute)), float(np.max(compute))
    for x in predict or []:
        if not lo * 10**-MAX_REACH <= x <= hi * 10**MAX_REACH:
            far = math.log10(x / hi) if x > hi else math.log10(lo / x)
            raise ConfigError(f"--predict {x:g}: {far:.3g} decades {'past' if x > hi else 'before'} the measured "
                              f"budgets of {shorten(title, 80)} ({lo:.4g} to {hi:.4g}); allowed: within "
                              f"{MAX_REACH:g} decades of them, {lo * 10**-MAX_REACH:.3g} to "
                              f"{hi * 10**MAX_REACH:.3g}")


def predict_group(g: GroupFit, spec: FitSpec, law_prior: float | None = None) -> GroupFit:
    """The last part of fit_group: the law's error model with the groups' prior on its drift (`law_prior`, k^2:
    vitbench.fit.interval.prior_k2; None: the group's own) and the predictions, with the notes they need."""
    if g.law_error is None:  # no law: finish_group said why where predictions were asked
        return g
    c, law = g.compute, g.law()
    if law_prior is not None and g.misses is not None:
        g.law_error = replace(combined_law_error(law, g.misses, c, g.error, spec.ci, law_prior),
                              ceiling=g.law_error.ceiling)
    if spec.predict:
        xs = np.asarray(spec.predict, dtype=float)
        mid, lo, hi = g.band(xs)
        reach = np.log10(xs / c.max())
        known = len(np.unique(c)) > law.n_params  # else nothing measures the noise, the law or the parameters
        if not known:
            g.no_prediction = (f"{g.title}: {len(np.unique(c))} distinct budgets for a law of {law.n_params} "
                               "parameters: nothing measures how far its predictions miss, so they have no "
                               "interval; measure more budgets")
        at_reach = g.misses.among(g.backtest.cutoffs).rmse_log  # the choice's cut-offs, as FormBacktest.rmse_log
        named = law.named_weights
        for i, (x, m) in enumerate(zip(xs, mid)):
            g.predictions.append(Prediction(float(x), float(reach[i]), float(m),
                                            float(lo[i]) if known else None, float(hi[i]) if known else None,
                                            named, at_reach))
        note = windows_note(g.law_error, np.unique(g.backtest.compute), law.n_params, g.backtest.reach)
        if note and g.no_prediction is None:
            g.notes.append(f"{g.title}: {note}")
    return g


def no_law(g: GroupFit) -> str:
    """Why a group asked for predictions has none: no form could be fitted (the simplest form's reason)."""
    simplest = min(g.fits, key=lambda f: f.form.n_params, default=None)
    why = simplest.message if simplest is not None and simplest.message else "no form could be fitted"
    return f"{g.title}: no law could be fitted, so nothing is predicted: {why}"
