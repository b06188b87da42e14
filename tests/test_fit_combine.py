"""The combined law predictions are made with (vitbench.fit.combine): its weights, its predictions, its misses."""

from __future__ import annotations

import numpy as np
import pytest

from vitbench.fit import FitSpec, FormName, fit_group
from vitbench.fit.backtest import RICHER, WEIGHT_POWER, FormBacktest, Prediction, per_decade_score
from vitbench.fit.combine import Combined, combined_law_error, misses
from vitbench.fit.forms import FORMS

from tolerances_stat import f64

C = np.geomspace(1, 1e5, 51)


def _curve(seed: int) -> np.ndarray:
    """A saturating curve with 2 % log-normal noise: the forms disagree beyond it."""
    return (0.05 + 2.0 * (C + 30.0) ** -0.6) * np.exp(np.random.default_rng(seed).normal(0, 0.02, len(C)))


@pytest.fixture(scope="module")
def group():
    e = _curve(0)
    return fit_group({}, C[:41], e[:41], [""] * 41, FitSpec(bootstrap=0, reach=1.0, predict=[1e5, 1e6]))


def _assert_weights_are_scores_to_the_minus(g, power: float) -> None:
    """w_f ~ (per-decade score x RICHER^-(p - p_min))^-power, normalised; the chosen form has the largest. Each
    weight: a power, a product and a division per form (about 6 roundings of the score's chain, x WEIGHT_POWER
    through the power), the sum k - 1 more."""
    scores = {b.form.name.value: per_decade_score(b) * RICHER ** -(b.form.n_params - 2) for b in g.backtest.forms}
    raw = {k: s ** -power for k, s in scores.items()}
    total = sum(raw.values())
    assert set(g.weights) == set(raw)
    for k, w in g.weights.items():
        assert w == f64(raw[k] / total, roundings=int(8 * WEIGHT_POWER) + len(raw))
    assert g.chosen.value == max(g.weights, key=g.weights.get)
    assert sum(g.weights.values()) == f64(1.0, roundings=2 * len(g.weights))


def test_weights_are_the_backtest_scores_to_the_minus_weight_power(group):
    """A backtest that reached the reach asked weighs the forms by score^-WEIGHT_POWER (module docstrings of
    fit.backtest and fit.combine)."""
    assert group.backtest.achieved >= group.backtest.reach * (1 - 1e-9)
    assert group.backtest.weight_power == WEIGHT_POWER
    _assert_weights_are_scores_to_the_minus(group, WEIGHT_POWER)


def test_a_backtest_short_of_the_reach_flattens_the_weights_by_its_share():
    """Asked for 2 decades on a 2-decade curve, the backtest reaches less (the forms need points to fit): the
    power is WEIGHT_POWER x achieved / reach, so the weights are flatter than the full power's, and the JSON says
    the power used."""
    e = _curve(1)[:21]  # 1 .. 1e2
    g = fit_group({}, C[:21], e, [""] * 21, FitSpec(bootstrap=0, reach=2.0))
    share = g.backtest.achieved / g.backtest.reach
    assert 0 < share < 1
    assert g.backtest.weight_power == f64(WEIGHT_POWER * share, roundings=2)
    _assert_weights_are_scores_to_the_minus(g, WEIGHT_POWER * share)
    assert g.to_dict()["backtest"]["weight_power"] == g.backtest.weight_power
    full = {b.form.name.value: (per_decade_score(b) * RICHER ** -(b.form.n_params - 2)) ** -WEIGHT_POWER
            for b in g.backtest.forms}
    assert max(g.weights.values()) < max(full.values()) / sum(full.values())


def test_predictions_are_the_weighted_geometric_mean_of_the_forms(group):
    """The combined law at C is exp(sum_f w_f log E_f(C)), not the chosen form's alone (the forms differ there)."""
    g, law = group, group.law()
    assert [f.form.name.value for f in law.fits] == [k for k in g.weights if g.weights[k] > 0]
    for p in g.predictions:
        logs = np.array([f.log_predict([p.compute])[0] for f in law.fits])
        # the same k products and k - 1 sums of terms of size max |log E_f|, then exp: a relative error of
        # 2k + 1 roundings of that size, on each side
        assert np.log(p.value) == f64(float(np.dot(law.weights, logs)), roundings=2 * len(logs) + 2,
                                      scale=float(np.abs(logs).max()) + 1.0)
        assert np.ptp(logs) > 1e-3  # the forms disagree: a combination differs from any one of them
    assert next(iter(g.predictions[0].law)) == g.chosen.value and g.predictions[0].law == law.named_weights


