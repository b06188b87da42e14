"""vitbench fit: constants and formulas pinned where a mutation review found the suite silent (each test one
behaviour, on hand-made backtests, replicates and misses whose right answer follows from the formula in the
module docstrings of fit.interval, fit.backtest and fit.combine, worked by hand in each test)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from vitbench.fit import FitSpec, FormName, fit_curve, fit_group
from vitbench.fit.backtest import (Backtest, FormBacktest, Prediction, blended_scores, choose, mixture_param,
                                   per_decade_score)
from vitbench.fit.combine import Combined, Misses, combined_law_error, floor_bound, upper_cap
from vitbench.fit.estimate import CurveFit, FitStatus
from vitbench.fit.forms import FORMS
from vitbench.fit.interval import LawError, dof_noise, with_prior

REL = 1e-12  # closed forms of a few float operations each


def _miss(cutoff: float, reach: float, log_err: float, full: bool = True) -> Prediction:
    """A backtest point `reach` decades past `cutoff` whose log(predicted / observed) is `log_err`."""
    return Prediction(cutoff, cutoff * 10**reach, 1.0, math.exp(log_err), full)


def _backtest(forms: dict[FormName, list[Prediction]]) -> tuple[Backtest, list[CurveFit]]:
    """A backtest at a reach of 1 decade, reached, with the forms' points as given, and their fits (status OK)."""
    bt = Backtest(reach=1.0, achieved=1.0, forms=[FormBacktest(FORMS[n], points=p) for n, p in forms.items()])
    return bt, [CurveFit(FORMS[n], FitStatus.OK) for n in forms]


# -- 1. the groups' prior on a group's law drift (interval.with_prior) ----------------------------------------


def test_the_groups_prior_on_the_drift_counts_three_times_the_group_s_own_windows():
    """k^2 = (3 n k0^2 + n k_own^2) / (4 n) with 4 n degrees of freedom (fit.interval docstring, "Prior"): own
    0.04 on 1 window, prior 0.01 -> (0.03 + 0.04) / 4 = 0.0175 on 4; own 0.09 on 2 windows, prior 0.01 ->
    (0.06 + 0.18) / 8 = 0.03 on 8."""
    k2, dof = with_prior(0.04, 1.0, 0.01)
    assert k2 == pytest.approx(0.0175, rel=REL) and dof == 4.0
    k2, dof = with_prior(0.09, 2.0, 0.01)
    assert k2 == pytest.approx(0.03, rel=REL) and dof == 8.0


def test_without_a_prior_the_drift_is_the_group_s_own():
    """No prior (one group alone) or no finite windows: the group's own k^2 and degrees of freedom unchanged."""
    assert with_prior(0.04, 2.0, None) == (0.04, 2.0)
    assert with_prior(0.04, math.inf, 0.01) == (0.04, math.inf)


# -- 2. the backtest score (RECENCY) and the choice's prior (PRIOR_SHARE) --------------------------------------


def test_each_cut_off_counts_twice_the_one_below_it():
    """per_decade_score = sqrt(sum w_c per_c / sum w_c), per_c = mean err^2 / mean reach^2, w doubling with each
    later cut-off (fit.backtest docstring, "Choice"): cut-off 1 misses 0.3 at 1 decade (per 0.09), cut-off 10
    misses 0.3 at half a decade (per 0.09 / 0.25 = 0.36) -> sqrt((0.09 + 2 x 0.36) / 3) = sqrt(0.27)."""
    fb = FormBacktest(FORMS[FormName.POWER], points=[_miss(1.0, 1.0, 0.3), _miss(10.0, 0.5, 0.3, full=False)])
    assert per_decade_score(fb) == pytest.approx(math.sqrt(0.27), rel=1e-9)


def test_three_cut_offs_weigh_one_two_and_four():
    """Three cut-offs, each missing at 1 decade by 0.1, 0.2, 0.4 (per 0.01, 0.04, 0.16): weights 1, 2, 4 ->
    sqrt((0.01 + 0.08 + 0.64) / 7) = sqrt(0.73 / 7); equal weights would give sqrt(0.07)."""
    fb = FormBacktest(FORMS[FormName.POWER], points=[_miss(1.0, 1.0, 0.1), _miss(2.0, 1.0, 0.2),
                                                     _miss(4.0, 1.0, 0.4)])
    assert per_decade_score(fb) == pytest.approx(math.sqrt(0.73 / 7), rel=1e-9)


