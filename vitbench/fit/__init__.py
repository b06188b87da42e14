"""Scaling-law fits: error vs compute per group, a backtest at the user's reach, predictions.

See docs/scaling-laws.md.

    from vitbench.fit import FitSpec, fit_path
    report = fit_path("results/transfer-digits", FitSpec(compute="pretrain_exaflops", predict=[1e-5]))
    report.to_dict()           # the JSON `vitbench fit --json` prints
"""

from vitbench.fit.backtest import Backtest, FormBacktest, choose, run_backtest
from vitbench.fit.combine import Combined
from vitbench.fit.estimate import CurveFit, FitStatus, ParamEstimate, fit_curve
from vitbench.fit.forms import FORMS, Form, FormName
from vitbench.fit.groups import FitReport, FitSpec, GroupFit, Job, Points, Prediction, Prior, fit_group, \
    fit_groups, fit_path, fit_source
from vitbench.fit.source import BENCHMARK_COLUMNS, Source, SourceKind, load_source, results_frame
from vitbench.stats import frontier_mask

__all__ = ["BENCHMARK_COLUMNS", "FORMS", "Backtest", "Combined", "CurveFit", "FitReport", "FitSpec", "FitStatus",
           "Form", "FormBacktest", "FormName", "GroupFit", "Job", "ParamEstimate", "Points", "Prediction", "Prior",
           "Source", "SourceKind", "choose", "fit_curve", "fit_group", "fit_groups", "fit_path", "fit_source",
           "frontier_mask", "load_source", "results_frame", "run_backtest"]
