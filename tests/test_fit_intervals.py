"""Prediction intervals within what a decreasing law allows, the note when they rest on few backtest windows, the
score that chose the law (issue 49, item 6; vitbench.fit.interval, "Bounds")."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from vitbench.fit import FitSpec, FormName, fit_group
from vitbench.fit.backtest import RICHER, param_log_var, per_decade_score
from vitbench.fit.combine import floor_bound, upper_cap
from vitbench.fit.interval import FULL_WINDOWS, LawError, law_error

from tolerances_stat import f64, gamma

C = np.geomspace(1, 1e3, 15)  # the case: 15 points over 3 decades, 2 % noise, the true law a form
TRUTH = 0.1 + 3.0 * C**-0.4  # offset: e_inf 0.1, a 3, b 0.4; 3.1 at the smallest compute


def _error(seed: int = 1) -> np.ndarray:
    return TRUTH * np.exp(np.random.default_rng(seed).normal(0, 0.02, len(C)))


@pytest.fixture(scope="module")
def far():
    """Predicted at 100x the largest budget and on the way there: a reach the 3 decades measured allow one
    backtest window for."""
    return fit_group({}, C, _error(), [""] * len(C), FitSpec(bootstrap=100, predict=[2e3, 1e4, 1e5]))


def test_an_interval_never_rises_above_the_interval_at_a_smaller_measured_budget(far):
    """The issue's case printed 0.1485 [0.00458, 4.812] at 100x, its top above the 3.07 measured at the smallest
    compute, which no decreasing law can produce. Now every top is at most the top of a new measurement's interval
    at the largest budget (the smallest such: the law decreases), so below every error observed at the smallest
    budgets, and the tops fall (or stay) as compute grows; each prediction lies inside its interval."""
    law, le = far.law(), far.law_error
    assert le.law_dof < 2  # the case the issue saw: one window, Student's t of 1 degree of freedom
    at_top = upper_cap(law, le, far.compute, [far.compute.max()], with_params=True)[0]
    raw_hi = np.exp(law.log_predict([1e5]) + le.quantile([2.0]) * le.sd([2.0]))[0]
    assert raw_hi > at_top  # unbounded, the top would be above what a measurement at the largest budget can be
    highs = [p.ci_high for p in far.predictions]
    assert all(h <= at_top for h in highs) and at_top < far.error[:5].min()
    assert highs == sorted(highs, reverse=True)
    assert all(p.ci_low <= p.value <= p.ci_high for p in far.predictions)


def test_the_top_is_the_running_minimum_of_the_tops_below():
    """upper_cap: over the values asked, in compute order, the tops never rise; at a measured budget the top is at
    most a new measurement's interval there (no law term); below the smallest budget nothing bounds it."""
    g = fit_group({}, C, _error(2), [""] * len(C), FitSpec(bootstrap=50, predict=[1e4]))
    law, le = g.law(), g.law_error
    xs = np.r_[0.5, C, 1e4, 1e5, 1e6]
    cap = upper_cap(law, le, g.compute, xs, with_params=True)
    assert np.all(np.diff(cap) <= 0)
    mid = law.log_predict(xs)
    _, raw = le.band(mid, np.log10(xs / C.max()), param_log_var(list(law.fits), law.named_weights, xs))
    assert cap[0] == raw[0] and np.all(cap <= raw)  # (where the bound binds: the test above)


def test_the_lower_end_stops_at_the_laws_floor():
    """A law with a floor (offset, e_inf 0.1 here) cannot predict below it: six decades out, the unbounded
    interval's lower end falls under the floor, the bounded one stops at the floor's lower bootstrap end times the
    noise's lower quantile (floor_bound). A law without a floor (power) has none."""
    spec = FitSpec(bootstrap=200, predict=[1e9], forms=[FormName.OFFSET])
    g = fit_group({}, C, _error(3), [""] * len(C), spec)
    law, le, p = g.law(), g.law_error, g.predictions[0]
    x = np.array([1e9])
    var = param_log_var(list(law.fits), law.named_weights, x)
    raw_lo = le.band(law.log_predict(x), np.log10(x / C.max()), var)[0][0]
    e_inf = g.fit(FormName.OFFSET).params["e_inf"]
    assert raw_lo < p.ci_low == floor_bound(law, le) <= p.value
    assert 0.5 * e_inf.ci_low <= p.ci_low <= e_inf.value  # the floor's lower end, less a few noise sd
    power = fit_group({}, C, _error(3), [""] * len(C), spec.model_copy(update={"forms": [FormName.POWER]}))
    assert floor_bound(power.law(), power.law_error) == 0.0