def test_a_form_s_score_is_a_quarter_its_own_and_three_quarters_the_groups():
    """own^(1 - 3/4) x prior^(3/4) (fit.backtest docstring, "Prior"): own score 0.16 (one cut-off missing 0.16
    at 1 decade), prior 0.01 -> 0.16^0.25 x 0.01^0.75 = 0.4^0.5 x 0.1^1.5 = 0.02; a form the prior lacks keeps
    its own score (0.2 x RICHER^-3 for the m4 law, 3 parameters past the power law's: 0.1024)."""
    bt, fits = _backtest({FormName.POWER: [_miss(1.0, 1.0, 0.16)], FormName.M4: [_miss(1.0, 1.0, 0.2)]})
    blend = blended_scores(bt, fits, {FormName.POWER: 0.01})
    assert blend[FormName.POWER] == pytest.approx(0.02, rel=1e-9)
    assert blend[FormName.M4] == pytest.approx(0.1024, rel=1e-9)


# -- 3. ties go to the simpler law --------------------------------------------------------------------------


def test_forms_that_score_alike_choose_the_one_with_fewest_parameters():
    """Every form predicts its backtest points exactly: every score is the floor (1e-12), a tie, and the choice is
    the form with the fewest parameters (power), whatever order the forms came in (m4 listed first here)."""
    exact = [_miss(1.0, 1.0, 0.0), _miss(2.0, 1.0, 0.0)]
    bt, fits = _backtest({FormName.M4: exact, FormName.SATURATING: exact, FormName.POWER: exact})
    best, weights, second = choose(bt, fits)
    assert best.form.name == FormName.POWER
    assert second.form.name == FormName.SATURATING  # 4 parameters, then m4's 5
    assert weights == pytest.approx({"m4": 1 / 3, "saturating": 1 / 3, "power": 1 / 3}, rel=REL)


def test_a_noise_free_power_law_is_fitted_as_the_power_law():
    """A pure power law without noise: every form fits and extrapolates it exactly (the richer ones collapse onto
    it), so the backtest ties and the power law, the fewest parameters, is chosen, with the forms listed richest
    first."""
    c = np.geomspace(1, 1e4, 13)
    g = fit_group({}, c, 3.0 * c**-0.3, [""] * len(c),
                  FitSpec(bootstrap=0, reach=1.0, forms=[FormName.M4, FormName.SATURATING, FormName.OFFSET,
                                                         FormName.POWER]))
    assert g.chosen == FormName.POWER


# -- 4. the interval's quantiles are (1 - ci) / 2 and (1 + ci) / 2 ------------------------------------------


def _stub_fit(name: FormName, reps: np.ndarray, value: float = 0.0) -> SimpleNamespace:
    """What mixture_param and floor_bound read of a fit: its form, ok, parameters and replicates."""
    return SimpleNamespace(form=FORMS[name], ok=True, params={"b": SimpleNamespace(value=value)},
                           user_replicates=lambda _name: reps)


def test_a_parameter_s_interval_takes_the_replicates_at_5_and_95_percent_for_90_percent():
    """Replicates 0, 1, ..., 100 of one form, equally weighted: the 90 % interval's ends are the first replicates
    whose cumulative weight (i + 1) / 101 reaches 0.05 and 0.95: 5 and 95."""
    lo, hi = mixture_param([_stub_fit(FormName.POWER, np.arange(101.0))], {"power": 1.0}, "b", 0.9)
    assert (lo, hi) == (5.0, 95.0)


def test_each_form_s_replicates_share_its_weight():
    """Two forms weighted 1/2 each, one with 10 replicates (0 .. 9), the other 90 (100 .. 189): each replicate
    carries its form's weight over its count, so the mixture is half each; the 50 % interval's ends are at 1/4
    (cumulative (i + 1) / 20 of the first form: i = 4) and 3/4 (1/2 + (j + 1) / 180 of the second: j = 44, 144)."""
    fits = [_stub_fit(FormName.POWER, np.arange(10.0)), _stub_fit(FormName.M4, 100.0 + np.arange(90.0))]
    assert mixture_param(fits, {"power": 0.5, "m4": 0.5}, "b", 0.5) == (4.0, 144.0)


def test_a_fitted_curve_s_band_takes_its_draws_at_5_and_95_percent_for_90_percent():
    """The power law at compute 1 (its scale) with replicates whose log a is 0, 0.01, ..., 1.00 and b 0: its log
    draws there are those values, and the 90 % band is exp of their 5 % and 95 % quantiles, 0.05 and 0.95."""
    reps = np.stack([np.linspace(0.0, 1.0, 101), np.zeros(101)], axis=1)
    f = CurveFit(FORMS[FormName.POWER], FitStatus.OK, ci=0.9, z=np.array([0.5, 0.0]), z_reps=reps)
    lo, hi = f.band(np.array([1.0]))
    assert lo[0] == pytest.approx(math.exp(0.05), rel=REL) and hi[0] == pytest.approx(math.exp(0.95), rel=REL)


