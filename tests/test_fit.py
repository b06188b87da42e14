"""Scaling-law fits (vitbench.fit, `vitbench fit`, report.fit_figures) on synthetic points of known parameters."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from vitbench.errors import ConfigError
from vitbench.fit import FitSpec, FitStatus, FormName, fit_curve, fit_path, frontier_mask, run_backtest
from vitbench.fit.forms import FORMS

from tolerances_stat import (EPS64, f64, fit_residual_floor, noiseless_fit_bound, noiseless_prediction_bound,
                             stopped_fit_bound, tails_f64)

TRUE = {"e_inf": 0.05, "a": 0.3, "b": 0.45, "c0": 0.02}  # in the units of the compute column below
BUDGETS = np.geomspace(1e-3, 1e3, 12)


def law(c, e_inf=0.0, a=1.0, b=0.5, c0=0.0):
    """The saturating law written out independently of vitbench.fit.forms."""
    return e_inf + a * (np.asarray(c, float) + c0) ** -b


def noisy(seed: int, sigma: float = 0.03, params=TRUE, compute=BUDGETS) -> np.ndarray:
    """Multiplicative (log-normal) noise: relative error, as accuracies on a finite test set roughly have."""
    return law(compute, **params) * np.exp(np.random.default_rng(seed).normal(0, sigma, len(compute)))


def test_noiseless_points_give_the_parameters_exactly():
    for form, params in ((FormName.POWER, {"a": 0.7, "b": 0.3}),
                         (FormName.OFFSET, {"e_inf": 0.1, "a": 0.7, "b": 0.3}),
                         (FormName.SATURATING, TRUE)):
        f = fit_curve(BUDGETS, law(BUDGETS, **params), form, bootstrap=0)
        assert f.status == FitStatus.OK and set(f.params) == set(params)
        # noise-free points: the solver stops at the residuals' rounding floor, the parameters within its
        # conditioning (tests/tolerances_stat.py: noiseless_fit_bound, ~1e-11 relative here)
        bound = noiseless_fit_bound(FORMS[form], params, BUDGETS)
        for k, v in params.items():
            assert f.params[k].value == pytest.approx(v, rel=0, abs=bound[k]), (form, k)
        assert f.rmse_log <= fit_residual_floor(FORMS[form], params, BUDGETS)


def test_parameters_do_not_depend_on_the_compute_unit():
    """Compute in FLOPs instead of exaFLOPs: b and e_inf unchanged, c0 scales by 1e18, a by 1e18^b."""
    e = noisy(3)
    fit = fit_curve(BUDGETS, e, bootstrap=0)
    small = fit.values()
    big = fit_curve(BUDGETS * 1e18, e, bootstrap=0).values()
    # both fit the same normalised problem (x = C / geometric mean) up to x's rounding: each is within the ftol
    # stop of its minimiser (stopped_fit_bound), x 2 for the two; the minimisers themselves move by the rounding
    # floor's share (noiseless_fit_bound, ~1e-11, added)
    stop = stopped_fit_bound(fit.form, small, BUDGETS, fit.rmse_log)
    floor = noiseless_fit_bound(fit.form, small, BUDGETS)
    bound = {k: 2 * stop[k] + floor[k] for k in stop}
    assert big["b"] == pytest.approx(small["b"], rel=0, abs=bound["b"])
    assert big["e_inf"] == pytest.approx(small["e_inf"], rel=0, abs=bound["e_inf"])
    assert big["c0"] == pytest.approx(small["c0"] * 1e18, rel=0, abs=bound["c0"] * 1e18)
    # a in FLOPs is a (1e18)^b in exaFLOPs: its bound in exaFLOPs, carried by the same factor, plus b's error
    # times log(1e18) relative
    assert big["a"] == pytest.approx(small["a"] * 1e18 ** small["b"], rel=0,
                                     abs=(bound["a"] / small["a"] + np.log(1e18) * bound["b"]) * big["a"])


def test_fit_recovers_known_parameters_within_its_cis():
    """Eight noisy draws from known parameters: the 95 % CIs hold the truth in (nearly) every draw, and they are
    narrow enough to mean something (a CI of [0, inf] would always hold it)."""
    draws = 8
    covered = dict.fromkeys(TRUE, 0)
    widths = {k: [] for k in TRUE}
    for seed in range(draws):
        f = fit_curve(BUDGETS, noisy(seed), FormName.SATURATING, bootstrap=200, seed=seed)
        assert f.status == FitStatus.OK and f.n_replicates > 100
        for k, truth in TRUE.items():
            p = f.params[k]
            covered[k] += p.ci_low <= truth <= p.ci_high
            widths[k].append(p.ci_high - p.ci_low)
    for k in TRUE:  # the estimator's coverage here is ~0.9 (docs/scaling-laws.md); 6 of 8 is its 1st percentile
        assert covered[k] >= 6, (k, covered[k])
    assert np.median(widths["b"]) < 0.1 and np.median(widths["e_inf"]) < 0.03  # truth 0.45 and 0.05


def test_bootstrap_band_contains_the_fit_and_widens_with_noise():
    quiet = fit_curve(BUDGETS, noisy(1, sigma=0.01), bootstrap=100)
    loud = fit_curve(BUDGETS, noisy(1, sigma=0.1), bootstrap=100)
    xs = np.geomspace(1e-3, 1e3, 20)
    for f in (quiet, loud):
        lo, hi = f.band(xs)
        mid = f.predict(xs)
        assert np.all(lo <= mid * 1.001) and np.all(mid <= hi * 1.001)
    width = [float(np.mean(np.log(hi / lo))) for lo, hi in (quiet.band(xs), loud.band(xs))]
    assert width[1] > 3 * width[0]


def test_backtest_predicts_points_its_fits_never_saw():
    """Each backtest prediction is the prediction of a fit on the budgets up to its cut-off: changing the points
    beyond a cut-off cannot change what is predicted for them, and the reported error is the error of those
    predictions against those points."""
    e = noisy(5)
    forms = [FORMS[FormName.SATURATING]]
    bt = run_backtest(BUDGETS, e, forms, reach=1.0)
    fb = bt.forms[0]
    assert fb.status == FitStatus.OK and len(bt.cutoffs) >= 2 and fb.points
    for cut in bt.cutoffs:
        seen = BUDGETS <= cut
        ahead = ~seen & (BUDGETS <= cut * 10 * (1 + 1e-9))
        small = fit_curve(BUDGETS[seen], e[seen], FormName.SATURATING, bootstrap=0)
        mine = [p.predicted for p in fb.points if p.cutoff == cut]
        # the backtest runs this very fit_curve call on the same (sorted) arrays: the same numbers, exactly
        assert mine == list(small.predict(BUDGETS[ahead]))
        assert [p.compute for p in fb.points if p.cutoff == cut] == list(BUDGETS[ahead])  # read back
    predicted, observed = (np.array([p.predicted for p in fb.points]), np.array([p.observed for p in fb.points]))
    err = np.log(predicted / observed)
    # the reported error is the full-reach cut-offs' (a full reach of budgets ahead); the later ones predict the
    # rest of the curve, a shorter reach, for the choice and the intervals
    full = fb.cutoff * 10 <= BUDGETS[-1] * (1 + 1e-9)
    assert full.any() and not full.all() and list(full) == [p.full for p in fb.points]
    # FormBacktest.log_err is log(p) - log(o) where err is log(p / o): 2 against 3 roundings of terms <= |log p| +
    # |log o|; the mean of n squares, the square root: n + 2 more, relative to the rmse
    terms = float(np.max(np.abs(np.log(predicted)) + np.abs(np.log(observed))))
    assert fb.rmse_log == f64(float(np.sqrt(np.mean(err[full] ** 2))), roundings=3 + full.sum() + 2,
                              scale=terms + float(np.sqrt(np.mean(err[full] ** 2))))
    # reach = log10(compute / cut-off) <= the backtest's 1 decade, up to its own (1 + 1e-9) selection slack
    # (vitbench/fit/backtest.py: cut * 10**reach * (1 + 1e-9)), log10(1 + 1e-9) < 1e-9
    assert np.all((fb.reach > 0) & (fb.reach <= 1 + 1e-9))
    # what the last points say cannot change the fits that predict them (the largest cut-off's prediction set)
    e2 = e.copy()
    e2[BUDGETS > max(bt.cutoffs)] *= 3.0
    fb2 = run_backtest(BUDGETS, e2, forms, reach=1.0).forms[0]
    last = [i for i, a in enumerate(fb.cutoff) if a == max(bt.cutoffs)]
    assert [fb2.points[i].predicted for i in last] == [fb.points[i].predicted for i in last]  # the same fit
    assert np.mean(fb2.log_err**2) > np.mean(fb.log_err**2)  # ... but the error of predicting them grows
    exact = run_backtest(BUDGETS, law(BUDGETS, **TRUE), forms, reach=1.0).forms[0]
    # noise-free points: each cut-off's fit is at its rounding floor, its predictions off by that through the
    # Jacobian ahead (tests/tolerances_stat.py: noiseless_prediction_bound)
    assert exact.rmse_log <= max(noiseless_prediction_bound(forms[0], TRUE, BUDGETS[BUDGETS <= cut],
                                                            BUDGETS[BUDGETS > cut]) for cut in bt.cutoffs)


def test_too_few_points_is_a_message_not_a_crash():
    c = np.array([1.0, 10.0, 100.0])
    f = fit_curve(c, law(c, **TRUE), FormName.SATURATING)
    assert f.status == FitStatus.TOO_FEW_POINTS and not f.params
    assert "4 parameters" in f.message and "3 distinct compute values" in f.message
    assert fit_curve(c, law(c, **TRUE), FormName.OFFSET).status == FitStatus.OK  # 3 parameters: fits
    same = fit_curve(np.array([1.0, 1.0, 1.0, 1.0, 10.0]), np.array([.5, .4, .45, .5, .3]), FormName.POWER)
    assert same.status == FitStatus.OK  # 2 distinct budgets for 2 parameters
    exact = fit_curve(np.array([1.0, 2.0, 4.0, 8.0]), law([1, 2, 4, 8], **TRUE), FormName.SATURATING)
    assert exact.status == FitStatus.OK and exact.params["b"].ci_low is None
    assert "no confidence interval" in exact.message
    bt = run_backtest(np.geomspace(1, 100, 4), law(np.geomspace(1, 100, 4), **TRUE), [FORMS[FormName.SATURATING]],
                      reach=0.5)
    assert bt.forms[0].status == FitStatus.TOO_FEW_POINTS and "4 distinct budgets" in bt.forms[0].message


def test_frontier_keeps_points_no_cheaper_point_beats():
    c = np.array([1, 2, 2, 4, 8, 16.0])
    e = np.array([0.5, 0.6, 0.4, 0.45, 0.3, 0.35])
    assert frontier_mask(c, e).tolist() == [True, False, True, False, True, False]


# ---------------------------------------------------------------------------------------------------------
# Sources: CSV and results directories
# ---------------------------------------------------------------------------------------------------------
FAMILIES = {"vit": {"e_inf": 0.03, "a": 0.2, "b": 0.35, "c0": 0.01},
            "bit": {"e_inf": 0.06, "a": 0.3, "b": 0.25, "c0": 0.05}}


@pytest.fixture
def csv_path(tmp_path):
    rows = []
    for i, (fam, params) in enumerate(FAMILIES.items()):
        c = np.geomspace(0.01, 100, 8)
        for seed in range(2):
            e = noisy(10 * i + seed, 0.02, params, c)
            rows += [{"family": fam, "exaflops": x, "acc": 1 - y, "note": "ok"} for x, y in zip(c, e)]
    p = tmp_path / "published.csv"
    pd.DataFrame(rows).to_csv(p, index=False)
    return p


def test_fit_path_on_a_csv_groups_and_recovers_each_family(csv_path):
    report = fit_path(csv_path, FitSpec(compute="exaflops", accuracy="acc", bootstrap=100))
    assert report.split_by == ["family"] and report.error_label == "1 - acc"
    assert [g.key["family"] for g in report.groups] == ["bit", "vit"]
    for g in report.groups:
        truth = FAMILIES[g.key["family"]]
        f = g.fit(FormName.SATURATING)
        assert len(g.compute) == 16 and f.ok
        assert f.params["b"].ci_low <= truth["b"] <= f.params["b"].ci_high
        assert g.fit(FormName.POWER).ok and g.fit(FormName.OFFSET).ok


def test_bad_columns_are_config_errors_naming_the_column(tmp_path, csv_path):
    with pytest.raises(ConfigError,
                       match=r"no column 'flops' \(--compute\); columns: 'family', 'exaflops', 'acc'"):
        fit_path(csv_path, FitSpec(compute="flops", accuracy="acc"))
    with pytest.raises(ConfigError, match=r"'note' \(--accuracy\) is not numeric: row 1 holds 'ok'"):
        fit_path(csv_path, FitSpec(compute="exaflops", accuracy="note"))
    with pytest.raises(ConfigError, match=r"no column 'size' \(--group\)"):
        fit_path(csv_path, FitSpec(compute="exaflops", accuracy="acc", group=["size"]))
    with pytest.raises(ConfigError, match=r"'exaflops' \(--accuracy\) must be a fraction in \[0, 1\].*--percent"):
        fit_path(csv_path, FitSpec(compute="acc", accuracy="exaflops"))


@pytest.fixture
def results_dir(tmp_path):
    """A results store with transfer rows of three tiny models at four upstream budgets (synthetic accuracy)."""
    from records import record

    from vitbench.store import Store

    root = tmp_path / "results"
    with Store(root) as store:
        for model, scale in (("ViT-Nano/4", 1.0), ("ViT-Micro/4", 3.0), ("R-Nano", 2.0)):
            fam = "bit" if model == "R-Nano" else "vit"
            for steps in (50, 100, 200, 400):
                flops = scale * steps * 1e-9
                err = float(law(flops / 1e-9, **FAMILIES[fam]))
                for kind, extra in (("fewshot", {"shots": 10}), ("finetune", {})):
                    cfg = {"model": model, "task": kind, "resolution": 32 if fam == "bit" else 16,
                           "pretrain_steps": steps,
                           "dataset": "digits", **extra}
                    store.append(record(kind, cfg,
                                        metrics={"accuracy": 1 - err * (1.3 if kind == "fewshot" else 1),
                                                 "pretrain_exaflops": flops, "images_seen": steps * 64},
                                        key=f"{model}-{kind}-{steps}"))
        store.append(record("bench", {"model": "ViT-Nano/4", "task": "infer", "resolution": 16, "batch_size": 8},
                            metrics={"img_per_s": 900.0}, key="b"))
    return root


def test_results_dir_is_split_by_benchmark_and_family(results_dir):
    report = fit_path(results_dir, FitSpec(bootstrap=0))
    assert report.split_by == ["kind", "dataset", "shots", "family"] and report.spec.compute == "pretrain_exaflops"
    keys = [(g.key["kind"], g.key["family"], len(g.compute)) for g in report.groups]
    assert sorted(keys) == [("fewshot", "bit", 4), ("fewshot", "vit", 8), ("finetune", "bit", 4),
                            ("finetune", "vit", 8)]
    vit = next(g for g in report.groups if g.key == {**g.key, "kind": "finetune", "family": "vit"})
    f = vit.fit(FormName.SATURATING)  # noiseless rows: the law comes back (compute in exaFLOPs = 1e-9 x units)
    # in exaFLOPs: a (C / 1e-9 + c0)^-b = a 1e-9^b (C + 1e-9 c0)^-b; the error stored as 1 - accuracy rounds it
    # once more, absolutely (2 EPS64 / the smallest error, relative)
    truth = {**FAMILIES["vit"], "a": FAMILIES["vit"]["a"] * 1e-9 ** FAMILIES["vit"]["b"],
             "c0": FAMILIES["vit"]["c0"] * 1e-9}
    bound = noiseless_fit_bound(FORMS[FormName.SATURATING], truth, np.asarray(vit.compute),
                                extra=2 * EPS64 / float(np.min(vit.error)))
    assert f.params["b"].value == pytest.approx(truth["b"], rel=0, abs=bound["b"])
    assert f.params["c0"].value == pytest.approx(truth["c0"], rel=0, abs=bound["c0"])
    images = fit_path(results_dir, FitSpec(compute="images_seen", group=["model"], bootstrap=0))
    assert {g.key["model"] for g in images.groups} == {"ViT-Nano/4", "ViT-Micro/4", "R-Nano"}


def test_cli_fit_csv_end_to_end(cli, csv_path, tmp_path):
    out = tmp_path / "fit-out"
    r = cli("fit", csv_path, "--compute", "exaflops", "--accuracy", "acc", "--bootstrap", "50", "--json",
            "--out", out)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)  # stdout is the JSON document and nothing else
    assert doc["compute"] == "exaflops" and doc["error"] == "1 - acc" and len(doc["groups"]) == 2
    g = doc["groups"][0]
    assert g["group"] == {"family": "bit"} and g["n_points"] == 16
    assert [f["form"] for f in g["fits"]] == ["power", "offset", "saturating", "m4"]
    sat = g["fits"][2]
    assert sat["status"] == "ok" and set(sat["params"]) == {"e_inf", "a", "b", "c0"}
    assert sat["params"]["b"]["ci_low"] < sat["params"]["b"]["value"] < sat["params"]["b"]["ci_high"]
    bt = {f["form"]: f for f in g["backtest"]["forms"]}
    assert bt["saturating"]["n_predictions"] > 0 and bt["saturating"]["rmse_log"] is not None
    # weights w / w.sum(): one rounding each, k - 1 more in the sum
    assert g["best_form"] in bt and sum(g["weights"].values()) == f64(1.0, roundings=2 * len(g["weights"]))
    assert json.loads((out / "fit.json").read_text()) == doc
    for name in ("fit_curves", "compute_frontier"):
        assert (out / f"{name}.png").stat().st_size > 1000 and (out / f"{name}.svg").is_file()
    r = cli("fit", csv_path, "--compute", "exaflops", "--accuracy", "acc", "--bootstrap", "0", "--form", "power")
    assert r.exit_code == 0 and "power" in r.stdout and "saturating" not in r.stdout


def test_cli_fit_bad_input_exits_2_naming_the_column(cli, csv_path, tmp_path):
    r = cli("fit", csv_path, "--compute", "gflops", "--accuracy", "acc")
    assert r.exit_code == 2 and "'gflops'" in r.output
    assert "columns: 'family', 'exaflops', 'acc', 'note'" in r.output  # quoted: a name's space shows
    assert "Traceback" not in r.output
    r = cli("fit", csv_path, "--compute", "exaflops", "--accuracy", "note")
    assert r.exit_code == 2 and "'note'" in r.output and "not numeric" in r.output
    r = cli("fit", csv_path, "--compute", "exaflops", "--accuracy", "acc", "--form", "cubic")
    assert r.exit_code == 2 and "--form" in r.output and "m4" in r.output and "cubic" in r.output
    (tmp_path / "x.txt").write_text("a")
    r = cli("fit", tmp_path / "x.txt")
    assert r.exit_code == 2 and "expected a results directory" in r.output


def test_cli_fit_results_dir_and_figures(cli, results_dir, tmp_path):
    from vitbench.report import fit_figures
    from vitbench.tidy import load

    r = cli("fit", results_dir, "--bootstrap", "20", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    bit = [g for g in doc["groups"] if g["group"]["family"] == "bit"]
    sat = next(f for f in bit[0]["fits"] if f["form"] == "saturating")
    assert "no confidence interval" in sat["message"]  # 4 budgets for 4 parameters: a fit, no CI
    df = load(results_dir)
    fig = fit_figures.fitted_curves(df, spec=FitSpec(bootstrap=20))
    assert len(fig.axes) == 2  # one panel per benchmark: fewshot 10-shot, finetune
    assert fit_figures.compute_frontier(df, spec=FitSpec(bootstrap=0)) is not None
    speed = fit_figures.throughput_vs_accuracy(df, speed_task="infer")  # ViT-Nano/4: an infer row at 16 px
    assert speed is not None and len(speed.axes) == 2
    assert fit_figures.throughput_vs_accuracy(df[df["kind"] != "bench"], speed_task="infer") is None
    assert fit_figures.fitted_curves(df[df["kind"] == "bench"]) is None  # nothing to fit: no figure


def test_cli_fit_results_dir_writes_the_figures_with_the_speed_rows(cli, results_dir, tmp_path):
    out = tmp_path / "fit"
    r = cli("fit", results_dir, "--bootstrap", "10", "--out", out)
    assert r.exit_code == 0, r.output
    written = {p.name for p in out.iterdir()}
    assert {"fit.json", "fit_curves.png", "compute_frontier.png", "throughput_vs_accuracy.png"} <= written


def test_an_exponent_at_its_bound_is_said_not_reported_as_a_slope():
    c = np.geomspace(1, 1000, 8)
    flat = 0.3 + np.array([0.02, 0.01, -0.01, 0.005, -0.005, 0.01, -0.01, 0])  # no trend, only noise
    f = fit_curve(c, flat, FormName.SATURATING, bootstrap=20)
    assert f.exponent_at_bound and "b at its bound" in f.message and f.to_dict()["exponent_at_bound"]
    falling = fit_curve(c, law(c, **TRUE), FormName.SATURATING, bootstrap=20)
    assert not falling.exponent_at_bound and falling.message is None


def test_cli_fit_out_naming_a_file_is_exit_2_before_fitting(cli, csv_path, tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("x")
    r = cli("fit", csv_path, "--accuracy", "acc", "--bootstrap", "10", "--out", taken)
    assert r.exit_code == 2 and "--out" in r.output and "is a file" in r.output and "Traceback" not in r.output
    assert taken.read_text() == "x"


def test_cli_fit_out_writes_only_its_own_files(cli, csv_path, tmp_path):
    """--out holds a file of the user's: refused before fitting, nothing written, the file untouched; with
    --allow-other-files the fit's files go beside it. A fit's own files are replaced by the next fit, but not once
    the user edited one; a name taken by a folder stops it with nothing written (before: fit.json and two figures
    were written, then it failed)."""
    out = tmp_path / "o"
    out.mkdir()
    (out / "fit.json").write_text("mine")
    args = ("fit", csv_path, "--compute", "exaflops", "--accuracy", "acc", "--bootstrap", "5", "--out", out)
    r = cli(*args)
    assert r.exit_code == 2 and "no fit can prove it wrote (fit.json)" in r.output and "Traceback" not in r.output
    assert sorted(p.name for p in out.iterdir()) == ["fit.json"] and (out / "fit.json").read_text() == "mine"
    (out / "fit.json").rename(out / "notes.txt")
    r = cli(*args, "--allow-other-files")
    assert r.exit_code == 0, r.output
    assert (out / "notes.txt").read_text() == "mine" and json.loads((out / "fit.json").read_text())["groups"]
    assert cli(*args, "--allow-other-files").exit_code == 0  # its own files: replaced
    (out / "fit_curves.svg").write_text("edited")
    r = cli(*args, "--allow-other-files")
    assert r.exit_code == 2 and "fit_curves.svg not written by `vitbench fit`" in " ".join(r.output.split())
    assert (out / "fit_curves.svg").read_text() == "edited"
    fresh = tmp_path / "fresh"
    (fresh / "compute_frontier.png").mkdir(parents=True)
    r = cli("fit", csv_path, "--compute", "exaflops", "--accuracy", "acc", "--bootstrap", "5", "--out", fresh,
            "--allow-other-files")
    assert r.exit_code == 2 and sorted(p.name for p in fresh.iterdir()) == ["compute_frontier.png"], r.output


def test_backtest_cutoffs_full_reach_first_then_later_then_earlier():
    """--cutoffs 1: the full-reach cut-off alone; 3: it and the two later ones (3/4 and 1/2 of the reach before
    the last budget, predicting the rest); 4: one a quarter-reach earlier than the full-reach one too."""
    from vitbench.fit.backtest import _cutoffs

    budgets = np.geomspace(1, 1e4, 41)  # 0.1 decade apart: a cut-off is the last budget at or before its place
    depth = {n: [round(4 - float(np.log10(budgets[j])), 6) for j in _cutoffs(budgets, 1.0, 6, n)]
             for n in (1, 3, 4)}  # decades before the last budget
    assert depth == {1: [1.0], 3: [1.0, 0.8, 0.5], 4: [1.3, 1.0, 0.8, 0.5]}  # ascending cut-offs


def test_the_choice_scores_error_per_decade_of_reach():
    """A cut-off predicting a shorter reach with proportionally smaller misses scores the same as one predicting
    the full reach: both miss k per decade, and the score is k whatever the recency weights."""
    from vitbench.fit.backtest import FormBacktest, Prediction, per_decade_score

    k, b = 0.04, FormBacktest(FORMS[FormName.POWER])
    for cut in (10.0, 31.6):
        c = np.geomspace(cut * 1.5, 100.0, 5)
        predicted = np.exp(k * np.log10(c / cut))  # log error = k x reach
        b.points += [Prediction(cut, x, 1.0, p, True) for x, p in zip(c.tolist(), predicted.tolist())]
    # reach r is the same log10 on both sides (read back); a log error log(exp(k r)) - log(1) is k r (1 + d),
    # |d| <= EPS64 (2 + 1 / (k r)) (exp's rounding is EPS64 absolute in the log); per cut-off the ratio of mean
    # squares: 2 d + 13 roundings, the recency-weighted mean 5 more, the sqrt halves and adds 1, all relative
    smallest = k * float(np.log10(1.5))  # the smallest k r: c = 1.5 cut
    assert per_decade_score(b) == f64(k, roundings=int(np.ceil((2 * (2 + 1 / smallest) + 18) / 2 + 1)))


def test_the_intervals_error_model_adds_cut_offs_spread_a_reach_apart():
    """Every form the combined law weighs is also backtested SPREAD reaches before the last budget (2 and 3: tails
    that do not overlap the choice's cut-offs'), each predicting a reach ahead; those cut-offs enter the law's
    error model (one drift independent tail each: the degrees of freedom count them) and the JSON, never the
    choice's scores."""
    from vitbench.fit import fit_group
    from vitbench.fit.backtest import SPREAD

    c = np.geomspace(1, 1e6, 61)  # 0.1 decade apart
    g = fit_group({}, c, noisy(3, compute=c), [""] * len(c), FitSpec(bootstrap=0, reach=1.0))
    law = g.law()
    assert [b.form.name for b in g.backtest.spread] == [f.form.name for f in law.fits] and len(law.fits) > 1
    for spread in g.backtest.spread:
        assert spread.status == FitStatus.OK
        assert sorted(round(6 - float(np.log10(x)), 6) for x in spread.fits) == sorted(SPREAD)
        # up to the backtest's own (1 + 1e-9) selection slack (vitbench/fit/backtest.py), as above
        assert np.all(spread.reach <= 1.0 + 1e-9) and np.all(spread.reach > 0)
        assert not set(spread.fits) & set(g.backtest.cutoffs)
    # the choice's cut-offs share one tail (windows ending at the last budget), each spread one has its own
    spread = g.backtest.spread[0]
    parts = [g.backtest.get(spread.form), spread]  # the cut-offs the combined law's misses have
    cutoff = np.concatenate([b.cutoff for b in parts])
    assert g.law_error.law_dof == tails_f64(1 + len(SPREAD), cutoff, np.concatenate([b.reach for b in parts]))
    listed = json.loads(json.dumps(g.backtest.to_dict()))["spread"]
    assert [s["form"] for s in listed] == [f.form.name.value for f in law.fits]


def test_a_sources_kind_is_not_its_rows_record_kind(tmp_path):
    """Issue 52 item 5: Source.source_kind (results or CSV) and a row's `kind` column (the record kind) are two
    names: a CSV with a `kind` column stays a CSV, not split by that column."""
    from vitbench.fit import SourceKind, load_source

    path = tmp_path / "points.csv"
    path.write_text("kind,compute,error\nfewshot,1,0.5\nfinetune,2,0.4\n")
    src = load_source(path)
    assert src.source_kind is SourceKind.CSV and "kind" in src.frame.columns
    assert src.benchmark_columns == []
