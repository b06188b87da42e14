"""`vitbench fit` options (--where, --predict, the pooling warning, --workers) and hostile inputs (issue 24)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from vitbench.fit import FORMS, FitSpec, FormName, fit_path

from tolerances_stat import f64

C = np.geomspace(1, 1e4, 12)


def _curve(scale: float, b: float, seed: int) -> np.ndarray:
    return (0.05 + scale * C**-b) * np.exp(np.random.default_rng(seed).normal(0, 0.02, len(C)))


@pytest.fixture
def two_models(tmp_path):
    """Two models measured at the same budgets, in one CSV without a group column that says so."""
    rows = [{"model": m, "benchmark": "digits", "compute": x, "error": y}
            for i, (m, s, b) in enumerate((("small", 0.5, 0.3), ("large", 0.3, 0.5)))
            for x, y in zip(C, _curve(s, b, i))]
    p = tmp_path / "curves.csv"
    pd.DataFrame(rows).to_csv(p, index=False)
    return p


def _fit(cli, path, *args):
    return cli("fit", path, "--compute", "compute", "--error", "error", "--bootstrap", "20", "--workers", "1",
               *args)


def test_pooled_curves_are_warned_about_naming_the_column(cli, two_models):
    r = _fit(cli, two_models, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    note = doc["groups"][0]["notes"][0]
    assert "2 values of 'model' (large, small)" in note and "--group model" in note
    assert "warning:" in r.stderr and "'model'" in r.stderr
    r = _fit(cli, two_models, "--group", "model", "--json")
    assert r.exit_code == 0 and all(not g["notes"] for g in json.loads(r.stdout)["groups"])
    assert "warning" not in r.stderr


def test_where_selects_rows_and_refuses_anything_else(cli, two_models):
    r = _fit(cli, two_models, "--where", "model == 'small' and compute >= 1", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["where"] == "model == 'small' and compute >= 1"
    assert [g["n_points"] for g in doc["groups"]] == [12] and not doc["groups"][0]["notes"]
    r = _fit(cli, two_models, "--where", "`model` in ['large']", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["groups"][0]["n_points"] == 12
    r = _fit(cli, two_models, "--where", "compute >= 2 ** -3 and compute < 10 ** 300", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["groups"][0]["n_points"] == 24  # a literal exponent: allowed
    for expr, says in (("__import__('os').system('echo hi')", "call is not allowed"),
                       ("model.str.len() > 3", "not allowed"),
                       ("model[0] == 's'", "subscript is not allowed"),
                       ("@x > 1", "not an expression"),
                       ("size > 3", "no column 'size'"),
                       ("model ==", "not an expression"),
                       ("model == 'nothing'", "kept none"),
                       ("10 ** 10 ** 10 > 1", "a power whose exponent"),  # would never end
                       ("compute > 2 ** 99999", "a power whose exponent"),
                       ("((9 ** 999) ** 999) ** 999 > 0", "whose base holds a power"),  # ran for minutes
                       ("(99999999999999999999 * 2) ** 999 > compute", "an integer above 2**63"),
                       ("model == 'a' * 1000000000", "arithmetic on text"),  # gigabytes
                       ("compute in [1] * 1000000000", "arithmetic on text or lists")):
        r = _fit(cli, two_models, "--where", expr)
        assert r.exit_code == 2 and "--where" in r.output and says in r.output, (expr, r.output)
        assert "Traceback" not in r.output and len(r.output) < 2048


def test_predict_prints_and_stores_predictions_with_intervals(cli, two_models, tmp_path):
    out = tmp_path / "fit"
    r = _fit(cli, two_models, "--group", "model", "--predict", "1e5,1e6", "--json", "--out", out)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["predict"] == [1e5, 1e6]
    for g in doc["groups"]:
        assert [p["compute"] for p in g["predictions"]] == [1e5, 1e6]
        for p in g["predictions"]:
            assert p["ci_low"] <= p["error"] <= p["ci_high"]
            # the combined law's forms and weights, the largest (the chosen form) first: the group's weights of
            # the forms that fitted, renormalised (Combined.of)
            assert next(iter(p["law"])) == g["best_form"] and list(p["law"].values()) == sorted(p["law"].values(),
                                                                                               reverse=True)
            fitted = {f["form"] for f in g["fits"] if f["status"] == "ok"}
            used = {k: w for k, w in g["weights"].items() if w > 0 and k in fitted}
            assert p["law"].keys() == used.keys()
            total = sum(used.values())  # a sum of <= 4 weights and one division: 4 roundings
            assert all(p["law"][k] == f64(w / total, roundings=4) for k, w in used.items())
        # as far as the furthest prediction: log10(1e6 / top), top's own rounding, the division, the log10
        assert g["backtest"]["reach_decades"] == f64(2.0, roundings=3)
    assert (out / "fit_curves.png").stat().st_size > 1000
    r = _fit(cli, two_models, "--group", "model", "--predict", "1e5")
    assert r.exit_code == 0 and "predictions" in r.stdout and "1e+05" in r.stdout
    for bad in ("inf", "-1", "abc", "nan", "1e5,0"):
        r = _fit(cli, two_models, "--predict", bad)
        assert r.exit_code == 2 and "--predict" in r.output and "Traceback" not in r.output, (bad, r.output)


def test_the_footnote_explains_the_predictions_columns_only_where_they_are_shown(cli, two_models):
    """The footnote explained a 'Backtest miss' column and prediction intervals under a fit without --predict,
    whose tables have neither."""
    r = _fit(cli, two_models, "--group", "model")
    assert r.exit_code == 0, r.output
    said = " ".join(r.stdout.split())  # the footnote as one line, whatever the terminal's width
    assert "Weight: the law's share" in said and "Backtest miss" not in said and "Prediction intervals" not in said
    r = _fit(cli, two_models, "--group", "model", "--predict", "1e5")
    assert r.exit_code == 0, r.output
    said = " ".join(r.stdout.split())
    assert "backtest miss" in said and "Backtest miss: the typical factor" in said
    assert "Prediction intervals: parameters" in said


def test_results_do_not_depend_on_the_number_of_workers(two_models):
    spec = FitSpec(compute="compute", error="error", group=["model"], bootstrap=30, predict=[1e5])
    one = fit_path(two_models, spec, workers=1).to_dict()
    two = fit_path(two_models, spec, workers=2).to_dict()
    assert json.dumps(one, sort_keys=True) == json.dumps(two, sort_keys=True)


def _hostile_csv(tmp_path, name, **cols):
    p = tmp_path / f"{name}.csv"
    pd.DataFrame(cols).to_csv(p, index=False)
    return p


def test_hostile_inputs_exit_2_with_a_short_message_naming_the_option(cli, tmp_path):
    n = len(C)
    good = _curve(0.5, 0.3, 0)
    wide = {f"metric_{i:03d}": np.arange(n, dtype=float) for i in range(100)}
    cases = [  # (csv columns, extra options, what the message must say)
        ({"compute": np.r_[C[:-1], np.inf], "error": good}, [], "(--compute) is not finite"),
        ({"compute": C, "error": np.r_[good[:-1], -np.inf]}, [], "(--error) is not finite"),
        ({"compute": C, "error": np.zeros(n)}, [], "is 0 in every row"),
        ({"compute": C, "error": good * 100}, [], None),  # fine: an error need not be a fraction (a loss)
        ({"compute": C, "error": np.r_[good[:-1], -0.5]}, [], "row 12 holds -0.5"),
        ({"compute": C, "accuracy": np.r_[1 - good[:-1], 1.5]}, [], "(--accuracy) must be a fraction in [0, 1]"),
        ({"compute": C, "error": good * 100}, ["--percent"], None),  # 0-100 read as percent
        ({"compute": C, "error": np.r_[good[:-1] * 100, 150]}, ["--percent"], "row 12 holds 150"),
        ({"compute": C, "error": good}, ["--percent"], None),  # fine: 0-100 read as percent, values < 1 %
        ({"compute": C, **wide}, [], "(more)"),
        ({"compute": C, "error": good}, ["--group", "g" * 5000], "(--group)"),
        ({"compute": C, "error": good}, ["--reach", "-1"], "reach"),
        ({"compute": C, "error": good}, ["--bootstrap", "-5"], "bootstrap"),
        # no column chosen by the user: the default named as one (it read "(--accuracy)", an option not given)
        ({"compute": C, "loss": good}, [], "no column 'accuracy' (--accuracy's default, with no --error and no "
                                             "error column)"),
    ]
    for i, (cols, extra, says) in enumerate(cases):
        path = _hostile_csv(tmp_path, f"h{i}", **cols)
        r = cli("fit", path, "--compute", "compute", "--bootstrap", "0", "--workers", "1", *extra)
        if says is None:
            assert r.exit_code == 0, r.output
            continue
        assert r.exit_code == 2, (i, r.output)
        assert "Traceback" not in r.output and len(r.output.encode()) < 2048, (i, len(r.output))
        assert says.replace("(more)", "more)") in r.output, (i, r.output)
        assert max(len(line) for line in r.output.splitlines()) < 1000, i


def test_a_cross_entropy_curve_fits_with_every_law(tmp_path):
    """Issue 33: a loss above 1 (cross-entropy from ln 10 = 2.3 at chance down to a floor of 0.4) is fitted as it
    is, M4 included: its e0 bound is set from the data, not from errors being fractions."""
    truth = {"a": 2.0, "b": 0.6, "e_inf": 0.4, "e0": 2.3, "alpha": 1.0}
    c = np.geomspace(1, 1e5, 30)
    loss = FORMS[FormName.M4].predict(truth, c) * np.exp(np.random.default_rng(0).normal(0, 0.01, len(c)))
    assert loss.max() > 1.5  # the test is about values > 1
    p = tmp_path / "ce.csv"
    pd.DataFrame({"compute": c, "loss": loss}).to_csv(p, index=False)
    g = fit_path(p, FitSpec(compute="compute", error="loss", bootstrap=0), workers=1).groups[0]
    assert all(f.ok for f in g.fits), [f.message for f in g.fits]
    m4 = g.fit(FormName.M4)
    # 1 % noise on 30 points: the fit's log residuals are the noise (a bad law would miss by far more)
    assert m4.rmse_log < 0.02
    assert m4.params["e0"].value >= loss.max() and m4.params["e_inf"].value <= loss.min()


def test_progress_is_reported_per_group(two_models):
    seen = []
    fit_path(two_models, FitSpec(compute="compute", error="error", group=["model"], bootstrap=0), workers=1,
             progress=lambda done, total, title: seen.append((done, total, title)))
    done = [s for s in seen if s[2] in ("model=large", "model=small")]
    # two steps per group: every group backtested, then every group chosen (with the groups' prior) and predicted
    assert done == [(1, 4, "model=large"), (2, 4, "model=small"), (3, 4, "model=large"), (4, 4, "model=small")]
    steps = [s for s in seen if s not in done]  # within a backtest: after each form and after the backtest
    assert steps[:5] == [(0, 4, f"model=large: {w}")
                         for w in ("power fitted", "offset fitted", "saturating fitted", "m4 fitted", "backtest done")]


def test_a_percent_column_s_fit_is_labelled_as_the_fraction_it_shows(cli, tmp_path):
    """--percent: the column is read as 0-100 and fitted, shown and predicted as a fraction (a = 0.2 for a
    column at 20 %): the label says `error / 100` (it said `error`, under which a prediction 0.0126 of a column
    in percent read 100x too small), in the table, the JSON and for --accuracy alike."""
    c = np.geomspace(1, 1e3, 10)
    err = 20 * c**-0.3 * np.exp(np.random.default_rng(0).normal(0, 0.01, len(c)))  # percent: 20 % .. 2.5 %
    p = tmp_path / "pct.csv"
    pd.DataFrame({"compute": c, "error": err, "acc": 100 - err}).to_csv(p, index=False)
    args = ("--compute", "compute", "--percent", "--form", "power", "--bootstrap", "0", "--workers", "1",
            "--predict", "1e4")
    r = cli("fit", p, "--error", "error", *args, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["error"] == "error / 100"
    pred = doc["groups"][0]["predictions"][0]["error"]
    assert 0.9 < pred / (0.2 * 1e4**-0.3) < 1.1  # the fraction, as labelled
    r = cli("fit", p, "--error", "error", *args)
    assert r.exit_code == 0 and "error = error / 100" in " ".join(r.stdout.split()), r.output
    r = cli("fit", p, "--accuracy", "acc", *args, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["error"] == "1 - acc / 100", r.output


def test_a_fraction_s_prediction_interval_stops_at_1_a_loss_s_does_not(tmp_path):
    """1 - accuracy cannot exceed 1, so its prediction interval is clipped there; the same numbers as a loss are
    not bounded."""
    from vitbench.fit.interval import LawError

    c = np.geomspace(1, 1e3, 12)
    err = 0.6 * c**-0.3 * np.exp(np.random.default_rng(1).normal(0, 0.05, len(c)))
    p = tmp_path / "acc.csv"
    pd.DataFrame({"compute": c, "accuracy": 1 - err, "loss": err}).to_csv(p, index=False)
    spec = dict(compute="compute", bootstrap=0, predict=[1e4], forms=[FormName.POWER])
    assert fit_path(p, FitSpec(accuracy="accuracy", **spec), workers=1).groups[0].law_error.ceiling == 1.0
    assert fit_path(p, FitSpec(error="loss", **spec), workers=1).groups[0].law_error.ceiling is None
    wide = LawError(noise=1.0, slope=0.0, ci=0.95)  # sd 1 in log: 0.5 x e^1.96 = 3.6 unclipped
    lo, hi = wide.band(np.log([0.5]), np.zeros(1))
    clo, chi = replace(wide, ceiling=1.0).band(np.log([0.5]), np.zeros(1))
    assert hi[0] > 1 and chi[0] == 1.0 and clo[0] == lo[0]  # the ceiling clips hi alone: lo, the same sum


def test_no_law_anywhere_exits_1_and_a_compute_past_floating_point_exits_2(cli, tmp_path):
    """One budget, or every row at one compute: no law in any group is no result (exit 1 naming why; before:
    exit 0 with empty tables). Compute of 1e-300 or 1e299: the laws' coefficients in that unit are not finite
    numbers, refused naming the row and the remedy (before: a math domain error traceback, or a CI of nan)."""
    for name, rows in (("one", [(1.0, 0.5)]), ("same", [(100.0, 0.5), (100.0, 0.4), (100.0, 0.45)])):
        p = tmp_path / f"{name}.csv"
        pd.DataFrame(rows, columns=["compute", "error"]).to_csv(p, index=False)
        r = _fit(cli, p)
        assert r.exit_code == 1 and "no law could be fitted in any of the 1 group(s)" in r.output, r.output
        assert "1 distinct compute value" in " ".join(r.output.split()) and "Traceback" not in r.output
    for scale in (1e-300, 1e299):
        p = tmp_path / "far.csv"
        pd.DataFrame({"compute": C * scale, "error": _curve(0.5, 0.3, 0)}).to_csv(p, index=False)
        r = _fit(cli, p)
        assert r.exit_code == 2 and "must lie within 2e-56..4e+55" in r.output and "rescale" in r.output, r.output


def test_rows_with_an_empty_group_are_left_out_with_a_note(cli, tmp_path):
    """An empty group cell (blank, or spaces) is in no group: left out with a note naming the column and the rows,
    as an empty compute or error cell is (before: a group of its own, "all rows", `{"family": null}`, exit 0). A
    group column empty in every row is exit 2 naming it, given or the default: never all rows pooled as one."""
    fams = [("" if i in (0, 5) else " " if i == 9 else "vit") for i in range(len(C))]
    p = tmp_path / "fam.csv"
    pd.DataFrame({"compute": C, "error": _curve(0.5, 0.3, 0), "family": fams}).to_csv(p, index=False)
    for extra in ([], ["--group", "family"]):
        r = _fit(cli, p, "--json", *extra)
        assert r.exit_code == 0, r.output
        doc = json.loads(r.stdout)
        assert [g["group"] for g in doc["groups"]] == [{"family": "vit"}] and doc["groups"][0]["n_points"] == 9
        assert any("3 rows with an empty column 'family'" in d and d.endswith("rows 1, 6, 10")
                   for d in doc["dropped"]), doc["dropped"]
    r = _fit(cli, p)
    assert r.exit_code == 0 and "all rows" not in r.output
    assert "left out: 3 rows with an empty column 'family'" in " ".join(r.output.split()), r.output
    pd.DataFrame({"compute": C, "error": _curve(0.5, 0.3, 0), "family": [""] * len(C)}).to_csv(p, index=False)
    for extra, option in (([], "(--group's default)"), (["--group", "family"], "(--group)")):
        r = _fit(cli, p, *extra)
        out = " ".join(r.output.split())
        assert r.exit_code == 2 and f"column 'family' {option} is empty in every row" in out, r.output
        assert "Traceback" not in r.output


def test_a_missing_column_s_message_shows_spaces_and_other_separators(cli, tmp_path):
    """A header "compute, accuracy" names a column ' accuracy': the message quotes every column name (the space
    showed as nothing: "columns: compute,  accuracy") and says which one has a space; one column holding ';' or a
    tab is a file not separated by commas. The columns are never renamed: a name with its space still works."""
    acc = 1 - _curve(0.5, 0.3, 0)
    cases = (("spaced", ", ", [], "no column 'accuracy'",
              "column ' accuracy' has a leading space (a header with a space after each comma?)",
              "columns: 'compute', ' accuracy'"),
             ("semicolon", ";", [], "no column 'compute' (--compute)",
              "the file has a single column, 'compute;accuracy': it seems separated by ';'",
              "columns: 'compute;accuracy'"),
             ("tab", "\t", [], "no column 'compute' (--compute)", "it seems separated by tabs", ""),
             ("where", ", ", ["--accuracy", " accuracy", "--where", "accuracy > 0"], "--where",
              "column ' accuracy' has a leading space", ""))
    for name, sep, extra, *says in cases:
        p = tmp_path / f"{name}.csv"
        p.write_text(f"compute{sep}accuracy\n" + "".join(f"{c:g}{sep}{a:.6f}\n" for c, a in zip(C, acc)))
        r = cli("fit", p, "--compute", "compute", "--bootstrap", "0", "--workers", "1", *extra)
        out = " ".join(r.output.split())
        assert r.exit_code == 2 and "Traceback" not in r.output, (name, r.output)
        assert all(s in out for s in says), (name, r.output)
    r = cli("fit", tmp_path / "spaced.csv", "--compute", "compute", "--accuracy", " accuracy", "--bootstrap", "0",
            "--workers", "1", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["groups"][0]["n_points"] == len(C), r.output


@pytest.mark.parametrize("option", ["--error", "--accuracy"])
def test_the_compute_column_is_refused_as_the_error(cli, two_models, option):
    """`--compute X --error X` fitted the column against itself (a law through every point) without a word."""
    r = cli("fit", two_models, "--compute", "compute", option, "compute", "--bootstrap", "0", "--workers", "1")
    out = " ".join(r.output.split())
    assert r.exit_code == 2 and f"column 'compute' is both --compute and {option}" in out, r.output
    assert "Traceback" not in out