def test_a_parameter_s_confidence_interval_is_its_replicates_percentile_interval_stretched():
    """fit_curve's 90 % interval of each parameter: the 5 % and 95 % quantiles of its bootstrap replicates (user
    units), each side's distance from the estimate stretched by t(n - p) / z (fit.estimate docstring, "Confidence
    intervals"; on the log scale for a), on the power law fitted to 6 noisy points with 40 replicates."""
    c = np.geomspace(1, 1e3, 6)
    e = 2.0 * c**-0.5 * np.exp(0.05 * np.array([1, -1, -1, 1, 1, -1]))
    f = fit_curve(c, e, FormName.POWER, bootstrap=40, ci=0.9)
    reps = f.form.to_user(f.z_reps, f.scale)
    a, b = f.params["a"], f.params["b"]
    lo, hi = np.quantile(reps[:, 1], [0.05, 0.95])
    assert lo < hi
    assert b.ci_low == pytest.approx(b.value - f.widen * (b.value - lo), rel=1e-9)
    assert b.ci_high == pytest.approx(b.value + f.widen * (hi - b.value), rel=1e-9)
    lo, hi = np.quantile(reps[:, 0], [0.05, 0.95])
    assert a.ci_low == pytest.approx(a.value * (lo / a.value) ** f.widen, rel=1e-9)
    assert a.ci_high == pytest.approx(a.value * (hi / a.value) ** f.widen, rel=1e-9)


def test_a_parameter_s_interval_always_holds_its_estimate():
    """Two replicates (`--bootstrap 2`) whose quantiles both lay above the estimate gave a = 0.5265 with the "95 %
    CI" [0.5303, 0.5799], stretched further away. The side past the estimate is taken to it first: each interval
    holds its value, for every seed and parameter here, and where the replicates' interval held the estimate the
    interval is the stretched percentile one (the test above)."""
    c = np.logspace(0, 3, 10)
    e = 0.1 + 0.5 * c**-0.4
    c, e = np.append(c, [c[3], c[3]]), np.append(e, [e[3] + 0.05, e[3] - 0.05])
    missed = 0
    for seed in range(6):
        f = fit_curve(c, e, FormName.POWER, bootstrap=2, seed=seed)
        reps = f.form.to_user(f.z_reps, f.scale)
        for i, (name, p) in enumerate(f.params.items()):
            assert p.ci_low <= p.value <= p.ci_high, (seed, name, p)
            lo, hi = np.quantile(reps[:, i], [0.025, 0.975])
            missed += not lo <= p.value <= hi
    assert missed  # (the case is here: some replicates' interval missed its estimate)


def test_the_floor_is_the_lower_end_of_e_inf_s_interval():
    """One form whose e_inf replicates are 1, 2, ..., 101, noise 0: the floor is their (1 - 0.9) / 2 = 5 %
    quantile, index 0.05 x 100 = 5 of the sorted replicates: 6."""
    law = Combined((_stub_fit(FormName.OFFSET, np.arange(1.0, 102.0)),), (1.0,))
    assert floor_bound(law, LawError(noise=0.0, slope=0.0, ci=0.9)) == pytest.approx(6.0, rel=REL)


# -- 5. the upper bound's budgets: evenly chosen, the largest always -------------------------------------------


def _dip_law(dip: float | None) -> SimpleNamespace:
    """A 'law' that is 1 everywhere but 0.5 at compute `dip`: which budgets upper_cap looked at shows."""
    return SimpleNamespace(log_predict=lambda x: np.where(np.isclose(x, dip), math.log(0.5), 0.0)
                           if dip is not None else np.zeros(np.size(x)))


@pytest.mark.parametrize("index,taken", [(0, True), (3, True), (4, False), (9, True), (10, False), (12, False),
                                         (13, True), (196, True), (198, False)])
def test_the_upper_bound_looks_at_64_budgets_evenly_spread(index, taken):
    """200 budgets (1 .. 200): the bound is taken over 64 of them, indices round(i x 199 / 63), i = 0 .. 63: 0,
    3, 6, 9, 13, ..., 196, 199 (not 4, 10, 12 or 198). A dip of the law to 0.5 at a budget so taken lowers the
    top at the largest budget to 0.5 (noise 0, no law term: the top is the law); one at a budget not taken does
    not."""
    budgets = np.arange(1.0, 201.0)
    cap = upper_cap(_dip_law(budgets[index]), LawError(0.0, 0.0, 0.9), budgets, [200.0], False)
    assert cap[0] == pytest.approx(0.5 if taken else 1.0, rel=REL)