def test_the_backtest_coverage_counts_the_bounded_intervals():
    """A held-out point far above its prediction lies inside a wide unbounded interval, and outside the bounded
    one when its fit's prediction at the cut-off (`fall` above the point's) leaves no room for it."""
    cut = np.array([10.0, 10.0, 100.0, 100.0])
    reach = np.array([0.5, 1.0, 0.5, 1.0])
    err = np.array([-0.4, -0.5, 0.3, 0.45])  # misses of a law that drifts 0.5 per decade either way
    free = law_error(cut, reach, err, {10.0: 0.01, 100.0: 0.01}, 0.01, 0.95, noise_dof=20)
    tight = law_error(cut, reach, err, {10.0: 0.01, 100.0: 0.01}, 0.01, 0.95, noise_dof=20,
                      fall=np.full(4, 0.05))
    assert free.coverage == 1.0 and tight.coverage == 0.5  # the two points above their predictions fall out


def test_few_windows_get_a_note_whose_remedy_works(far):
    """One window: a note saying so with Student's t, and the remedy (a shorter reach, or more decades). Taking
    the remedy's reach gives FULL_WINDOWS windows and no note."""
    note = next(n for n in far.notes if "independent backtest window" in n)
    assert "rests on 1 independent backtest window" in note and "12.7" in note and "--reach" in note
    reach = float(note.split("--reach ")[1].split(")")[0])
    ok = fit_group({}, C, _error(), [""] * len(C), FitSpec(bootstrap=0, predict=[C.max() * 10**reach]))
    assert ok.law_error.law_dof >= FULL_WINDOWS - 1e-9
    assert not any("independent backtest window" in n for n in ok.notes)


def test_the_table_shows_the_score_that_chose_and_weighted_each_law(cli, tmp_path, monkeypatch):
    """The per-form table prints the score the choice used (its lowest: the chosen form, *), which need not be the
    lowest backtest RMSE at the reach (the issue's table showed power best there while m4 was chosen); the JSON
    has it as `scores`, the weights are score^-power; both tables fit an 80-column terminal."""
    p = tmp_path / "curve.csv"
    pd.DataFrame({"compute": C, "error": _error()}).to_csv(p, index=False)
    monkeypatch.setenv("COLUMNS", "80")
    r = cli("fit", p, "--compute", "compute", "--bootstrap", "20", "--workers", "1", "--predict", "1e5")
    assert r.exit_code == 0, r.output
    assert max(len(line) for line in r.stdout.splitlines()) <= 80, r.stdout
    header = next(line for line in r.stdout.splitlines() if "score" in line and "weight" in line)
    assert header.index("score") < header.index("weight")
    g = json.loads(cli("fit", p, "--compute", "compute", "--bootstrap", "20", "--workers", "1", "--predict",
                       "1e5", "--json").stdout)["groups"][0]
    scores, weights = g["scores"], g["weights"]
    assert g["best_form"] == min(scores, key=scores.get)
    power = g["backtest"]["weight_power"]
    raw = {k: s**-power for k, s in scores.items()}
    assert all(math.isclose(weights[k], raw[k] / sum(raw.values()), rel_tol=1e-9) for k in raw)
    by_rmse = min(g["backtest"]["forms"], key=lambda b: b["rmse_log"] if b["rmse_log"] is not None else 9)
    line = next(x for x in r.stdout.splitlines() if x.strip("│ ").startswith(g["best_form"] + " *"))
    assert f"{scores[g['best_form']]:.4g}" in line
    assert by_rmse["form"] != g["best_form"]  # this curve is the case: the RMSE alone would mislead


def test_without_a_prior_the_score_is_the_backtest_s_per_decade_score_with_its_prior_toward_richer_laws():
    """One group: the score shown is per_decade_score x RICHER^-(p - p_min) (vitbench.fit.backtest, "Choice"):
    a product and a power on the score's chain (tests/test_fit_combine.py counts about 6 roundings)."""
    g = fit_group({}, C, _error(), [""] * len(C), FitSpec(bootstrap=0, reach=0.5))
    assert len(g.scores) == 4
    for b in g.backtest.forms:
        assert g.scores[b.form.name.value] == f64(per_decade_score(b) * RICHER ** -(b.form.n_params - 2),
                                                  roundings=8)