def _bt(name: FormName, cut: float, pts: list[tuple[float, float, float]], noise: float) -> FormBacktest:
    fb = FormBacktest(FORMS[name])
    fb.points = [Prediction(cut, c, o, p, True) for c, o, p in pts]
    fb.noise = {cut: noise}
    return fb


def test_misses_combine_the_members_at_the_points_all_of_them_predicted():
    """The combination's miss at a point is sum_f w_f (log pred_f - log obs); a point one member lacks is left
    out (never filled from the others); a cut-off's noise is sum_f w_f noise_f (Minkowski's bound)."""
    from vitbench.fit.estimate import CurveFit, FitStatus

    a, b = CurveFit(FORMS[FormName.POWER], FitStatus.OK), CurveFit(FORMS[FormName.M4], FitStatus.OK)
    law = Combined((a, b), (0.25, 0.75))
    parts = {"power": [_bt(FormName.POWER, 10.0, [(20.0, 1.0, 1.1), (40.0, 1.0, 1.2)], 0.02)],
             "m4": [_bt(FormName.M4, 10.0, [(20.0, 1.0, 0.9)], 0.04)]}  # m4 did not predict C = 40
    m = misses(law, parts)
    assert m.cutoff.tolist() == [10.0] and m.reach.tolist() == [f64(np.log10(2.0), roundings=2)]
    assert m.err[0] == f64(0.25 * np.log(1.1) + 0.75 * np.log(0.9), roundings=6, scale=0.25)
    assert m.noise == {10.0: f64(0.25 * 0.02 + 0.75 * 0.04, roundings=3)}
    assert law.n_params == FORMS[FormName.M4].n_params and law.label == "m4 0.75 + power 0.25"


def test_the_intervals_are_built_from_the_combination_s_misses(group):
    """The law's error model is the combination's (its misses at every cut-off, spread ones included), not the
    chosen form's: rebuilt here from the parts, identical; and it differs from the chosen form's own."""
    from vitbench.fit.interval import law_error

    g, law = group, group.law()
    m = misses(law, g.backtest_parts())
    assert len(np.unique(m.cutoff)) == len(g.backtest.cutoffs) + len(g.backtest.spread[0].fits)
    rebuilt = combined_law_error(law, m, g.compute, g.error, 0.95)
    assert (rebuilt.slope, rebuilt.law_dof, rebuilt.coverage) == (g.law_error.slope, g.law_error.law_dof,
                                                                  g.law_error.coverage)
    best = g.backtest.get(g.best().form)
    alone = law_error(best.cutoff, best.reach, best.log_err, best.noise, rebuilt.noise, 0.95)
    assert alone.slope != g.law_error.slope


def test_one_form_combined_is_that_form():
    e = _curve(1)
    g = fit_group({}, C[:41], e[:41], [""] * 41, FitSpec(bootstrap=0, reach=1.0, forms=[FormName.OFFSET],
                                                        predict=[1e6]))
    assert g.weights == {"offset": 1.0} and g.law().label == "offset 1.00"
    assert g.predictions[0].value == float(g.best().predict([1e6])[0])


def test_the_label_names_the_forms_that_weigh_and_counts_the_rest():
    from vitbench.fit.estimate import CurveFit, FitStatus

    fits = tuple(CurveFit(FORMS[n], FitStatus.OK) for n in (FormName.POWER, FormName.OFFSET, FormName.M4))
    assert Combined(fits, (0.004, 0.096, 0.9)).label == "m4 0.90 + offset 0.10 (+ 1 below 0.005)"
    assert Combined(fits, (0.2, 0.3, 0.5)).label == "m4 0.50 + offset 0.30 + power 0.20"