def test_the_upper_bound_reaches_from_the_largest_budget():
    """200 budgets, the law E = C^-0.5, noise 0.1 and a drift of 0.01 per decade (both exact, so the quantile is
    the normal's): the top at 10x the largest budget (reach 1 decade from 200, the largest) is
    E exp(z sqrt(0.1^2 + 0.01^2)); the law falls faster than the top grows, so the running minimum is that top."""
    budgets = np.arange(1.0, 201.0)
    law = SimpleNamespace(log_predict=lambda x: -0.5 * np.log(np.asarray(x, dtype=float)))
    le = LawError(0.1, 0.01, 0.9)
    cap = upper_cap(law, le, budgets, [2000.0], False)
    assert cap[0] == pytest.approx(2000.0**-0.5 * math.exp(le.z * math.sqrt(0.1**2 + 0.01**2)), rel=1e-9)


# -- 6. the noise's degrees of freedom are n - p -----------------------------------------------------------


def test_the_noise_is_stretched_by_sqrt_n_over_n_minus_p():
    """The in-sample RMSE 0.1 of 10 points, 2 parameters: 0.1 sqrt(10 / 8); no residual left (n = p): as is."""
    assert dof_noise(0.1, 10, 2) == pytest.approx(0.1 * math.sqrt(10 / 8), rel=REL)
    assert dof_noise(0.1, 2, 2) == 0.1


def test_the_combined_law_s_noise_has_n_minus_p_degrees_of_freedom_of_its_richest_form():
    """7 points, the power law (2 parameters) and the offset law (3) combined: the noise is the combination's
    RMSE x sqrt(7 / 4) with 7 - 3 = 4 degrees of freedom (fit.interval docstring, "the noise term carrying the
    final fit's n - p")."""
    c = np.geomspace(1, 1e3, 7)
    e = (0.1 + 2.0 * c**-0.5) * np.exp(0.03 * np.array([1, -1, 1, -1, 1, -1, 1]))
    fits = [fit_curve(c, e, FormName.POWER, bootstrap=0), fit_curve(c, e, FormName.OFFSET, bootstrap=0)]
    law = Combined.of(fits, {"power": 0.5, "offset": 0.5})
    none = np.zeros(0)
    le = combined_law_error(law, Misses(none, none, none, none.astype(bool), {}), c, e, 0.95)
    assert le.noise_dof == 4.0
    assert le.noise == pytest.approx(law.rmse_log(c, e) * math.sqrt(7 / 4), rel=REL)


def test_a_fit_s_intervals_are_stretched_by_t_of_n_minus_p():
    """The power law on 6 points with a bootstrap: each interval is stretched by t_0.975(6 - 2) / z_0.975 =
    2.7764 / 1.9600 (fit.estimate docstring, "Confidence intervals")."""
    c = np.geomspace(1, 1e3, 6)
    e = 2.0 * c**-0.5 * np.exp(0.03 * np.array([1, -1, 1, -1, 1, -1]))
    f = fit_curve(c, e, FormName.POWER, bootstrap=20, ci=0.95)
    assert f.widen == pytest.approx(2.7764451051977987 / 1.959963984540054, rel=1e-9)


# -- 7. the combined law's backtest error counts every miss at the reach -------------------------------------


def test_the_combination_s_rmse_counts_every_full_reach_miss():
    """Misses 0.1, 0.2, 0.3, 0.4 all at the full reach: sqrt((0.01 + 0.04 + 0.09 + 0.16) / 4) = sqrt(0.075);
    with the last two from later cut-offs (short of the reach): sqrt((0.01 + 0.04) / 2); none at the full reach:
    every miss counts."""
    err = np.array([0.1, 0.2, 0.3, 0.4])
    cut, reach = np.array([1.0, 1.0, 2.0, 2.0]), np.ones(4)

    def rmse(full):
        return Misses(cut, reach, err, np.array(full, dtype=bool), {}).rmse_log

    assert rmse([True] * 4) == pytest.approx(math.sqrt(0.075), rel=REL)
    assert rmse([True, True, False, False]) == pytest.approx(math.sqrt(0.025), rel=REL)
    assert rmse([False] * 4) == pytest.approx(math.sqrt(0.075), rel=REL)


def test_a_form_s_backtest_rmse_counts_every_full_reach_miss():
    """FormBacktest.rmse_log, the same on one form's points: misses 0.1, 0.2, 0.3 at the full reach and 0.4 short
    of it: sqrt((0.01 + 0.04 + 0.09) / 3)."""
    fb = FormBacktest(FORMS[FormName.POWER], points=[_miss(1.0, 1.0, 0.1), _miss(1.0, 0.5, 0.2),
                                                     _miss(1.0, 0.8, 0.3), _miss(2.0, 0.5, 0.4, full=False)])
    assert fb.rmse_log == pytest.approx(math.sqrt(0.14 / 3), rel=1e-9)