def test_an_interval_without_a_backtest_or_residuals_is_said():
    """Two budgets for a two-parameter law: no residual, no backtest; the prediction has no interval (None), and
    the group says why (the CLI exits 1 on it, tests/test_hostile.py)."""
    c, e = np.array([1.0, 10.0]), np.array([0.5, 0.4])
    g = fit_group({}, c, e, ["", ""], FitSpec(bootstrap=0, predict=[100.0]))
    assert g.predictions[0].ci_low is None and g.predictions[0].ci_high is None
    assert "2 distinct budgets for a law of 2 parameters" in g.no_prediction
    one = fit_group({}, c[:1], e[:1], [""], FitSpec(bootstrap=0, predict=[100.0]))
    assert not one.predictions and "no law could be fitted" in one.no_prediction
    assert LawError(0.1, 0.0, 0.95).band(np.log([0.5]), [1.0], cap=np.array([0.4]))[1][0] == 0.5  # never below mid


def test_the_parameter_error_is_counted_once_the_larger_of_its_two_estimates():
    """The backtest's drift k r already holds its fits' parameter error, and the bootstrap spread estimates the
    same error given the law (vitbench.fit.interval, "Parameters"): the interval takes the larger of the two, not
    their sum. A bootstrap spread below (k r)^2 leaves the interval as wide as without it, and a law term below the
    spread leaves it as wide as the spread alone; equal terms are counted once. (Their sum, the first round's
    rule, held 97.6-99.0 % of the learner curves' points for 95 %.)"""
    le = LawError(0.02, 0.1, 0.95, law_dof=3.0, noise_dof=10.0)
    r, law_v = np.array([0.5, 1.0, 2.0]), (0.1 * np.array([0.5, 1.0, 2.0])) ** 2
    for pv in (0.2 * law_v, law_v, 5.0 * law_v):
        want = np.sqrt(0.02**2 + np.maximum(pv, law_v))
        assert le.sd(r, pv) == f64(want, 6)
        assert np.all(le.sd(r, pv) < np.sqrt(0.02**2 + pv + law_v))  # never the sum
    half = le.quantile(r, 0.0) * le.sd(r, 0.0)
    assert np.all(le.quantile(r, 0.2 * law_v) * le.sd(r, 0.2 * law_v) == half)  # a smaller spread: no wider


def test_the_degrees_of_freedom_are_those_of_the_estimate_the_interval_took():
    """Where the law term is the larger, Student's t carries its few windows (t(3) = 3.18 at 95 % with no noise);
    where the bootstrap spread is, it is counted exact (its replicates are many): the normal's 1.96; the noise's
    n - p in the Satterthwaite sum either way (vitbench.fit.interval, "Counting the evidence")."""
    from scipy import stats

    quiet = LawError(0.0, 0.1, 0.95, law_dof=3.0, noise_dof=10.0)
    assert quiet.quantile([1.0], [0.001])[0] == f64(stats.t.ppf(0.975, 3), 4)
    assert quiet.quantile([1.0], [0.1])[0] == f64(stats.norm.ppf(0.975), 4)
    noisy = LawError(0.05, 0.1, 0.95, law_dof=3.0, noise_dof=10.0)
    between = noisy.quantile([1.0], [0.001])[0]
    assert stats.t.ppf(0.975, 10) < between < stats.t.ppf(0.975, 3)


def test_where_the_law_is_right_the_interval_is_never_narrower_than_its_parameters_and_noise_allow():
    """The issue's curve (an offset law, 2 % noise, 15 points over 3 decades) predicted up to half a decade out:
    there the backtest's few smaller fits measure a drift (k r)^2 below the final fit's own bootstrap spread, and
    an interval from the law term alone was too narrow (the second round: 87.7-89.1 % on the synthetic sets where
    the law is a form). Each reported interval, wherever no bound moved it (its bottom above the laws' floor), is
    at least the interval the law being right gives: the noise and the parameters, k = 0."""
    from vitbench.fit.interval import satterthwaite, student

    xs = 1e3 * 10 ** np.array([0.05, 0.1, 0.25, 0.5])
    g = fit_group({}, C, _error(), [""] * len(C), FitSpec(bootstrap=100, reach=0.5, predict=list(xs)))
    le, r = g.law_error, np.log10(xs / C.max())
    pv = param_log_var(g.fits, g.weights, xs)
    assert np.all(pv > (le.slope * r) ** 2)  # the case: the bootstrap spread is the larger estimate
    mid = np.log([p.value for p in g.predictions])
    low = np.log([p.ci_low for p in g.predictions])
    free = np.array([p.ci_low > floor_bound(g.law(), le) for p in g.predictions])
    assert free.any()
    v = [pv, np.full(pv.size, le.noise**2)]  # the law being right: the bootstrap term (exact), the noise's n - p
    want = student(0.95, satterthwaite(v, [math.inf, le.noise_dof])) * np.sqrt(v[0] + v[1])
    slack = 2 * gamma(8) * np.abs(mid)  # the logs, exp and their difference in float64 (tolerances_stat)
    assert np.all((mid - low)[free] >= (want - slack)[free])
